"""unique (ONNX Unique): the distinct slices of x along an axis (or its distinct elements, axis
None), with the first index, the inverse map and the count of each.

Outputs: Y (x's shape with the axis cut to u; [u] without an axis), indices [u], inverse [n],
counts [u], all int64 but Y; u is a produced size (aitgen/ops/dynamic.py) the kernel binds.
sorted: Y in ascending (lexicographic) order as numpy's unique gives; else in order of first
occurrence. Slices compare element by element in row-major order of x with the axis moved first.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..errors import DTypeError
from ..ir.dims import IntVar, prod
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .dynamic import produced_var
from .registry import Category, check, make_op, register

__all__ = ["UniqueAttrs", "unique"]


@dataclasses.dataclass(frozen=True)
class UniqueAttrs:
    count: IntVar
    axis: Optional[int] = None   # normalised; None: the flattened elements
    sorted: bool = True


def _infer(inputs, a: UniqueAttrs):
    (x,) = inputs
    check(x.dtype != DType.bool, "bool operands are not supported (cast them first)", DTypeError)
    n = prod(x.shape) if a.axis is None else x.shape[a.axis]
    check(isinstance(a.count, IntVar) and a.count.produced and a.count.ub >= n.upper, "count must be a produced size")
    y = (a.count,) if a.axis is None else tuple(a.count if j == a.axis else d for j, d in enumerate(x.shape))
    return [(y, x.dtype), ((a.count,), DType.int64), ((n,), DType.int64), ((a.count,), DType.int64)]


def _ref(args, a: UniqueAttrs, ctx):
    x = args[0]
    flat = x.reshape(-1) if a.axis is None else x
    _, idx, inv, cnt = np.unique(flat, True, True, True, axis=None if a.axis is None else a.axis)
    inv = inv.reshape(-1)
    if not a.sorted:  # groups in order of first occurrence
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
    y = np.take(flat, idx, axis=0 if a.axis is None else a.axis)
    return [y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]


register(OpKind.UNIQUE, Category.GATHER, UniqueAttrs, _infer, _ref, num_inputs=(1, 1))


def unique(x: Tensor, axis: Optional[int] = None, sorted: bool = True, name: Optional[str] = None):  # noqa: A002
    """(Y, indices, inverse, counts) as ONNX Unique; Y's unique count is known after the run."""
    n = prod(x.shape) if axis is None else x.shape[axis]
    count = produced_var(f"{name or 'unique'}_count", max(n.upper, 0))
    return make_op(OpKind.UNIQUE, [x], UniqueAttrs(count, axis, bool(sorted)), name)
