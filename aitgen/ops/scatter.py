"""scatter_nd: ONNX ScatterND with indices that are data (known only at run time).

out = copy of data; then for each index tuple j (indices viewed as [U, k]) in order, the slice
out[idx[j, 0], ..., idx[j, k-1], ...] (data.shape[k:]) becomes update j (reduction "none": a later
update of the same slice wins, ONNX leaves duplicates undefined) or op(slice, update j) for
add/mul/max/min. Negative indices count from the end of their dim. An index outside [-n, n) is a
bad run-time input: the oracle raises RuntimeInputError and the CPU kernel checks every index
before it writes anything and refuses the run with the op's name (no clamping: a clamped write
would silently change the answer). ScatterElements is this op with one index tuple per update
element (the importer builds the tuples).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DTypeError, RuntimeInputError, ShapeError
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .registry import Category, _desc, check, make_op1, register

__all__ = ["ScatterAttrs", "scatter_nd", "SCATTER_REDUCTIONS"]

SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


@dataclasses.dataclass(frozen=True)
class ScatterAttrs:
    reduction: str = "none"


def _infer(inputs, a: ScatterAttrs):
    data, idx, upd = inputs
    check(a.reduction in SCATTER_REDUCTIONS, f"reduction {a.reduction!r} is not one of {SCATTER_REDUCTIONS}")
    check(idx.dtype in (DType.int32, DType.int64), f"indices must be int32 or int64, got {idx.dtype}", DTypeError)
    check(upd.dtype == data.dtype, f"updates ({upd.dtype}) and data ({data.dtype}) differ in dtype", DTypeError)
    check(a.reduction == "none" or data.dtype != DType.bool,
          f"reduction {a.reduction!r} needs numbers, got bool", DTypeError)
    check(idx.ndim >= 1 and idx.shape[-1].is_static, f"indices need a static last dim, got {_desc(idx)}")
    k = idx.shape[-1].value
    check(k <= data.ndim, f"index depth {k} exceeds data rank {data.ndim}")
    want = tuple(idx.shape[:-1]) + tuple(data.shape[k:])
    check(len(upd.shape) == len(want) and all(u == w for u, w in zip(upd.shape, want)),
          f"updates must have shape {[str(d) for d in want]} (indices[:-1] + data[k:]), got {_desc(upd)}")
    return [(data.shape, data.dtype)]


_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _ref(args, a: ScatterAttrs, ctx):
    data, idx, upd = args
    k = idx.shape[-1]
    dims = np.asarray(data.shape[:k], np.int64)
    lead = idx.reshape(-1, k).astype(np.int64)
    bad = (lead < -dims) | (lead >= dims)
    if bad.any():
        j, c = np.argwhere(bad)[0]
        raise RuntimeInputError(f"scatter_nd: index {int(lead[j, c])} (tuple {int(j)}, position {int(c)}) "
                                f"is out of range for dim {int(c)} of size {int(dims[c])}")
    lead = np.where(lead < 0, lead + dims, lead)
    out = data.copy()
    rows = upd.reshape((len(lead),) + data.shape[k:])
    for j, t in enumerate(map(tuple, lead)):  # in order: duplicates apply one after another
        out[t] = rows[j] if a.reduction == "none" else _UFUNC[a.reduction](out[t], rows[j])
    return [out]


register(OpKind.SCATTER_ND, Category.GATHER, ScatterAttrs, _infer, _ref, num_inputs=(3, 3))


def scatter_nd(data: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none", name=None) -> Tensor:
    """ONNX ScatterND: data with the slices at indices[..., :k] replaced (or reduced) by updates."""
    for t in (data, indices, updates):
        if not isinstance(t, Tensor):
            raise ShapeError(f"scatter_nd{f' {name!r}' if name else ''}: operand is a {type(t).__name__}, not a Tensor")
    return make_op1(OpKind.SCATTER_ND, [data, indices, updates], ScatterAttrs(str(reduction)), name)
