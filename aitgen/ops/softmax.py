"""Softmax over any axis."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..errors import ShapeError
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from . import float64
from .fused import Expr
from .prologue import MAX_EXTRA, with_prologue_infer, with_prologue_reference
from .registry import Category, check, make_op1, register

__all__ = ["SoftmaxAttrs", "softmax"]


@dataclasses.dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int  # normalised to 0 <= axis < rank by the builder
    # fused element-wise input (scale, mask add), over the last axis only; see ops/prologue.py
    prologue: Optional[Expr] = None


def _infer(inputs, attrs):
    (x,) = inputs
    # Attrs may come from a pass rather than the builder, so the normal form is checked here too.
    hi = max(x.ndim, 1)
    check(isinstance(attrs.axis, int) and 0 <= attrs.axis < hi,
          f"axis {attrs.axis} must be normalised to [0, {hi}) for rank {x.ndim}")
    check(attrs.prologue is None or attrs.axis == hi - 1, "a prologue needs the softmax over the last axis")
    return [(x.shape, x.dtype)]


def softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    """exp(x - max) / sum: subtracting the max keeps exp from overflowing. A row of all -inf gives
    NaN, as in torch (attention, which needs 0 there, handles that case itself)."""
    if x.ndim == 0:
        return np.ones_like(x)
    if x.size == 0:
        return x.copy()
    m = np.max(x, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):  # -inf - -inf on an all -inf row: the NaN is the answer
        e = np.exp(x - m)
        return e / np.sum(e, axis=axis, keepdims=True)


register(OpKind.SOFTMAX, Category.SOFTMAX, SoftmaxAttrs, with_prologue_infer(_infer, lambda attrs, ndim: 1),
         with_prologue_reference(lambda args, attrs, ctx: [softmax_ref(args[0], attrs.axis)]),
         num_inputs=(1, 1 + MAX_EXTRA), float_only=True)


def softmax(x: Tensor, axis: int = -1, name=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis` (negative counts from the end); float dtypes only."""
    if isinstance(x, Tensor):
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise ShapeError(f"softmax{_nm(name)}: axis must be an int, got {axis!r}")
        nd = x.ndim
        if not -max(nd, 1) <= axis < max(nd, 1):
            raise ShapeError(f"softmax{_nm(name)}: axis {axis} is out of range for rank {nd} "
                             f"(operand {x.dtype.short}[{', '.join(map(str, x.shape))}])")
        axis = int(axis) % max(nd, 1)
        if x.dtype is DType.float64 and nd > 0:  # the softmax kernels compute in float32
            return float64.softmax(x, axis, name)
    return make_op1(OpKind.SOFTMAX, [x], SoftmaxAttrs(axis), name)


def _nm(name) -> str:
    return f" '{name}'" if name else ""
