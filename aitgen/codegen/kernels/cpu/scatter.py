"""scatter_nd (ONNX ScatterND/ScatterElements with run-time indices) -> one kernel
(backends/cpu/templates/scatter.cpp.j2): copy data, check every index (a bad one refuses the run,
naming the op), then apply the updates in order. d = [U, row, data dims[0..k)]."""
from __future__ import annotations

from ....ir.dims import prod
from ....ir.op import Op, OpKind
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec


@lowering("cpu", OpKind.SCATTER_ND)
def lower_scatter_nd(op: Op, ctx: LowerContext) -> list[KernelCall]:
    data, idx, upd = op.inputs
    (out,) = op.outputs
    k = idx.shape[-1].value
    label = "scatter_nd" + (f" '{op.name}'" if op.name else "")
    # The template writes the label as an escaped literal (`| cstr`): op names are user text.
    spec = KernelSpec.make(ctx.template("scatter.cpp.j2"), reduction=op.attrs.reduction, k=k,
                           t=STORAGE[data.dtype], ct=COMPUTE[data.dtype], index_t=STORAGE[idx.dtype],
                           load=load(data.dtype, "x", "i"), store=store(data.dtype, "v"), label=label)
    dims = [prod(idx.shape[:-1]), prod(data.shape[k:])] + list(data.shape[:k])
    return [KernelCall(spec, [out, data, idx, upd], dims, op.name or op.kind.value)]
