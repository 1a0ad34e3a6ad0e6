"""Small helpers shared by the passes (not a pass itself)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.dims import IntImm
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import OpKind
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


def constant_source(t: Tensor) -> Optional[Tensor]:
    """The constant t is, or the constant t broadcasts (expand of a constant), else None.

    An importer writes torch's full_like / zeros with a dynamic size as expand(scalar constant,
    [batch, ...]) since no array of that size exists at build time, where the static import holds
    the folded array; matchers that ask "is this operand all zeros / all -inf / one scale" must
    give both the same answer, or a dynamic import fuses less than a static one.
    """
    if t.is_constant:
        return t
    p = t.producer
    if p is not None and p.kind is OpKind.EXPAND and p.inputs[0].is_constant:
        return p.inputs[0]
    return None


def static_shape(t: Tensor) -> Optional[tuple[int, ...]]:
    """The concrete shape, or None when a dim is symbolic."""
    if not all(d.is_static for d in t.shape):
        return None
    return tuple(d.value for d in t.shape)


def same_type(a: Tensor, b: Tensor) -> bool:
    """Same dtype and provably equal shape (symbolic dims compare as polynomials)."""
    return a.dtype == b.dtype and len(a.shape) == len(b.shape) and all(x == y for x, y in zip(a.shape, b.shape))
