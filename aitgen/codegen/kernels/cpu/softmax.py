"""Softmax -> one kernel (backends/cpu/templates/softmax.cpp.j2).

x is viewed as [outer, axis, inner]; when nothing follows the axis the rows are contiguous and the
kernel takes its fast path. Sizes are dims, so one kernel serves every layer and every dynamic size.
"""
from __future__ import annotations

from ....ir.dims import IntImm, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ops.prologue import split_prologue
from ...cexpr import STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.prologue import prologue_params
from .norm import PAR_THRESHOLD, SOFTMAX_ROW_BUF, label

# Inner-dim block of the strided softmax: float32 lanes kept on the stack per task.
SOFTMAX_BLOCK = 128


@lowering("cpu", OpKind.SOFTMAX)
def lower_softmax(op: Op, ctx: LowerContext) -> list[KernelCall]:
    own, extras = split_prologue(op.inputs, op.attrs)
    x, out = own[0], op.outputs[0]
    prologue, pro_dims = prologue_params(op, x, extras, 1)  # a prologue implies the last axis
    if x.ndim == 0:  # softmax of a scalar is 1: a one-element row
        dims = [IntImm(1), IntImm(1), IntImm(1)]
        last = True
    else:
        a = op.attrs.axis
        inner = prod(x.shape[a + 1:])
        dims = [prod(x.shape[:a]), x.shape[a], inner]
        last = inner == 1
    spec = KernelSpec.make(ctx.template("softmax.cpp.j2"), mode="last" if last else "strided",
                           t=STORAGE[out.dtype], store_exp=out.dtype is DType.float32, block=SOFTMAX_BLOCK,
                           row_buf=SOFTMAX_ROW_BUF, par_threshold=PAR_THRESHOLD, prologue=prologue)
    return [KernelCall(spec, [out, *op.inputs], dims + pro_dims, label(op))]
