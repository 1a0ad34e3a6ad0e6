"""Gather (np.take along an axis; embeddings) -> one kernel (backends/cpu/templates/gather.cpp.j2)
with common/copy.py's geometry: d = [outer, n, m, inner]. A bad index is refused at run time with
the op's name (the kernel checks each one)."""
from __future__ import annotations

from ....ir.dims import Dim
from ....ir.op import Op, OpKind
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common import copy
from .view import PAR_MIN_BYTES


def _gather(ctx: LowerContext, item: int, numel: Dim, **geometry) -> KernelSpec:
    return KernelSpec.make(ctx.template("gather.cpp.j2"), **geometry, par_min=PAR_MIN_BYTES // item)


@lowering("cpu", OpKind.GATHER)
def lower_gather(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.gather_calls(op, ctx, _gather)
