"""gather_to_slice: a gather whose constant indices step evenly through the axis is a slice.

Importers meet indexing as Gather: ONNX has no other way to write `x[:, 0]` (BERT's pooler and
ViT's class token: Gather(axis 1, index 0)) or `qkv[i]` (nn.MultiheadAttention's q/k/v split:
Gather(axis 0, index 0/1/2)). A gather is a kernel of its own, but a slice folds into the strided
reads of the op that consumes it (fuse_memory_ops), so BERT's pooler GEMM reads its row in place,
as it does in the zoo's native model, which writes a slice. Here

    gather(x, i, axis)                   (i a 0-d constant)     ->  reshape(slice(x, i, i + 1, axis))
    gather(x, [a, a+d, .., a+(n-1)d])    (d > 0, any index rank) -> reshape(slice(x, a, a+(n-1)d+1, d))

the reshape dropping the axis for a 0-d index, splitting it for indices of rank > 1, and absent
for rank-1 indices. Negative indices count from the end of a static axis; on a dynamic axis only
indices below its lower bound qualify (the others depend on the run-time size, or may be out of
range there, which the gather reports and a slice would not). Exact: the same elements, moved.

Runs after constant_folding (indices computed from constants, ONNX Constant nodes, are constants
by then) and before fuse_attention, sink_reshapes and fuse_memory_ops, which see through slices
and reshapes but not through gathers.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ops import view as view_ops
from ..options import CompileOptions


def gather_to_slice(graph: Graph, opts: CompileOptions) -> Graph:
    changed = False
    for op in list(graph.ops):
        if op.kind is not OpKind.GATHER or not op.inputs[1].is_constant:
            continue
        new = _as_slice(op)
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
