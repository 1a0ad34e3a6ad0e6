"""Scaled-dot-product attention on the SIMT cores (backends/gpu/templates/attention_simt.cu.j2),
one source for both GPU backends: CUDA takes it for float32 and the head dims its tensor-core
kernel does not cover (kernels/cuda/attention.py), ROCm for what Composable Kernel's fused
GEMM-softmax-GEMM does not take (kernels/rocm/attention.py: float32, mask tensors, head dims that
are not multiples of 8 or exceed 128, unaligned strided views). Each backend's lowering registers
itself and calls simt_call here.

The strides, offsets and flags come from the CPU lowering's backend-neutral attention_args; the
kernel blocks over keys with an online softmax, one key per lane of a warp (the dialect's warp
size: 32 keys per tile on NVIDIA, 64 on CDNA), float32 all through.
"""
from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.dims import Dim
from ....ir.op import Op
from ...cexpr import STORAGE
from ...lower import LowerContext
from ...spec import KernelCall, KernelSpec
from ..common.attention import AttentionArgs
from .dialect import dialect, template

SIMT_BLOCK_Q = 16           # queries per CTA
SIMT_WARPS = 4


def _upper(d: Dim) -> int:
    return d.value if d.is_static else d.upper


def simt_smem_bytes(d: int, dv: int, block_k: int) -> int:
    """Dynamic shared memory of attention_simt.cu.j2 (its smem_floats, in bytes)."""
    return 4 * (SIMT_BLOCK_Q * (d + dv) + block_k * max(d + 1, dv) + SIMT_BLOCK_Q * block_k + 3 * SIMT_BLOCK_Q)


def simt_call(op: Op, ctx: LowerContext, a: AttentionArgs) -> KernelCall:
    """The SIMT kernel's call for `op` (its attention_args `a`); UnsupportedOpError where the head
    dims' tiles do not fit the backend's shared memory."""
    gd = dialect(ctx)
    smem = simt_smem_bytes(_upper(a.head_dim), _upper(a.value_dim), gd.warp)
    if smem > gd.smem_limit:
        raise UnsupportedOpError(
            f"attention '{op.name}': head dims {a.head_dim} (q, k) and {a.value_dim} (v) need "
            f"{smem} bytes of shared memory in the {ctx.backend} kernel, more than {gd.smem_limit}")
    mask_t = STORAGE[a.mask_dtype] if a.mask_dtype is not None else "void"
    spec = KernelSpec.make(template("attention_simt.cu.j2"), t=STORAGE[a.dtype], mask=a.mask,
                           mask_t=mask_t, causal=a.causal, rb=a.rb, scale_from_head_dim=a.scale_from_head_dim,
                           block_q=SIMT_BLOCK_Q, block_k=gd.warp, warps=SIMT_WARPS, warp=gd.warp)
    return KernelCall(spec, a.ptrs, a.dims, op.name or op.kind.value)
