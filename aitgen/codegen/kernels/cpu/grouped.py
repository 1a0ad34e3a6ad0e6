"""GROUPED ops (group_ops: independent ops of one kind) -> one CPU kernel each.

The member lowerings live with their families: a grouped GEMM runs each member's oneDNN matmul in
turn from one kernel (gemm.py); grouped layernorms/rmsnorms and grouped element-wise expressions
are one parallel loop over all members' rows or elements (norm.py, elementwise.py). The features
declared here are the member kinds group_ops may form for the CPU (Capabilities.grouped).
"""
from __future__ import annotations

from ....ir.op import OpKind
from ..common.grouped import register_grouped
from .elementwise import lower_grouped_elementwise
from .gemm import lower_grouped_gemm
from .norm import lower_grouped_rownorm

_MEMBER_LOWERINGS = {
    OpKind.GEMM: lower_grouped_gemm,
    OpKind.LAYERNORM: lower_grouped_rownorm,
    OpKind.RMSNORM: lower_grouped_rownorm,
    OpKind.FUSED_ELEMENTWISE: lower_grouped_elementwise,
}


register_grouped("cpu", "CPU", _MEMBER_LOWERINGS)
