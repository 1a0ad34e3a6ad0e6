"""GPU (CUDA and ROCm, one source: gpu/dialect.py) softmax -> one kernel (backends/gpu/templates/softmax.cu.j2), viewed as the CPU lowering
views it: [outer, axis, inner]. Along the last axis (inner == 1) rows are read through the op's
prologue like the row norms (gpu/norm.py row_params / row_geometry): a warp or a block per row,
the row in registers between its maximum, its sum of exponentials and the output; rows longer
than a block holds are read twice, the first time with an online maximum and rescaled sum. With
inner > 1 a thread walks each column of the axis (adjacent threads, adjacent columns). Numerically
stable: exp(x - max) / sum, in float32, as the oracle.
"""
from __future__ import annotations

from ....ir.dims import IntImm, prod
from ....ir.op import Op, OpKind
from ....ops.prologue import split_prologue
from ...cexpr import STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, dialect, template
from .norm import row_geometry, row_params


@lowering(BACKENDS, OpKind.SOFTMAX)
def lower_softmax(op: Op, ctx: LowerContext) -> list[KernelCall]:
    own, extras = split_prologue(op.inputs, op.attrs)
    x, out = own[0], op.outputs[0]
    if x.ndim == 0:  # softmax of a scalar is 1: a one-element row
        outer, n, inner = IntImm(1), IntImm(1), IntImm(1)
    else:
        a = op.attrs.axis
        outer, n, inner = prod(x.shape[:a]), x.shape[a], prod(x.shape[a + 1:])
    last = inner == 1
    row, pro_dims, packed = row_params(op, x, extras, 1)  # a prologue implies the last axis
    geo = row_geometry(n, packed + [out.dtype], dialect(ctx).warp)
    spec = KernelSpec.make(template("softmax.cu.j2"), mode="last" if last else "strided", t=STORAGE[out.dtype],
                           row=row, first_extra=2, **geo)
    return [KernelCall(spec, [out, *op.inputs], [outer, n, inner, *pro_dims], op.name or op.kind.value)]
