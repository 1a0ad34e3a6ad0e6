"""top_k: the k largest (or smallest) elements along one axis and their int64 indices (ONNX TopK).

Outputs, in order: values (x's dtype) and indices (int64), both x's shape with the axis cut to k.
Order: best first; equal values keep the lower index first (ONNX's rule from opset 11); a NaN
counts as larger than every number (numpy's sort order), so it comes first with largest=True and
last with largest=False. k is fixed when the graph is built: an int in [0, size of the axis] for
every size a dynamic axis may take. bool operands are rejected (cast them first).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DTypeError, RuntimeInputError, ShapeError
from ..ir.dims import IntImm, IntVar
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .reduce import normalize_axes
from .registry import Category, check, make_op, register

__all__ = ["TopKAttrs", "top_k"]


@dataclasses.dataclass(frozen=True)
class TopKAttrs:
    k: "int | IntVar"       # an IntVar: a size bound during the run (K fed as data, ops/dynamic.py)
    axis: int               # normalised, >= 0
    largest: bool = True


def _infer(inputs, attrs: TopKAttrs):
    (x,) = inputs
    check(x.dtype != DType.bool, "needs a float or int operand, got bool (cast it first)", DTypeError)
    check(x.ndim >= 1, "needs an operand of rank >= 1")
    ax, k = attrs.axis, attrs.k
    check(isinstance(ax, int) and 0 <= ax < x.ndim, f"axis {ax!r} must be normalised to [0, {x.ndim})")
    n = x.shape[ax]
    produced = isinstance(k, IntVar) and k.produced and k.ub <= n.upper
    check(produced or isinstance(k, int) and 0 <= k <= n.lower,
          f"k={k!r} must be an int in [0, {n.lower}]: axis {ax} has size {n}"
          + (f" (at least {n.lower})" if not n.is_static else ""))
    shape = tuple((k if produced else IntImm(k)) if i == ax else d for i, d in enumerate(x.shape))
    return [(shape, x.dtype), (shape, DType.int64)]


def _ref(args, attrs: TopKAttrs, ctx):
    x, ax, k = args[0], attrs.axis, attrs.k
    k = k.evaluate(ctx.env) if isinstance(k, IntVar) else k
    n = x.shape[ax]
    if k > n:
        raise RuntimeInputError(f"top_k: k={k} exceeds the size {n} of axis {ax} (shape {list(x.shape)})")
    if attrs.largest:
        # Descending with ties by ascending index: a stable ascending sort of the flipped axis
        # orders ties by descending original index; reversing it gives the wanted order.
        order = n - 1 - np.flip(np.argsort(np.flip(x, ax), axis=ax, kind="stable"), ax)
    else:
        order = np.argsort(x, axis=ax, kind="stable")
    idx = np.take(order, np.arange(k), axis=ax).astype(np.int64)
    return [np.take_along_axis(x, idx, axis=ax), idx]


register(OpKind.TOPK, Category.REDUCE, TopKAttrs, _infer, _ref, num_inputs=(1, 1))


def top_k(x: Tensor, k: int, axis: int = -1, largest: bool = True, name=None) -> tuple[Tensor, Tensor]:
    """(values, int64 indices) of the k largest (or smallest) elements along `axis`, best first."""
    label = "top_k" + (f" '{name}'" if name else "")
    for what, v in (("axis", axis), ("k", k)):
        if isinstance(v, IntVar) and v.produced and what == "k":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ShapeError(f"{label}: {what} must be an int, got {v!r}")
    if isinstance(x, Tensor) and x.ndim:
        (axis,) = normalize_axes(int(axis), x.ndim, label)
    values, indices = make_op(OpKind.TOPK, [x], TopKAttrs(k if isinstance(k, IntVar) else int(k), int(axis), bool(largest)), name)
    return values, indices
