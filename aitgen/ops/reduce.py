"""Reductions: sum, mean, max, min, var, prod over axes, with keepdims; argmax / argmin along one axis.

`axes`: None reduces every axis; an int or a sequence of ints (negative counts from the end)
reduces those; an empty sequence reduces nothing (numpy's meaning of `axis=()`). A repeated axis is
a ShapeError. sum/max/min accept floats and ints (an int sum keeps the operand's dtype and wraps
like a fixed-width kernel accumulator); mean and var are float only. bool operands are rejected: cast them first.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

import numpy as np

from ..errors import DTypeError, RuntimeInputError, ShapeError
from ..ir.dims import IntImm
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .registry import Category, check, make_op1, register

__all__ = ["ReduceAttrs", "ArgReduceAttrs", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
           "reduce_var", "reduce_prod", "argmax", "argmin"]

Axes = Optional[Union[int, Sequence[int]]]


@dataclasses.dataclass(frozen=True)
class ReduceAttrs:
    axes: tuple[int, ...]   # normalised, sorted, non-negative
    keepdims: bool = False
    correction: int = 0     # reduce_var only: divide by (n - correction)


def _infer(inputs, attrs):
    (x,) = inputs
    check(x.dtype != DType.bool, "needs a float or int operand, got bool (cast it first)", DTypeError)
    ax = attrs.axes
    check(isinstance(ax, tuple) and all(isinstance(a, int) and 0 <= a < x.ndim for a in ax)
          and list(ax) == sorted(set(ax)),
          f"axes {ax!r} must be sorted, unique and in [0, {x.ndim})")
    check(isinstance(attrs.correction, int) and attrs.correction >= 0,
          f"correction must be an int >= 0, got {attrs.correction!r}")
    if attrs.keepdims:
        shape = tuple(IntImm(1) if i in ax else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in ax)
    return [(shape, x.dtype)]


def _ref_sum(x, attrs):
    # An int sum accumulates in the operand's type, so the oracle wraps as a fixed-width kernel would.
    return np.sum(x, axis=attrs.axes, keepdims=attrs.keepdims, dtype=x.dtype)


def _extremum(fn, what):
    def ref(x, attrs):
        if any(x.shape[a] == 0 for a in attrs.axes):
            raise RuntimeInputError(f"reduce_{what}: reduced axes {list(attrs.axes)} of an operand of shape "
                                    f"{list(x.shape)} include an empty one; a {what} of nothing is undefined")
        return fn(x, axis=attrs.axes, keepdims=attrs.keepdims)
    return ref


def _ref_var(x, attrs):
    n = 1
    for a in attrs.axes:
        n *= x.shape[a]
    mu = np.mean(x, axis=attrs.axes, keepdims=True)
    d = x - mu
    ss = np.sum(d * d, axis=attrs.axes, keepdims=attrs.keepdims)
    with np.errstate(divide="ignore", invalid="ignore"):  # n <= correction: inf/nan, as in torch
        return ss / np.float32(n - attrs.correction)


_REFS = {
    OpKind.REDUCE_SUM: (_ref_sum, False),
    OpKind.REDUCE_MEAN: (lambda x, a: np.mean(x, axis=a.axes, keepdims=a.keepdims), True),
    OpKind.REDUCE_MAX: (_extremum(np.max, "max"), False),
    OpKind.REDUCE_MIN: (_extremum(np.min, "min"), False),
    OpKind.REDUCE_VAR: (_ref_var, True),
    # An int product wraps like a fixed-width accumulator; an empty product is 1.
    OpKind.REDUCE_PROD: (lambda x, a: np.prod(x, axis=a.axes, keepdims=a.keepdims, dtype=x.dtype), False),
}

for _kind, (_fn, _float) in _REFS.items():
    register(_kind, Category.REDUCE, ReduceAttrs, _infer,
             (lambda fn: lambda args, attrs, ctx: [np.asarray(fn(args[0], attrs))])(_fn),
             num_inputs=(1, 1), float_only=_float)


def normalize_axes(axes: Axes, ndim: int, what: str) -> tuple[int, ...]:
    """None -> every axis; int or ints -> sorted non-negative tuple. `what` labels errors."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        axes = [axes]
    try:
        items = list(axes)
    except TypeError:
        raise ShapeError(f"{what}: axes must be None, an int or a sequence of ints, got {axes!r}") from None
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise ShapeError(f"{what}: axis {a!r} is not an int")
        if not -ndim <= a < ndim:
            raise ShapeError(f"{what}: axis {a} is out of range for rank {ndim}")
        n = int(a) % ndim
        if n in out:
            raise ShapeError(f"{what}: axis {a} is given twice (axes {list(items)}, rank {ndim})")
        out.append(n)
    return tuple(sorted(out))


def _reduce(kind: OpKind, x: Tensor, axes: Axes, keepdims: bool, correction: int, name) -> Tensor:
    if isinstance(x, Tensor):
        label = kind.value + (f" '{name}'" if name else "")
        axes = normalize_axes(axes, x.ndim, label)
    return make_op1(kind, [x], ReduceAttrs(axes, bool(keepdims), correction), name)


def reduce_sum(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    return _reduce(OpKind.REDUCE_SUM, x, axes, keepdims, 0, name)


def reduce_mean(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    return _reduce(OpKind.REDUCE_MEAN, x, axes, keepdims, 0, name)


def reduce_max(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    return _reduce(OpKind.REDUCE_MAX, x, axes, keepdims, 0, name)


def reduce_min(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    return _reduce(OpKind.REDUCE_MIN, x, axes, keepdims, 0, name)


def reduce_var(x: Tensor, axes: Axes = None, keepdims: bool = False, correction: int = 0, name=None) -> Tensor:
    """Variance with `correction` subtracted from the count: 0 population, 1 sample (Bessel)."""
    return _reduce(OpKind.REDUCE_VAR, x, axes, keepdims, correction, name)


def reduce_prod(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    return _reduce(OpKind.REDUCE_PROD, x, axes, keepdims, 0, name)


# -- argmax / argmin ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ArgReduceAttrs:
    """Index (int64) of the extreme element along `axis` (normalised, >= 0). Ties pick the first
    index, or the last with select_last_index; a NaN counts as the extreme (numpy's rule)."""
    axis: int
    keepdims: bool = True
    select_last_index: bool = False


def _infer_arg(inputs, attrs):
    (x,) = inputs
    check(x.dtype != DType.bool, "needs a float or int operand, got bool (cast it first)", DTypeError)
    check(x.ndim >= 1, "needs an operand of rank >= 1")
    ax = attrs.axis
    check(isinstance(ax, int) and 0 <= ax < x.ndim, f"axis {ax!r} must be normalised to [0, {x.ndim})")
    n = x.shape[ax]
    check(n.upper >= 1 and (not n.is_static or n.value >= 1),
          f"axis {ax} has size {n}; the index of an extreme of nothing is undefined")
    if attrs.keepdims:
        shape = tuple(IntImm(1) if i == ax else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i != ax)
    return [(shape, DType.int64)]


def _arg_ref(fn):
    def ref(args, attrs, ctx):
        x = args[0]
        if x.shape[attrs.axis] == 0:
            raise RuntimeInputError(f"arg-reduction over axis {attrs.axis} of size 0 (shape {list(x.shape)})")
        if attrs.select_last_index:
            # The last extreme index is the first one of the flipped axis, counted from the end.
            idx = x.shape[attrs.axis] - 1 - fn(np.flip(x, attrs.axis), axis=attrs.axis)
        else:
            idx = fn(x, axis=attrs.axis)
        idx = idx.astype(np.int64)
        return [np.expand_dims(idx, attrs.axis) if attrs.keepdims else idx]
    return ref


register(OpKind.ARGMAX, Category.REDUCE, ArgReduceAttrs, _infer_arg, _arg_ref(np.argmax), num_inputs=(1, 1))
register(OpKind.ARGMIN, Category.REDUCE, ArgReduceAttrs, _infer_arg, _arg_ref(np.argmin), num_inputs=(1, 1))


def _arg(kind: OpKind, x: Tensor, axis: int, keepdims: bool, select_last_index: bool, name) -> Tensor:
    label = kind.value + (f" '{name}'" if name else "")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ShapeError(f"{label}: axis must be an int, got {axis!r}")
    if isinstance(x, Tensor) and x.ndim:
        (axis,) = normalize_axes(int(axis), x.ndim, label)
    return make_op1(kind, [x], ArgReduceAttrs(axis, bool(keepdims), bool(select_last_index)), name)


def argmax(x: Tensor, axis: int = 0, keepdims: bool = True, select_last_index: bool = False,
           name=None) -> Tensor:
    """int64 index of the largest element along `axis` (ONNX ArgMax, numpy argmax)."""
    return _arg(OpKind.ARGMAX, x, axis, keepdims, select_last_index, name)


def argmin(x: Tensor, axis: int = 0, keepdims: bool = True, select_last_index: bool = False,
           name=None) -> Tensor:
    """int64 index of the smallest element along `axis` (ONNX ArgMin, numpy argmin)."""
    return _arg(OpKind.ARGMIN, x, axis, keepdims, select_last_index, name)
