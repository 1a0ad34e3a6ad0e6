"""Scaled-dot-product attention on CUDA -> one fused flash-attention style kernel.

The strides, offsets and flags come from the CPU lowering's backend-neutral attention_args (batch
broadcast and merging, strided q/k/v views of a packed QKV GEMM output, a strided result, masks):
the kernels read the same run-time argument list as backends/cpu/templates/attention.cpp.j2.

Two kernels:
- attention_mma.cu.j2: float16/bfloat16 with a static head dim in MMA_HEAD_DIMS (q, k, v alike):
  tensor cores through mma.sync m16n8k16, fed by cp.async and ldmatrix. sm_90a runs the same
  mma.sync code (no wgmma/TMA): at the sequence lengths of the zoo (128-512) the attention is a
  few microseconds and launch shape matters more than peak tensor throughput.
- attention_simt.cu.j2: float32 and any other head dim (run-time head dims too), CUDA cores,
  float32 all through: the SIMT kernel shared with ROCm (kernels/gpu/attention.py, backends/gpu).
"""
from __future__ import annotations

import dataclasses

from ....ir.dims import Dim, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ...cexpr import STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.attention import AttentionArgs, attention_args
from ..gpu.attention import simt_call

MMA_HEAD_DIMS = (64, 128)   # the swizzled tiles need a multiple of 64; 128 still fits the registers
MMA_DTYPES = (DType.float16, DType.bfloat16)
MMA_BLOCK_N = 64            # keys per shared-memory tile
MMA_MAX_WARPS = 4           # 16 query rows each
# SMs of the GPUs each arch stands for (A100, H100/H200): the tensor-core kernel shrinks its query
# tile until one wave of CTAs covers them, so small problems (BERT at seq 128: 12 heads x 2 tiles
# of 64) spread over the GPU instead of leaving most SMs idle.
SM_COUNT = {"sm_80": 108, "sm_90a": 132}

# The smallest opt-in shared memory per block among sm_80+ GPUs (8.6/8.9: 99 KiB).
SMEM_LIMIT = 99 * 1024


@dataclasses.dataclass(frozen=True)
class MmaConfig:
    warps: int     # query rows per CTA = 16 * warps
    block_n: int

    @property
    def block_m(self) -> int:
        return 16 * self.warps


def _upper(d: Dim) -> int:
    return d.value if d.is_static else d.upper


def mma_config(head_dim: int, batch_upper: int, sq_upper: int, arch: str) -> MmaConfig:
    """Warps per CTA: the most (best reuse of each key/value tile) that still gives every SM a CTA
    for the largest problem the dims allow; never below one warp. Keys per tile: MMA_BLOCK_N
    (128 keys at head dim 64 would save short sequences a load step, but its 64 scores and their
    mask values per thread spill registers)."""
    sms = SM_COUNT.get(arch, SM_COUNT["sm_80"])
    warps = MMA_MAX_WARPS
    while warps > 1 and batch_upper * -(-sq_upper // (16 * warps)) < sms:
        warps //= 2
    cfg = MmaConfig(warps, MMA_BLOCK_N)
    assert mma_smem_bytes(head_dim, cfg) <= SMEM_LIMIT, (head_dim, cfg)
    return cfg


def mma_smem_bytes(head_dim: int, cfg: MmaConfig) -> int:
    """attention_mma.cu.j2's SMEM_BYTES: the query tile and two stages of a key and a value tile."""
    return (cfg.block_m + 4 * cfg.block_n) * head_dim * 2


def uses_tensor_cores(a: AttentionArgs) -> bool:
    d, dv = a.head_dim, a.value_dim
    return (a.dtype in MMA_DTYPES and d.is_static and dv.is_static and d.value == dv.value
            and d.value in MMA_HEAD_DIMS)


@lowering("cuda", OpKind.ATTENTION)
def lower_attention(op: Op, ctx: LowerContext) -> list[KernelCall]:
    a = attention_args(op, "cuda")
    arch = getattr(ctx, "arch", None) or "sm_80"
    mask_t = STORAGE[a.mask_dtype] if a.mask_dtype is not None else "void"
    if uses_tensor_cores(a):
        cfg = mma_config(a.head_dim.value, _upper(prod(a.batch)), _upper(a.sq), arch)
        # A mask walked along its keys with unit stride (the usual case) saves a 64-bit multiply
        # per score, and the registers its addresses would hold.
        mask_k_unit = a.mask != "none" and a.mask_k_stride == 1
        spec = KernelSpec.make(ctx.template("attention_mma.cu.j2"), t=STORAGE[a.dtype], mask=a.mask,
                               mask_t=mask_t, mask_k_unit=mask_k_unit, causal=a.causal, rb=a.rb,
                               head_dim=a.head_dim.value, warps=cfg.warps, block_n=cfg.block_n)
    else:
        return [simt_call(op, ctx, a)]
    return [KernelCall(spec, a.ptrs, a.dims, op.name or op.kind.value)]
