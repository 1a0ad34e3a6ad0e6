"""Small helpers shared by the passes (not a pass itself)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.dims import IntImm
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.tensor import Tensor


def output_ids(graph: Graph) -> set[int]:
    """ids of the tensors the graph returns (a tensor may be returned under several names)."""
    return {id(t) for t in graph.outputs.values()}


def new_constant(value: np.ndarray, dtype: DType, name: Optional[str] = None) -> Tensor:
    """A fresh constant over a read-only view of `value` (no copy unless the dtype differs).

    Read-only because constant arrays are shared between a graph and its copies (and the user's
    tensors): a later pass writing into one would silently change every graph holding it. A view,
    so that marking it read-only never touches the flags of an array the user still owns.
    """
    arr = np.asarray(value, dtype=dtype.np).view()
    arr.setflags(write=False)
    return Tensor(tuple(IntImm(n) for n in arr.shape), dtype, name=name, value=arr)


def static_shape(t: Tensor) -> Optional[tuple[int, ...]]:
    """The concrete shape, or None when a dim is symbolic."""
    if not all(d.is_static for d in t.shape):
        return None
    return tuple(d.value for d in t.shape)


def same_type(a: Tensor, b: Tensor) -> bool:
    """Same dtype and provably equal shape (symbolic dims compare as polynomials)."""
    return a.dtype == b.dtype and len(a.shape) == len(b.shape) and all(x == y for x, y in zip(a.shape, b.shape))
