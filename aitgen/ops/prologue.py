"""Prologues on row-wise ops (layernorm, rmsnorm, softmax over the last axis): an element-wise
expression the op evaluates as it reads its input, so a residual add feeding a layernorm,
layernorm(x + r), is one kernel and x + r is never stored and read back.

`prologue` is an Expr (aitgen/ops/fused.py) with one output: slot 0 is the op's first operand x,
slots 1.. are extra operands appended after the op's own (weight, bias). The op then works on
prologue(x, extras...) as if that were its input: its result has x's shape and the prologue's
result dtype. Each extra broadcasts to x's shape and, over the row dims (the normalised dims; the
softmax axis), is either complete or absent (size 1 in all of them), so a kernel reads a row of it
contiguously or as one value. The reference computes the prologue in float32 without rounding
(as the kernels do), then the op's own reference.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.dims import Dim, IntImm
from ..ir.tensor import Tensor
from .fused import MAX_EXTRA, Expr

__all__ = ["MAX_EXTRA", "split_prologue", "prologue_operand_ok", "with_prologue_infer", "with_prologue_reference"]

RowDims = Callable[[object, int], int]  # (attrs, rank of x) -> how many trailing dims form a row


def split_prologue(inputs: Sequence, attrs) -> tuple[list, list]:
    """(the op's own operands, the prologue's extra operands)."""
    pro: Optional[Expr] = getattr(attrs, "prologue", None)
    n = pro.num_inputs - 1 if pro is not None else 0
    return list(inputs[:len(inputs) - n]), list(inputs[len(inputs) - n:])


def prologue_operand_ok(x_shape: Sequence[Dim], shape: Sequence[Dim], row_dims: int) -> bool:
    """`shape` broadcasts to x_shape without enlarging it, and over the last row_dims dims it is
    either x's dims or all 1."""
    r = len(x_shape)
    if len(shape) > r:
        return False
    padded = (IntImm(1),) * (r - len(shape)) + tuple(shape)
    if not all(p == x or p == 1 for p, x in zip(padded, x_shape)):
        return False
    row = list(zip(padded[r - row_dims:], x_shape[r - row_dims:]))
    return all(p == x for p, x in row) or all(p == 1 for p, _ in row)


def with_prologue_infer(infer: Callable, row_dims: RowDims) -> Callable:
    def wrapped(inputs, attrs):
        own, extra = split_prologue(inputs, attrs)
        pro: Optional[Expr] = getattr(attrs, "prologue", None)
        if pro is None:
            return infer(own, attrs)
        pro.validate()
        if len(pro.outputs) != 1 or len(extra) > MAX_EXTRA or not own:
            raise ShapeError(f"a prologue has one output and at most {MAX_EXTRA} extra operands")
        x = own[0]
        dtype = pro.slot_dtypes([x.dtype] + [t.dtype for t in extra])[pro.outputs[0]]
        if not dtype.is_float:
            raise DTypeError(f"the prologue computes {dtype}; the op needs a float input")
        k = row_dims(attrs, x.ndim)
        for t in extra:
            if not prologue_operand_ok(x.shape, t.shape, k):
                raise ShapeError(f"prologue operand '{t.name}' {list(t.shape)} must broadcast to x "
                                 f"{list(x.shape)} and, over the last {k} dims, be whole or size 1")
        # The op as if its input were the prologue's result: x's shape, the prologue's dtype.
        return infer([Tensor(x.shape, dtype)] + own[1:], attrs)
    return wrapped


def with_prologue_reference(ref: Callable) -> Callable:
    def wrapped(args, attrs, ctx):
        own, extra = split_prologue(args, attrs)
        pro: Optional[Expr] = getattr(attrs, "prologue", None)
        if pro is None:
            return ref(own, attrs, ctx)
        (v,) = pro.evaluate([own[0]] + list(extra))
        v = np.ascontiguousarray(np.broadcast_to(np.asarray(v, np.float32), np.shape(own[0])))
        return ref([v] + list(own[1:]), attrs, ctx)
    return wrapped
