"""fuse_conv_elementwise: conv2d and conv_transpose2d absorb the element-wise DAG that consumes
their result.

After fold_batchnorm a ResNet block's conv carries the folded batchnorm as its bias; this pass
adds the ReLU, and on the last conv of a block the residual add and the ReLU after it, so each
conv is one kernel (conv + bias + residual + activation). Any other element-wise DAG on the
result whose other operands broadcast to it goes in too (per-channel scales, clamps as in ReLU6,
hardswish, a squeeze-excite multiply by an [N, 1, 1, C] tensor). The rules are shared with
fuse_mm_elementwise and written in _epilogue.py. A transposed convolution (a decoder's upsampling
layer) takes the same epilogues: bias, activation, residual; oneDNN's deconvolution applies them
as post-ops where it can, the kernel's loop elsewhere.

Skipped when opts.fusion is False.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.op import OpKind
from ..options import CompileOptions
from ._epilogue import absorb_epilogues


def fuse_conv_elementwise(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    return absorb_epilogues(graph, (OpKind.CONV2D, OpKind.CONV_TRANSPOSE2D), opts.caps.epilogue_widen if opts.caps is not None else frozenset())
