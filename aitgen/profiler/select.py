"""Which configs a GEMM-shaped kernel instantiates, and the M at which it switches between them.

A dynamic M (batch x seq) is cut into buckets at powers of two within its bounds; each bucket has
its own winner (profiled, from the cache, else the heuristic at the bucket's largest M). Buckets
in a row with the same winner merge, so the kernel holds one config per distinct winner and a
chain of `if (M <= bound)` picks one at run time. N, K and the batch are taken at their upper
bounds (they are static in the models we build; a dynamic N or K is profiled at its largest).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..ir.dims import Dim
from ..ir.dtype import DType
from .cache import ProfileCache, ProfileKey
from .candidates import GemmConfig, base, find
from .heuristic import choose_gemm


@dataclasses.dataclass(frozen=True)
class Problem:
    """A GEMM-shaped problem as the profiler sees it (conv: its implicit GEMM)."""
    op: str
    epilogue: str
    dtype: DType          # operands
    out_dtype: DType
    layouts: str
    arch: str             # the kernel's arch (a float32 GEMM on sm_90a runs the sm_80 kernel: "sm_80")
    m: Dim
    n: Dim
    k: Dim
    l: Dim
    candidates: tuple[GemmConfig, ...]
    streamk: bool = True  # whether the kernel supports stream-K configs

    def key(self, m: int, build_arch: str, cutlass_version: str) -> ProfileKey:
        bucket = f"m={m},n={self.n.upper},k={self.k.upper},l={self.l.upper}"
        return ProfileKey(self.op, self.epilogue, f"{self.dtype.value}->{self.out_dtype.value}", self.layouts,
                          bucket, f"{build_arch}/{self.arch}", cutlass_version)


def m_buckets(m: Dim) -> list[int]:
    """Upper ends of M's buckets: [M] for a static M, else powers of two from the lower bound up,
    and the upper bound last."""
    if m.is_static:
        return [max(m.value, 1)]
    lo, hi = max(m.lower, 1), max(m.upper, 1)
    out, b = [], 1
    while b < lo:
        b *= 2
    while b < hi:
        out.append(b)
        b *= 2
    return out + [hi]


def winner(p: Problem, m: int, build_arch: str, cache: Optional[ProfileCache], cutlass_version: str) -> GemmConfig:
    if cache is not None:
        hit = cache.get(p.key(m, build_arch, cutlass_version))
        if hit is not None:
            cfg = find(p.candidates, hit[0].get("name", ""))
            if cfg is not None:  # a config since dropped from the candidates falls to the heuristic
                return cfg
    cfg = choose_gemm(p.arch, p.dtype, m, p.n.upper, p.k.upper, p.l.upper, streamk=p.streamk, cands=p.candidates,
                      target=build_arch)
    return cfg if base(cfg) in p.candidates else p.candidates[0]


def dispatch(p: Problem, build_arch: str, cache: Optional[ProfileCache], cutlass_version: str) -> list[dict]:
    """The template's `configs`: each config's params plus `max_m` (None on the last)."""
    runs: list[tuple[GemmConfig, int]] = []
    for m in m_buckets(p.m):
        cfg = winner(p, m, build_arch, cache, cutlass_version)
        if runs and runs[-1][0] == cfg:
            runs[-1] = (cfg, m)
        else:
            runs.append((cfg, m))
    return [dict(cfg.as_params(), max_m=None if i == len(runs) - 1 else bound)
            for i, (cfg, bound) in enumerate(runs)]
