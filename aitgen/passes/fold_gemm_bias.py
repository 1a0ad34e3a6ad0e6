"""fold_gemm_bias: gemm(a, w) + b, with b a vector over N, becomes gemm(a, w, b).

ONNX writes nn.Linear on a 3-D input as MatMul followed by Add (Gemm takes 2-D operands only),
so an imported BERT's query, key and value projections arrive as three GEMMs each read by an
add. fuse_parallel_gemms packs GEMMs into one only when nothing but memory ops read their parts
(an element-wise reader would rather take the add as its epilogue), so the three stayed three
GEMMs (grouped later) where the zoo's native model, whose Linear carries its bias, gets one
packed QKV GEMM. With the bias inside, the imported projections pack the same way.

    add(gemm(a, w), b) | add(b, gemm(a, w))  ->  gemm(a, w, b')

for a GEMM without bias, epilogue or operand views whose result only this add reads (and is no
graph output), and b of the GEMM's dtype with shape [N] or [1, .., 1, N] that does not grow the
result (b' is b seen as [N]: a new constant, or a reshape, a view). Exact in float32: the GEMM
reference adds its bias to the product as the add did (float addition commutes). In float16 /
bfloat16 the GEMM adds the bias before rounding to the storage type, so the result is rounded once
instead of twice (as with any epilogue): within an ulp of the unfused graph.

Runs after fuse_attention (a scores GEMM plus a mask over keys must stay an add for its
matcher) and before fuse_parallel_gemms.
"""
from __future__ import annotations

from typing import Optional

from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.registry import make_op1
from ..ops import view as view_ops
from ..options import CompileOptions
from ._util import new_constant, output_ids


def fold_gemm_bias(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    outs = output_ids(graph)
    changed = False
    for op in list(graph.ops):
        if op.kind is not OpKind.ADD:
            continue
        for g, b in ((op.inputs[0], op.inputs[1]), (op.inputs[1], op.inputs[0])):
            gemm = g.producer
            if gemm is None or not _bare_gemm(gemm) or g is b:
                continue
            if len({id(u) for u in g.users}) != 1 or id(g) in outs:
                continue
            bias = _as_vector(b, g)
            if bias is None or tuple(op.outputs[0].shape) != tuple(g.shape):
                continue
            y = op.outputs[0]
            new = make_op1(OpKind.GEMM, [gemm.inputs[0], gemm.inputs[1], bias], gemm.attrs, gemm.name)
            new.name = y.name
            graph.replace_all_uses(y, new)
            changed = True
            break
    if changed:
        graph.sort()
    return graph


def _bare_gemm(op: Op) -> bool:
    a = op.attrs
    return (op.kind is OpKind.GEMM and len(op.inputs) == 2 and a.epilogue is None
            and getattr(a, "operand_views", None) is None)


def _as_vector(b: Tensor, g: Tensor) -> Optional[Tensor]:
    """b as the GEMM's [N] bias, or None when it varies over anything but the last dim."""
    n = g.shape[-1]
    if b.dtype != g.dtype or b.ndim == 0 or b.ndim > g.ndim or not b.shape[-1] == n:
        return None
    if any(not (d.is_static and d.value == 1) for d in b.shape[:-1]):
        return None
    if b.ndim == 1:
        return b
    if b.is_constant:
        return new_constant(b.value.reshape(-1), b.dtype, name=b.name)
    return view_ops.reshape(b, [n])
