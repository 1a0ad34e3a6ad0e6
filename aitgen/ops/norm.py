"""Normalisation: batchnorm (inference), layernorm, groupnorm, rmsnorm. Channels are the last dim.

Operand conventions (what the verifier and the passes see):
- batchnorm: exactly (x, scale, bias, mean, var), every parameter [C] with C = x.shape[-1].
- layernorm / groupnorm: (x), (x, weight) or (x, weight, bias); a bias never comes without a
  weight, so the operand position alone says what an operand is (a builder given only a bias
  passes a ones constant as the weight).
- rmsnorm: (x) or (x, weight).
- layernorm / rmsnorm with a prologue (a fused element-wise input, see ops/prologue.py): its extra
  operands follow, and attrs.prologue.num_inputs - 1 says how many there are.
Parameters have x's dtype; the oracle computes every statistic in float32.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.dims import shape_str
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.opdef import infer_types
from ..ir.tensor import Tensor, constant
from . import float64
from .fused import Expr
from .prologue import MAX_EXTRA, with_prologue_infer, with_prologue_reference
from .registry import Category, check, make_op1, register

__all__ = ["BatchNormAttrs", "LayerNormAttrs", "GroupNormAttrs", "RMSNormAttrs",
           "batchnorm", "layernorm", "groupnorm", "rmsnorm"]


@dataclasses.dataclass(frozen=True)
class BatchNormAttrs:
    eps: float = 1e-5


@dataclasses.dataclass(frozen=True)
class LayerNormAttrs:
    num_axes: int = 1  # normalise over the last num_axes dims
    eps: float = 1e-5
    # fused element-wise input (residual add): normalise prologue(x, extras); see ops/prologue.py
    prologue: Optional[Expr] = None


@dataclasses.dataclass(frozen=True)
class GroupNormAttrs:
    groups: int
    eps: float = 1e-5


@dataclasses.dataclass(frozen=True)
class RMSNormAttrs:
    num_axes: int = 1
    eps: float = 1e-6
    prologue: Optional[Expr] = None  # as LayerNormAttrs.prologue


# -- inference ------------------------------------------------------------------------------

_PARAM_NAMES = {
    OpKind.BATCHNORM: ("scale", "bias", "mean", "var"),
    OpKind.LAYERNORM: ("weight", "bias"),
    OpKind.GROUPNORM: ("weight", "bias"),
    OpKind.RMSNORM: ("weight",),
}


def _check_params(kind: OpKind, x: Tensor, params, want_shape) -> None:
    for pname, p in zip(_PARAM_NAMES[kind], params):
        check(p.dtype == x.dtype, f"{pname} has dtype {p.dtype}, x has {x.dtype}", DTypeError)
        check(tuple(p.shape) == tuple(want_shape),
              f"{pname} has shape {shape_str(p.shape)}, expected {shape_str(want_shape)}")


def _infer_batchnorm(inputs, attrs):
    x, *params = inputs
    check(x.ndim >= 1, "x must have rank >= 1 (channels last)")
    _check_params(OpKind.BATCHNORM, x, params, x.shape[-1:])
    return [(x.shape, x.dtype)]


def _make_infer_lastaxes(kind: OpKind):
    def infer(inputs, attrs):
        x, *params = inputs
        n = attrs.num_axes
        check(isinstance(n, int) and 1 <= n <= x.ndim,
              f"num_axes must be in [1, rank {x.ndim}], got {n}")
        _check_params(kind, x, params, x.shape[-n:])
        return [(x.shape, x.dtype)]
    return infer


def _infer_groupnorm(inputs, attrs):
    x, *params = inputs
    g = attrs.groups
    check(x.ndim >= 2, f"x must be channel-last [N, ..., C] with rank >= 2, got rank {x.ndim}")
    check(isinstance(g, int) and g >= 1, f"groups must be a positive int, got {g!r}")
    c = x.shape[-1]
    check(c.is_static, f"the channel dim must be static, got {c}")
    check(c.value % g == 0, f"channels {c.value} are not divisible by groups {g}")
    _check_params(OpKind.GROUPNORM, x, params, x.shape[-1:])
    return [(x.shape, x.dtype)]


# -- references -----------------------------------------------------------------------------
# Two-pass statistics (mean, then mean of squared deviations): one-pass E[x^2] - E[x]^2 cancels
# catastrophically for inputs with a large mean, which is exactly what an oracle must not do.

def _empty_safe(fn):
    # Zero-sized inputs (an IntVar at lower bound 0) give an empty output; statistics over an empty
    # slice would only warn and produce NaN that nobody can see.
    def ref(args, attrs, ctx):
        return [np.empty(args[0].shape, np.float32)] if args[0].size == 0 else fn(args, attrs, ctx)
    return ref


def _affine(y, args):
    if len(args) > 1:
        y = y * args[1]
    if len(args) > 2:
        y = y + args[2]
    return y


def _ref_batchnorm(args, attrs, ctx):
    x, scale, bias, mean, var = args
    inv = scale / np.sqrt(var + np.float32(attrs.eps))
    return [(x - mean) * inv + bias]


def _ref_layernorm(args, attrs, ctx):
    x = args[0]
    axes = tuple(range(x.ndim - attrs.num_axes, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    d = x - mu
    var = np.mean(d * d, axis=axes, keepdims=True)
    return [_affine(d / np.sqrt(var + np.float32(attrs.eps)), args)]


def _ref_rmsnorm(args, attrs, ctx):
    x = args[0]
    axes = tuple(range(x.ndim - attrs.num_axes, x.ndim))
    ms = np.mean(x * x, axis=axes, keepdims=True)
    return [_affine(x / np.sqrt(ms + np.float32(attrs.eps)), args)]


def _ref_groupnorm(args, attrs, ctx):
    x = args[0]
    n, c, g = x.shape[0], x.shape[-1], attrs.groups
    # [N, spatial..., C] -> [N, S, G, C/G]: a group's statistics cover axes 1 and 3.
    xg = x.reshape(n, -1, g, c // g)
    mu = xg.mean(axis=(1, 3), keepdims=True)
    d = xg - mu
    var = np.mean(d * d, axis=(1, 3), keepdims=True)
    y = (d / np.sqrt(var + np.float32(attrs.eps))).reshape(x.shape)
    return [_affine(y, args)]


register(OpKind.BATCHNORM, Category.NORM, BatchNormAttrs, _infer_batchnorm, _ref_batchnorm,
         num_inputs=(5, 5), float_only=True)
def _row_axes(attrs, ndim: int) -> int:
    return attrs.num_axes


# A prologue's extra operands follow weight and bias (ops/prologue.py).
register(OpKind.LAYERNORM, Category.NORM, LayerNormAttrs,
         with_prologue_infer(_make_infer_lastaxes(OpKind.LAYERNORM), _row_axes),
         with_prologue_reference(_empty_safe(_ref_layernorm)), num_inputs=(1, 3 + MAX_EXTRA), float_only=True)
register(OpKind.RMSNORM, Category.NORM, RMSNormAttrs, with_prologue_infer(_make_infer_lastaxes(OpKind.RMSNORM), _row_axes),
         with_prologue_reference(_empty_safe(_ref_rmsnorm)), num_inputs=(1, 2 + MAX_EXTRA), float_only=True)
register(OpKind.GROUPNORM, Category.NORM, GroupNormAttrs, _infer_groupnorm, _empty_safe(_ref_groupnorm),
         num_inputs=(1, 3), float_only=True)


# -- builders -------------------------------------------------------------------------------

def _eps(kind: OpKind, eps, name) -> float:
    e = float(eps)
    if not (np.isfinite(e) and e >= 0):
        label = kind.value + (f" '{name}'" if name else "")
        raise ValueError(f"{label}: eps must be finite and >= 0, got {eps}")
    return e


def _operands(kind: OpKind, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
              norm_shape, name) -> list:
    ops = [x]
    if weight is None and bias is not None:
        if not isinstance(x, Tensor):
            raise DTypeError(f"{kind.value}: x is a {type(x).__name__}, not a Tensor")
        if not all(d.is_static for d in norm_shape):
            raise ShapeError(f"{kind.value}" + (f" '{name}'" if name else "")
                             + f": a bias without a weight needs static normalised dims, got "
                             f"{shape_str(norm_shape)}; pass a weight of ones")
        weight = constant(np.ones([d.value for d in norm_shape], dtype=x.dtype.np), dtype=x.dtype)
    if weight is not None:
        ops.append(weight)
    if bias is not None:
        ops.append(bias)
    return ops


def _norm_shape(x, num_axes: int):
    if isinstance(x, Tensor) and isinstance(num_axes, int) and 1 <= num_axes <= x.ndim:
        return x.shape[-num_axes:]
    return ()  # inference reports the bad num_axes / operand with the op's label


def batchnorm(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float = 1e-5,
              name=None) -> Tensor:
    """(x - mean) / sqrt(var + eps) * scale + bias over the last (channel) dim; all params [C]."""
    attrs = BatchNormAttrs(_eps(OpKind.BATCHNORM, eps, name))
    ops = [x, scale, bias, mean, var]
    if all(isinstance(t, Tensor) for t in ops) and x.dtype is DType.float64:  # float32 kernels
        infer_types(OpKind.BATCHNORM, ops, attrs, name)  # the op's checks and messages
        return float64.batchnorm(*ops, attrs.eps, name)
    return make_op1(OpKind.BATCHNORM, ops, attrs, name)


def layernorm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
              eps: float = 1e-5, num_axes: int = 1, name=None) -> Tensor:
    """weight/bias have shape x.shape[-num_axes:]. Operands: x, then weight and bias when given
    (bias without weight is passed as weight=ones constant by the builder)."""
    ops = _operands(OpKind.LAYERNORM, x, weight, bias, _norm_shape(x, num_axes), name)
    attrs = LayerNormAttrs(num_axes, _eps(OpKind.LAYERNORM, eps, name))
    if isinstance(x, Tensor) and x.dtype is DType.float64 and _norm_shape(x, num_axes):  # float32 kernels
        return float64.layernorm(x, *(ops[1:] + [None, None])[:2], attrs.eps, num_axes, name)
    return make_op1(OpKind.LAYERNORM, ops, attrs, name)


def groupnorm(x: Tensor, groups: int, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
              eps: float = 1e-5, name=None) -> Tensor:
    """x [N, ..., C] channel-last; stats over (spatial dims, C/groups) per group; weight/bias [C].

    Operands: x, then weight and bias when given (a bias alone gets a ones weight constant)."""
    ops = _operands(OpKind.GROUPNORM, x, weight, bias, _norm_shape(x, 1), name)
    attrs = GroupNormAttrs(groups, _eps(OpKind.GROUPNORM, eps, name))
    if isinstance(x, Tensor) and x.dtype is DType.float64:  # the norm kernels compute in float32
        infer_types(OpKind.GROUPNORM, ops, attrs, name)  # the op's checks (groups divide C, rank)
        return float64.groupnorm(x, groups, *(ops[1:] + [None, None])[:2], attrs.eps, name)
    return make_op1(OpKind.GROUPNORM, ops, attrs, name)


def rmsnorm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6, num_axes: int = 1,
            name=None) -> Tensor:
    """x * rsqrt(mean(x^2 over the last num_axes dims) + eps) * weight; weight x.shape[-num_axes:].

    Operands: x, then weight when given."""
    ops = [x] if weight is None else [x, weight]
    attrs = RMSNormAttrs(num_axes, _eps(OpKind.RMSNORM, eps, name))
    if isinstance(x, Tensor) and x.dtype is DType.float64 and _norm_shape(x, num_axes):  # float32 kernels
        return float64.rmsnorm(x, weight, attrs.eps, num_axes, name)
    return make_op1(OpKind.RMSNORM, ops, attrs, name)
