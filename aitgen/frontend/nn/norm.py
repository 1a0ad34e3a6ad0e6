"""Normalisation layers; channels (features) are the last dim.

Initial values are deliberately NOT torch's (ones, zeros, running stats 0 and 1): with those, a
normalisation layer is nearly the identity and a wrong scale/shift/statistic in an op, a fusion or
a kernel goes unseen. Scales are drawn from U(0.5, 1.5), shifts and running means from
U(-0.1, 0.1), running variances from U(0.5, 1.5), all from the seeded generator.
"""
from __future__ import annotations

from typing import Sequence, Union

from ... import ops
from ...errors import ShapeError
from ...ir.tensor import constant
from . import init
from ._util import check_input, label, positive
from .module import Module, Parameter

__all__ = ["BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm"]


def _scale(shape, dtype) -> Parameter:
    return Parameter(init.uniform(shape, 0.5, 1.5, dtype), dtype)


def _shift(shape, dtype) -> Parameter:
    return Parameter(init.uniform(shape, -0.1, 0.1, dtype), dtype)


def _normalized(shape: Union[int, Sequence[int]], cls: str) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if not dims:
        raise ValueError(f"{cls}: normalized_shape must not be empty")
    return tuple(positive(d, f"{cls} normalized_shape") for d in dims)


def _check_trailing(mod, x, shape: tuple[int, ...]) -> None:
    check_input(mod, x)
    tail = x.shape[-len(shape):] if x.ndim >= len(shape) else None
    if tail is None or any(d.is_static and d.value != s for d, s in zip(tail, shape)):
        raise ShapeError(f"{label(mod)}: input shape [{', '.join(map(str, x.shape))}] does not end "
                         f"in the normalized shape {list(shape)}")


class BatchNorm2d(Module):
    """Inference batch norm over NHWC input with parameters weight, bias, running_mean and
    running_var (all [num_features], all in state_dict, as torch names them)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 dtype="float32"):
        super().__init__()
        self.num_features = positive(num_features, "BatchNorm2d num_features")
        self.eps = float(eps)
        self.momentum = momentum  # training only; kept so torch-style constructor calls work
        self.weight = _scale(self.num_features, dtype) if affine else None
        self.bias = _shift(self.num_features, dtype) if affine else None
        self.running_mean = _shift(self.num_features, dtype)
        self.running_var = Parameter(init.uniform(self.num_features, 0.5, 1.5, dtype), dtype)
        if not affine:  # the op always takes a scale and a shift; these are not state
            self._unit = constant(init.ones(self.num_features, dtype))
            self._zero = constant(init.zeros(self.num_features, dtype))

    def forward(self, x):
        check_input(self, x, rank=4, channels=self.num_features, channel_what="channels (NHWC)")
        w = self.weight if self.weight is not None else self._unit
        b = self.bias if self.bias is not None else self._zero
        return ops.batchnorm(x, w, b, self.running_mean, self.running_var, eps=self.eps,
                             name=self._op_name())

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, affine={self.weight is not None}"


class LayerNorm(Module):
    """Normalises over the trailing dims given by normalized_shape."""

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, dtype="float32"):
        super().__init__()
        self.normalized_shape = _normalized(normalized_shape, "LayerNorm")
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.weight = _scale(self.normalized_shape, dtype) if elementwise_affine else None
        self.bias = _shift(self.normalized_shape, dtype) if elementwise_affine and bias else None

    def forward(self, x):
        _check_trailing(self, x, self.normalized_shape)
        return ops.layernorm(x, self.weight, self.bias, eps=self.eps, num_axes=len(self.normalized_shape),
                             name=self._op_name())

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """Channel-last group norm: statistics over the spatial dims and each group of
    num_channels/num_groups channels."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 dtype="float32"):
        super().__init__()
        self.num_groups = positive(num_groups, "GroupNorm num_groups")
        self.num_channels = positive(num_channels, "GroupNorm num_channels")
        if self.num_channels % self.num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.eps = float(eps)
        self.affine = bool(affine)
        self.weight = _scale(self.num_channels, dtype) if affine else None
        self.bias = _shift(self.num_channels, dtype) if affine else None

    def forward(self, x):
        check_input(self, x, channels=self.num_channels, channel_what="channels (channel-last)")
        return ops.groupnorm(x, self.num_groups, self.weight, self.bias, eps=self.eps, name=self._op_name())

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing dims given by dim."""

    def __init__(self, dim: Union[int, Sequence[int]], eps: float = 1e-6, elementwise_affine: bool = True,
                 dtype="float32"):
        super().__init__()
        self.normalized_shape = _normalized(dim, "RMSNorm")
        self.eps = float(eps)
        self.weight = _scale(self.normalized_shape, dtype) if elementwise_affine else None

    def forward(self, x):
        _check_trailing(self, x, self.normalized_shape)
        return ops.rmsnorm(x, self.weight, eps=self.eps, num_axes=len(self.normalized_shape),
                           name=self._op_name())

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"
