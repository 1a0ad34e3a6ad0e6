"""GROUPED ops (group_ops: independent ops of one kind) -> CUDA kernels.

The member lowerings live with their families (a grouped GEMM: gemm.py, one launch over every
member's tiles). The features declared here are the member kinds group_ops may form for CUDA
(Capabilities.grouped); a family that renders groups adds its entry to _MEMBER_LOWERINGS.
"""
from __future__ import annotations

from ....ir.op import OpKind
from ..common.grouped import register_grouped
from .gemm import lower_grouped_gemm

_MEMBER_LOWERINGS = {
    OpKind.GEMM: lower_grouped_gemm,
}


register_grouped("cuda", "CUDA", _MEMBER_LOWERINGS)
