"""pad_conv_channels (CUDA): a float16/bfloat16 convolution whose input channel count is odd gets
its input and weight padded with zero channels to the next multiple of 4, so a tensor-core conv
(CUTLASS implicit GEMM, 8-byte vector loads) takes it instead of the one-thread-per-output SIMT
conv.

The case is the stem of every image model: ResNet's 7x7 conv over RGB (3 channels). CUTLASS's
implicit GEMM reads each (r, s) tap's channels as vectors, so C must be a multiple of the vector
width; with 3 channels only scalar loads remain, which the CUDA lowering leaves to its SIMT conv
(issue 12). Four channels cost a third more multiply-adds on a layer that is a few percent of the
model, and the extra channel's products are exact zeros, so the result is the same conv.

The weight is padded by a PAD op, not replaced by a padded constant: the constant keeps its name
and shape for set_constants (a copy of a few kilobytes per run). Runs after convert_precision (the
dtype is known then) and before the epilogue fusions (the new conv takes them as the old would).
Only for targets whose conv needs it: `opts.target == "cuda"`; the CPU's oneDNN takes 3 channels.
"""
from __future__ import annotations

from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import OpKind
from ..ops import view as view_ops
from ..ops.fused import split_operands
from ..ops.registry import make_op1
from ..options import CompileOptions

MULTIPLE = 4


def pad_conv_channels(graph: Graph, opts: CompileOptions) -> Graph:
    caps = opts.caps
    if opts.target != "cuda" or caps is None or not {OpKind.PAD, OpKind.CONV2D} <= caps.kinds:
        return graph
    changed = False
    for op in list(graph.ops):
        if op.kind is not OpKind.CONV2D or op.attrs.groups != 1:
            continue
        (x, w, *bias), extras = split_operands(op.inputs, op.attrs)
        c = x.shape[3]
        if x.dtype not in (DType.float16, DType.bfloat16) or not c.is_static or c.value % 2 == 0:
            continue   # even counts already get 4-byte vectors, which the tensor-core conv takes
        extra = -c.value % MULTIPLE
        xp = view_ops.pad(x, [(0, 0), (0, 0), (0, 0), (0, extra)], name=f"{op.name}_pad_x")
        wp = view_ops.pad(w, [(0, 0), (0, 0), (0, 0), (0, extra)], name=f"{op.name}_pad_w")
        y = op.outputs[0]
        new = make_op1(OpKind.CONV2D, [xp, wp, *bias, *extras], op.attrs, op.name)
        new.name = y.name
        graph.replace_all_uses(y, new)
        changed = True
    if changed:
        graph.sort()
    return graph
