"""fuse_mm_elementwise: gemm and bmm absorb the element-wise DAG that consumes their result.

BERT's `gelu(x @ W + b)` and `x @ W + b + residual` become one GEMM each; an imported
`MatMul -> Add(bias) -> Relu` becomes a GEMM with a bias and a ReLU epilogue; any other
element-wise DAG on the result whose other operands broadcast to it (scales, masks, clamps) goes
in too. The rules (what may be absorbed, where it stops) are shared with fuse_conv_elementwise and
written in _epilogue.py; the CPU backend renders the epilogue as oneDNN post-ops where they
express it and as a loop in the same kernel where they do not.

Skipped when opts.fusion is False (compile_model(..., fusion=False), `aitgen compile --no-fusion`).
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.op import OpKind
from ..options import CompileOptions
from ._epilogue import absorb_epilogues


def fuse_mm_elementwise(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    return absorb_epilogues(graph, (OpKind.GEMM, OpKind.BMM), opts.caps.epilogue_widen if opts.caps is not None else frozenset())
