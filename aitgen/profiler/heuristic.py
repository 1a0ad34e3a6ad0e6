"""The config a GEMM/conv gets without a profile: a fixed cost model over the candidates.

Deterministic (builds on machines without a GPU are reproducible) and built around one fact: a
GEMM whose output tiles do not cover the target's SMs leaves the rest of the chip idle, whatever
the tile. BERT-base at 128 tokens has M = 128, so 128x256 tiles give it 6-18 thread blocks on
132 SMs. For every candidate (and every split-K factor of a stream-K-capable one) it counts

  tiles  = ceil(M/tm) * ceil(N/tn) * batch * split          (work units, the thread blocks that work)
  ctas   = the same with ceil(M/tm), ceil(N/tn) rounded up to the cluster shape (idle CTAs included)
  waves  = ceil(ctas / slots), slots = SMs rounded down to whole clusters
  wave efficiency = tiles / (waves * SMs)
  time   = waves * (ceil(K / split / tk) + fixed) * tm * tn * tk / tile_efficiency

`fixed` is a tile's prologue + epilogue in k-steps (2; 1 for pingpong when an SM gets more than one
tile, its epilogue hides under the other warp group's MMAs; + SPLIT_STEPS with split-K for the partials in the
workspace). tile_efficiency = I / (I + 32) with I = tm*tn / (tm/cn + tn/cm), the MACs per element
loaded (a cluster multicasts A along N and B along M): small tiles are bandwidth-bound.

The choice: the fastest by that model among configs that fill at least one wave with wave
efficiency >= GOOD_WAVE; if none does, the fastest overall (more, smaller units at a partial wave
beat a second wave that is mostly empty). Split-K only where each split keeps MIN_K_PER_SPLIT of K
(shorter splits spend their time in prologue and reduction). Plain stream-K (split 1) is left to
the profiler: its decomposition is decided by CUTLASS at run time and has no tile count here.
Ties go to the earlier candidate in the list. SM counts: SMS (full-size parts: H100/H200 SXM, A100).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..ir.dtype import DType
from .candidates import GemmConfig, gemm_candidates

SMS = {"sm_80": 108, "sm_90a": 132}   # A100; H100 / H200 SXM
GOOD_WAVE = 0.75
MIN_K_PER_SPLIT = 256
MAX_SPLIT = 16
SPLIT_STEPS = 3      # a split-K unit writes its fp32 partial tile and one reads them back: ~3 k-steps of traffic


@dataclasses.dataclass(frozen=True)
class Estimate:
    cfg: GemmConfig
    tiles: int          # useful work units (times split)
    ctas: int           # launched, with cluster padding
    waves: int
    wave_eff: float
    time: float         # model units: MAC-steps of one SM


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def estimate(cfg: GemmConfig, m: int, n: int, k: int, l: int, sms: int) -> Estimate:
    tm, tn, tk = cfg.tile
    cm, cn = cfg.cluster
    gm, gn = _cdiv(max(m, 1), tm), _cdiv(max(n, 1), tn)
    tiles = gm * gn * l * cfg.split_k
    ctas = _cdiv(gm, cm) * cm * _cdiv(gn, cn) * cn * l * cfg.split_k
    slots = max(sms // (cm * cn), 1) * cm * cn
    waves = _cdiv(ctas, slots)
    fixed = 1 if cfg.schedule == "pingpong" and waves > 1 else 2
    fixed += SPLIT_STEPS if cfg.split_k > 1 else 0
    intensity = tm * tn / (tm / cn + tn / cm)
    eff = intensity / (intensity + 32)
    time = waves * (_cdiv(_cdiv(max(k, 1), cfg.split_k), tk) + fixed) * tm * tn * tk / eff
    return Estimate(cfg, tiles, ctas, waves, tiles / (waves * sms), time)


def options(cands: tuple[GemmConfig, ...], k: int, streamk: bool) -> list[GemmConfig]:
    """What the heuristic may pick: the plain candidates, and split-K (split >= 2, each split at
    least MIN_K_PER_SPLIT deep) of the stream-K ones where the kernel supports it."""
    out = [c for c in cands if not c.streamk]
    if streamk:
        for c in cands:
            if c.streamk and c.split_k == 1:
                out += [dataclasses.replace(c, split_k=s) for s in range(2, MAX_SPLIT + 1) if k >= s * MIN_K_PER_SPLIT]
    return out


def rank(sms: int, cands: tuple[GemmConfig, ...], m: int, n: int, k: int, l: int, streamk: bool) -> list[Estimate]:
    """Every option's estimate on `sms` SMs, best first (the choice is the head)."""
    opts = options(cands, k, streamk)
    ests = [estimate(c, m, n, k, l, sms) for c in opts]
    order = {c: i for i, c in enumerate(opts)}
    good = lambda e: e.tiles >= sms and e.wave_eff >= GOOD_WAVE  # noqa: E731
    return sorted(ests, key=lambda e: (not good(e), e.time, order[e.cfg]))


def choose_gemm(arch: str, dtype: DType, m: int, n: int, k: int, l: int = 1, *, streamk: bool = True,
                cands: Optional[tuple[GemmConfig, ...]] = None, target: Optional[str] = None) -> GemmConfig:
    """The heuristic's config for one problem size, from `cands` (default: the arch's GEMM
    candidates). `streamk=False` for kernels without split-K (conv, batched GEMM). `target`: the
    build's arch, whose SM count counts (a float32 GEMM built for sm_90a runs the sm_80 kernel on
    132 SMs); default `arch`."""
    if cands is None:
        cands = gemm_candidates(arch, dtype)
    return rank(SMS[target or arch], cands, m, n, k, l, streamk)[0].cfg
