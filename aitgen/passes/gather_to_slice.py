"""gather_to_slice: a gather whose constant indices step evenly through the axis is a slice.

Importers meet indexing as Gather: ONNX has no other way to write `x[:, 0]` (BERT's pooler and
ViT's class token: Gather(axis 1, index 0)) or `qkv[i]` (nn.MultiheadAttention's q/k/v split:
Gather(axis 0, index 0/1/2)). A gather is a kernel of its own, but a slice folds into the strided
reads of the op that consumes it (fuse_memory_ops), so BERT's pooler GEMM reads its row in place,
as it does in the zoo's native model, which writes a slice. Here

    gather(x, i, axis)                   (i a 0-d constant)     ->  reshape(slice(x, i, i + 1, axis))
    gather(x, [a, a+d, .., a+(n-1)d])    (d > 0, any index rank) -> reshape(slice(x, a, a+(n-1)d+1, d))

the reshape dropping the axis for a 0-d index, splitting it for indices of rank > 1, and absent
for rank-1 indices. Indices that are a run-time prefix of such a constant, reshaped,

    gather(x, reshape(c[s:n]))           (c = [a, a+d, ..], step 1, n symbolic)
                                         ->  reshape(slice(x, a+sd, a+sd+(n-s-1)d+1, d))

are a slice too: torch.export writes `arange(seq)` with a dynamic seq (GPT-2's and BERT's position
ids) as a slice of the longest table, which a static import holds folded; without this the dynamic
import keeps an embedding gather the static one does not. Negative indices count from the end of a static axis; on a dynamic axis only
indices below its lower bound qualify (the others depend on the run-time size, or may be out of
range there, which the gather reports and a slice would not). Exact: the same elements, moved.

Runs after constant_folding (indices computed from constants, ONNX Constant nodes, are constants
by then) and before fuse_attention, sink_reshapes and fuse_memory_ops, which see through slices
and reshapes but not through gathers.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import AitgenError
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ops import view as view_ops
from ..options import CompileOptions


def gather_to_slice(graph: Graph, opts: CompileOptions) -> Graph:
    changed = False
    for op in list(graph.ops):
        if op.kind is not OpKind.GATHER:
            continue
        new = _as_slice(op) if op.inputs[1].is_constant else _prefix_as_slice(op)
        if new is None:
            continue
        new.name = op.outputs[0].name
        graph.replace_all_uses(op.outputs[0], new)
        changed = True
    if changed:
        graph.sort()
    return graph


def _as_slice(op: Op):
    x, idx = op.inputs
    axis = op.attrs.axis
    values = np.asarray(idx.value).astype(np.int64).reshape(-1)
    start = _arithmetic_start(values, x.shape[axis])
    if start is None:
        return None
    a, d = start
    n = values.size
    y = view_ops.slice(x, [a], [a + (n - 1) * d + 1], axes=[axis], steps=[d], name=op.name)
    if idx.ndim == 1:
        return y
    out = op.outputs[0]
    return view_ops.reshape(y, list(out.shape), name=op.name and op.name + "_reshape")


def _prefix_as_slice(op: Op):
    """gather(x, reshapes(slice(c, s, n, step 1))) for a 1-d arithmetic constant c, as a slice."""
    x, idx = op.inputs
    t = idx
    while t.producer is not None and t.producer.kind is OpKind.RESHAPE:
        t = t.producer.inputs[0]  # a reshape keeps the indices' order, which is all a gather reads
    p = t.producer
    if p is None or p.kind is not OpKind.SLICE or not p.inputs[0].is_constant or p.inputs[0].ndim != 1:
        return None
    start, step = p.attrs.starts[0], p.attrs.steps[0]
    if not isinstance(start, int) or isinstance(start, bool) or start < 0 or step != 1:
        return None
    values = np.asarray(p.inputs[0].value).astype(np.int64).reshape(-1)
    found = _arithmetic_start(values, x.shape[op.attrs.axis])  # every value in range, not only a prefix's
    if found is None:
        return None
    a, d = found
    n = t.shape[0]
    first = a + start * d
    try:
        y = view_ops.slice(x, [first], [n * d + (first - d + 1)], axes=[op.attrs.axis], steps=[d], name=op.name)
        return view_ops.reshape(y, list(op.outputs[0].shape), name=op.name and op.name + "_reshape")
    except (AitgenError, ValueError):
        return None  # a symbolic end the slice cannot bound: keep the gather


def _arithmetic_start(values: np.ndarray, dim) -> Optional[tuple[int, int]]:
    """(first index, step) when the indices, made non-negative, are a, a+d, a+2d, .. with d > 0 and
    surely within the axis; else None."""
    if values.size == 0:
        return None
    if dim.is_static:
        n = dim.value
        if np.any(values < -n) or np.any(values >= n):
            return None  # out of range: the gather's run-time error is the answer, keep it
        values = np.where(values < 0, values + n, values)
    elif np.any(values < 0) or np.any(values >= dim.lower):
        return None
    a = int(values[0])
    d = int(values[1] - values[0]) if values.size > 1 else 1
    if d <= 0 or np.any(values != a + d * np.arange(values.size)):
        return None
    return a, d
