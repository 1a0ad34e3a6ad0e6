"""GROUPED ops (group_ops: independent ops of one kind) -> CUDA kernels.

The member lowerings live with their families (a grouped GEMM: gemm.py, one launch over every
member's tiles). The features declared here are the member kinds group_ops may form for CUDA
(Capabilities.grouped); a family that renders groups adds its entry to _MEMBER_LOWERINGS.
"""
from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.op import Op, OpKind
from ....ops.grouped import member_ops
from ...lower import LowerContext, lowering
from ...spec import KernelCall
from .gemm import lower_grouped_gemm

_MEMBER_LOWERINGS = {
    OpKind.GEMM: lower_grouped_gemm,
}


@lowering("cuda", OpKind.GROUPED, grouped=tuple(_MEMBER_LOWERINGS))
def lower_grouped(op: Op, ctx: LowerContext) -> list[KernelCall]:
    fn = _MEMBER_LOWERINGS.get(op.attrs.kind)
    if fn is None:
        raise UnsupportedOpError(f"grouped op '{op.name}': no CUDA kernel for groups of {op.attrs.kind.value}")
    return fn(op, member_ops(op), ctx)
