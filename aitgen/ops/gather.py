"""Gather (numpy take along an axis) and embedding lookup."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import AitgenError, DTypeError, RuntimeInputError, ShapeError
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .registry import Category, _desc, check, make_op1, normalize_axis, register

__all__ = ["GatherAttrs", "gather", "embedding"]

_INDEX_DTYPES = (DType.int32, DType.int64)


@dataclasses.dataclass(frozen=True)
class GatherAttrs:
    axis: int


def _infer_gather(inputs, a: GatherAttrs):
    x, idx = inputs
    check(idx.dtype in _INDEX_DTYPES, f"indices must be int32 or int64, got {idx.dtype}", DTypeError)
    check(x.ndim >= 1, "cannot gather from a rank-0 tensor")
    check(0 <= a.axis < x.ndim, f"axis {a.axis} is out of range for rank {x.ndim}")
    return [(x.shape[:a.axis] + idx.shape + x.shape[a.axis + 1:], x.dtype)]


def _ref_gather(args, a: GatherAttrs, ctx):
    x, idx = args
    n = x.shape[a.axis]
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        # Indices are data, so this is a bad run-time input, not a bug in the graph.
        raise RuntimeInputError(f"gather: index {int(idx[bad].flat[0])} is out of range for axis "
                                f"{a.axis} of size {n}")
    return [np.take(x, np.where(idx < 0, idx + n, idx), axis=a.axis)]


register(OpKind.GATHER, Category.GATHER, GatherAttrs, _infer_gather, _ref_gather, num_inputs=(2, 2))


def gather(x: Tensor, indices: Tensor, axis: int = 0, name=None) -> Tensor:
    """np.take(x, indices, axis); indices int32/int64 of any rank, negative ones count from the end."""
    label = "gather" + (f" '{name}'" if name else "")
    for t in (x, indices):
        if not isinstance(t, Tensor):
            raise DTypeError(f"{label}: operand is a {type(t).__name__}, not a Tensor")
    try:
        ax = normalize_axis(axis, x.ndim)
    except AitgenError as e:
        raise ShapeError(f"{label}: {e} (operands: {_desc(x)}, {_desc(indices)})") from None
    return make_op1(OpKind.GATHER, [x, indices], GatherAttrs(ax), name)


def embedding(ids: Tensor, weight: Tensor, name=None) -> Tensor:
    """weight [V, E] rows gathered by ids [...] -> [..., E]."""
    if isinstance(weight, Tensor) and weight.ndim != 2:
        raise ShapeError(f"embedding{f' {name!r}' if name else ''}: weight must be 2-D [V, E], "
                         f"got {_desc(weight)}")
    return gather(weight, ids, axis=0, name=name)
