"""What the shared GPU lowerings (this package) need to know of the backend they render for: the
warp size (32 lanes on NVIDIA, a 64-lane wavefront on CDNA), which every warp-per-row geometry and
every shuffle loop of the templates is computed from, and the template folder they share
(backends/gpu/templates; the C++ platform spellings come from each backend's
include/aitgen/gpu_dialect.h, which carries the same warp size as ait::gpu::kWarpSize).
"""
from __future__ import annotations

import dataclasses

from ...lower import LowerContext


@dataclasses.dataclass(frozen=True)
class GpuDialect:
    name: str                 # the backend ("cuda", "rocm")
    warp: int                 # lanes that shuffle together
    max_threads: int = 1024   # threads per block
    pair_math: bool = True    # __half2 / __nv_bfloat162 pair intrinsics (CUDA's cuda_fp16/cuda_bf16)
    smem_limit: int = 99 * 1024   # dynamic shared memory a block may have on every GPU of the backend

    def __post_init__(self):
        if self.warp & (self.warp - 1) or not 1 <= self.warp <= 64 or self.max_threads % self.warp:
            raise ValueError(f"{self.name}: warp {self.warp} must be a power of two up to 64 dividing {self.max_threads}")


# HIP 5.2 has no bfloat16 pair type (hip_bfloat16 is a scalar struct), so ROCm computes 16-bit
# single ops in float32 per element: the same numbers (PAIR_EXPR's ops round once either way).
DIALECTS: dict[str, GpuDialect] = {
    # sm_80+: 99 KiB opt-in (8.6/8.9, the smallest); CDNA: 64 KiB of LDS per workgroup.
    "cuda": GpuDialect("cuda", warp=32),
    "rocm": GpuDialect("rocm", warp=64, pair_math=False, smem_limit=64 * 1024),
}
BACKENDS = tuple(DIALECTS)   # every shared lowering registers for each of these
TEMPLATES = "gpu/templates"


def dialect(ctx: LowerContext) -> GpuDialect:
    return DIALECTS[ctx.backend]


def template(name: str) -> str:
    """A shared template's path for the renderer (the same file for every GPU backend)."""
    return f"{TEMPLATES}/{name}"
