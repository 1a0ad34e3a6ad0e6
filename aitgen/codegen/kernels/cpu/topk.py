"""Top-k along an axis -> one kernel (backends/cpu/templates/topk.cpp.j2): x viewed as
[outer, axis, inner]; values and indices out."""
from __future__ import annotations

from ....ir.dims import Dim, IntImm, prod
from ....ir.op import Op, OpKind
from ...cexpr import COMPUTE, STORAGE, load
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .norm import PAR_THRESHOLD


@lowering("cpu", OpKind.TOPK)
def lower_top_k(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, (vals, idx) = op.inputs[0], op.outputs
    ax = op.attrs.axis
    spec = KernelSpec.make(ctx.template("topk.cpp.j2"), largest=bool(op.attrs.largest),
                           t=STORAGE[x.dtype], ct=COMPUTE[x.dtype], load=load(x.dtype, "x", "i"),
                           par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [vals, idx, x], [prod(x.shape[:ax]), x.shape[ax], prod(x.shape[ax + 1:]),
                                              op.attrs.k if isinstance(op.attrs.k, Dim) else IntImm(op.attrs.k)], op.name or op.kind.value)]
