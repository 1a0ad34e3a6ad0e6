"""Cumulative sum and product -> one kernel (backends/cpu/templates/scan.cpp.j2): x viewed as
[outer, axis, inner], scanned along the axis."""
from __future__ import annotations

from ....ir.dims import prod
from ....ir.op import Op, OpKind
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .norm import PAR_THRESHOLD
from .reduce import ARG_BLOCK


@lowering("cpu", OpKind.CUMSUM, OpKind.CUMPROD)
def lower_scan(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    ax = op.attrs.axis
    spec = KernelSpec.make(ctx.template("scan.cpp.j2"), op="sum" if op.kind is OpKind.CUMSUM else "prod",
                           exclusive=bool(op.attrs.exclusive), reverse=bool(op.attrs.reverse),
                           t=STORAGE[x.dtype], ct=COMPUTE[x.dtype], load=load(x.dtype, "x", "i"),
                           store=store(out.dtype, "VAL"), block=ARG_BLOCK, par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [out, x], [prod(x.shape[:ax]), x.shape[ax] if x.ndim else 1, prod(x.shape[ax + 1:])],
                       op.name or op.kind.value)]
