"""Activation modules: thin wrappers over the element-wise ops and softmax."""
from __future__ import annotations

from ... import ops
from .module import Module

__all__ = ["ReLU", "ReLU6", "GELU", "SiLU", "Sigmoid", "Tanh", "Hardswish", "Softmax"]


class _Activation(Module):
    # `inplace` is accepted and ignored: graphs have no in-place ops, and torch code passes it.
    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x):
        return type(self)._fn(x, name=self._op_name())


class ReLU(_Activation):
    _fn = staticmethod(ops.relu)


class ReLU6(_Activation):
    _fn = staticmethod(ops.relu6)


class SiLU(_Activation):
    _fn = staticmethod(ops.silu)


class Sigmoid(_Activation):
    _fn = staticmethod(ops.sigmoid)


class Tanh(_Activation):
    _fn = staticmethod(ops.tanh)


class Hardswish(_Activation):
    _fn = staticmethod(ops.hardswish)


class GELU(Module):
    """approximate: "none" (erf, torch's default) or "tanh"."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return ops.gelu(x, approximate=self.approximate, name=self._op_name())

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = int(dim)

    def forward(self, x):
        return ops.softmax(x, axis=self.dim, name=self._op_name())

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
