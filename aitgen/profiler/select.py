"""Which configs a GEMM-shaped kernel instantiates, and the M at which it switches between them.

A dynamic M (batch x seq) is cut into buckets at powers of two within its bounds; each bucket has
its own winner (profiled, from the cache, else the heuristic at the bucket's largest M). Buckets
in a row with the same winner merge, so the kernel holds one config per distinct winner and a
chain of `if (M <= bound)` picks one at run time. N, K and the batch are taken at their upper
bounds (they are static in the models we build; a dynamic N or K is profiled at its largest).

Backend-neutral: a Problem's candidates are any frozen configs with a `name` and `as_params()`
(CUTLASS's GemmConfig; ROCm's CkConfig, codegen/kernels/rocm/configs.py), and a backend whose
configs the CUTLASS cost model does not describe passes its own `heuristic` to winner/dispatch.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

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
    candidates: tuple[Any, ...]   # GemmConfig on CUDA; anything with `name` and `as_params()` elsewhere
    streamk: bool = True  # whether the kernel supports stream-K configs
    backend: str = "cuda"

    def key(self, m: int, build_arch: str, cutlass_version: str) -> ProfileKey:
        bucket = f"m={m},n={self.n.upper},k={self.k.upper},l={self.l.upper}"
        return ProfileKey(self.op, self.epilogue, f"{self.dtype.value}->{self.out_dtype.value}", self.layouts,
                          bucket, f"{build_arch}/{self.arch}", cutlass_version, self.backend)


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


Heuristic = Callable[[Problem, int], Any]   # (problem, bucket's M) -> one of problem.candidates


def profiled(p: Problem, m: int, build_arch: str, cache: Optional[ProfileCache], version: str) -> Optional[Any]:
    """The cached winner of bucket `m` among the problem's candidates, or None (no entry, or a
    config since dropped from the candidates: the caller falls back to its heuristic)."""
    if cache is None:
        return None
    hit = cache.get(p.key(m, build_arch, version))
    return find(p.candidates, hit[0].get("name", "")) if hit is not None else None


def winner(p: Problem, m: int, build_arch: str, cache: Optional[ProfileCache], cutlass_version: str,
           heuristic: Optional[Heuristic] = None) -> Any:
    cfg = profiled(p, m, build_arch, cache, cutlass_version)
    if cfg is not None:
        return cfg
    if heuristic is not None:
        return heuristic(p, m)
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
