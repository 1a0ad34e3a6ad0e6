"""Scans: running sum / product along one axis (ONNX CumSum, CumProd), inclusive or exclusive,
forward or reversed.

out[..., i, ...] = x[..., 0, ...] (+|*) ... (+|*) x[..., i, ...]; `exclusive` leaves x[i] out
(the first element is 0 for a sum, 1 for a product); `reverse` runs from the end. Integer scans
wrap like a fixed-width accumulator. bool operands are rejected (cast them first).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .reduce import normalize_axes
from .registry import Category, check, make_op1, register

__all__ = ["ScanAttrs", "cumsum", "cumprod"]


@dataclasses.dataclass(frozen=True)
class ScanAttrs:
    axis: int               # normalised, >= 0
    exclusive: bool = False
    reverse: bool = False


def _infer(inputs, attrs: ScanAttrs):
    (x,) = inputs
    check(x.dtype != DType.bool, "needs a float or int operand, got bool (cast it first)", DTypeError)
    check(isinstance(attrs.axis, int) and 0 <= attrs.axis < max(x.ndim, 1),
          f"axis {attrs.axis!r} must be normalised to [0, {x.ndim})")
    return [(x.shape, x.dtype)]


def _scan_ref(fn, unit):
    def ref(args, attrs: ScanAttrs, ctx):
        x = args[0]
        if x.ndim == 0:
            return [x.copy()]
        a = attrs.axis
        v = np.flip(x, a) if attrs.reverse else x
        out = fn(v, axis=a, dtype=x.dtype)
        if attrs.exclusive and out.shape[a] > 0:  # shift by one along the axis, the identity first
            first = np.full_like(np.take(out, [0], axis=a), unit)
            out = np.concatenate([first, np.take(out, np.arange(out.shape[a] - 1), axis=a)], axis=a)
        return [np.flip(out, a) if attrs.reverse else out]
    return ref


register(OpKind.CUMSUM, Category.REDUCE, ScanAttrs, _infer, _scan_ref(np.cumsum, 0), num_inputs=(1, 1))
register(OpKind.CUMPROD, Category.REDUCE, ScanAttrs, _infer, _scan_ref(np.cumprod, 1), num_inputs=(1, 1))


def _scan(kind: OpKind, x: Tensor, axis: int, exclusive: bool, reverse: bool, name) -> Tensor:
    label = kind.value + (f" '{name}'" if name else "")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ShapeError(f"{label}: axis must be an int, got {axis!r}")
    if isinstance(x, Tensor) and x.ndim:
        (axis,) = normalize_axes(int(axis), x.ndim, label)
    return make_op1(kind, [x], ScanAttrs(int(axis), bool(exclusive), bool(reverse)), name)


def cumsum(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False, name=None) -> Tensor:
    return _scan(OpKind.CUMSUM, x, axis, exclusive, reverse, name)


def cumprod(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False, name=None) -> Tensor:
    return _scan(OpKind.CUMPROD, x, axis, exclusive, reverse, name)
