"""The config a GEMM/conv gets without a profile: a fixed rule of M, N, K and the arch.

The rule is deterministic (builds on machines without a GPU are reproducible) and follows what
wins in CUTLASS's own profiles: the largest tile that still gives every SM work, stream-K when
there are too few tiles for a wave and K is deep enough to split, short tiles for short M.

  sm_90a, 16-bit (132 SMs on H100/H200):
    M <= 64                                   64x128x64 pingpong
    tiles(128x256) >= SMs                     128x256x64 cooperative, cluster 2x1
    2*tiles(128x128) <= SMs and K >= 4096     128x128x64 cooperative, stream-K
    K <= 1024                                 128x128x64 pingpong
    otherwise                                 128x128x64 cooperative, cluster 2x1
  sm_80, 16-bit (108 SMs on A100):
    M <= 64                                   64x64x32, 5 stages
    tiles(128x256) >= SMs                     128x256x32, 3 stages
    2*tiles(128x128) <= SMs and K >= 4096     128x128x32 stream-K
    tiles(128x128) >= SMs                     128x128x32, 4 stages
    otherwise                                 64x128x32 or 128x64x32 (the longer side of the result)
  float32 (TF32, either arch): M <= 64: 64x64x16; tiles(128x128) >= SMs: 128x128x16; else 128x64x16.
where tiles(a x b) = ceil(M/a) * ceil(N/b) * batch.
"""
from __future__ import annotations

from ..ir.dtype import DType
from .candidates import GemmConfig, find, gemm_candidates

SMS = {"sm_80": 108, "sm_90a": 132}


def _tiles(m: int, n: int, l: int, tm: int, tn: int) -> int:
    return -(-m // tm) * -(-n // tn) * l


def choose_gemm(arch: str, dtype: DType, m: int, n: int, k: int, l: int = 1, *, streamk: bool = True) -> GemmConfig:
    """The heuristic's config for one problem size. `streamk=False` for kernels without it (conv,
    batched GEMM)."""
    sms = SMS[arch]
    cands = gemm_candidates(arch, dtype)
    if dtype is DType.float32:
        name = ("sm80_64x64x16_w32x32x16_s5" if m <= 64 else
                "sm80_128x128x16_w64x64x16_s4" if _tiles(m, n, l, 128, 128) >= sms else
                "sm80_128x64x16_w64x32x16_s4")
    elif arch == "sm_90a":
        deep = streamk and 2 * _tiles(m, n, l, 128, 128) <= sms and k >= 4096
        name = ("sm90_64x128x64_c1x1_pingpong" if m <= 64 else
                "sm90_128x256x64_c2x1_cooperative" if _tiles(m, n, l, 128, 256) >= sms else
                "sm90_128x128x64_c1x1_cooperative_streamk" if deep else
                "sm90_128x128x64_c1x1_pingpong" if k <= 1024 else
                "sm90_128x128x64_c2x1_cooperative")
    else:
        deep = streamk and 2 * _tiles(m, n, l, 128, 128) <= sms and k >= 4096
        name = ("sm80_64x64x32_w32x32x32_s5" if m <= 64 else
                "sm80_128x256x32_w64x64x32_s3" if _tiles(m, n, l, 128, 256) >= sms else
                "sm80_128x128x32_w64x64x32_s4_streamk" if deep else
                "sm80_128x128x32_w64x64x32_s4" if _tiles(m, n, l, 128, 128) >= sms else
                "sm80_64x128x32_w32x64x32_s4" if n >= m else "sm80_128x64x32_w64x32x32_s4")
    cfg = find(cands, name)
    assert cfg is not None, f"heuristic names {name}, which is not a candidate"  # a table edit gone wrong
    return cfg
