"""Scaled-dot-product attention -> one fused kernel (backends/cpu/templates/attention.cpp.j2):
blocked over keys with an online softmax, parallel over (batch, query block).

The run-time arguments (merged batch dims, per-operand strides and offsets, views of a packed QKV
GEMM output, the result written in [B, S, H, D] order) are common/attention.py's, which every
backend shares; sizes and strides are dims, so one kernel serves every layer. The kernel needs a
unit stride along the head dim of q, k, v and the result (fuse_memory_ops only folds views that
keep it).
"""
from __future__ import annotations

from ....ir.op import Op, OpKind
from ...cexpr import STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.attention import attention_args

BLOCK_Q = 64   # queries per work item (a multiple of 16): 12 heads x seq 128 give 24 items
# Keys per block: the 128x64 score tile (32 KB) and a 128-key slice of K and V stay in L1/L2. At
# BERT's 128 keys one block holds them all (no rescaling pass): 0.40-0.46 ms a layer against
# 0.51-0.70 with 64 on a Zen 4 EPYC (12 heads, D 64, 2 threads); 512 and 1024 keys ran alike.
BLOCK_K = 128
PAR_MIN_FLOPS = 1 << 18  # below ~0.25 MFLOP a parallel region costs more than it saves


@lowering("cpu", OpKind.ATTENTION)
def lower_attention(op: Op, ctx: LowerContext) -> list[KernelCall]:
    a = attention_args(op, "cpu")
    spec = KernelSpec.make(
        ctx.template("attention.cpp.j2"), t=STORAGE[a.dtype], mask=a.mask,
        mask_t=STORAGE[a.mask_dtype] if a.mask_dtype is not None else "void",
        mask_q_bcast=a.mask_q_bcast, causal=a.causal, scale_from_head_dim=a.scale_from_head_dim,
        rb=a.rb, block_q=BLOCK_Q, block_k=BLOCK_K, par_min_flops=PAR_MIN_FLOPS)
    return [KernelCall(spec, a.ptrs, a.dims, op.name or op.kind.value)]
