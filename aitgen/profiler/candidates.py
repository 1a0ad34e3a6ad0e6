"""Candidate kernel configurations for the CUTLASS GEMM/conv templates, per arch and data type.

A config is every number a template needs to instantiate one kernel: threadblock tile, warp tile and
pipeline stages (sm_80, CUTLASS 2.x); tile, cluster shape and warp-specialised schedule (sm_90a,
CUTLASS 3.x, stages chosen by the collective builder from what shared memory the epilogue leaves);
stream-K / split-K. The lists hold the shapes CUTLASS's own profiler finds best on A100/H100 for
large and small problems; aitgen.profiler times them, or heuristic.py picks one without a GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..ir.dtype import DType


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    arch: str                                   # "sm_80" (CUTLASS 2.x) or "sm_90a" (CUTLASS 3.x)
    tile: tuple[int, int, int]                  # threadblock (sm_80) / CTA (sm_90a) tile M, N, K
    warp: tuple[int, int, int] = (0, 0, 0)      # sm_80: warp tile
    stages: int = 0                             # sm_80: cp.async pipeline depth
    cluster: tuple[int, int] = (1, 1)           # sm_90a: thread-block cluster M, N
    schedule: str = ""                          # sm_90a: "cooperative" | "pingpong"
    streamk: bool = False                       # stream-K work decomposition (both archs)
    split_k: int = 1                            # with streamk: > 1 means classic split-K into that many

    @property
    def name(self) -> str:
        t = "x".join(map(str, self.tile))
        if self.arch == "sm_80":
            s = f"sm80_{t}_w{'x'.join(map(str, self.warp))}_s{self.stages}"
        else:
            s = f"sm90_{t}_c{self.cluster[0]}x{self.cluster[1]}_{self.schedule}"
        if self.streamk:
            s += "_streamk" if self.split_k == 1 else f"_splitk{self.split_k}"
        return s

    def as_params(self) -> dict:
        """What the templates read (and the cache stores)."""
        return dict(name=self.name, tb=list(self.tile), warp=list(self.warp), stages=self.stages,
                    cluster=list(self.cluster), schedule=self.schedule, streamk=self.streamk, split=self.split_k)

    @staticmethod
    def from_params(arch: str, d: dict) -> "GemmConfig":
        return GemmConfig(arch, tuple(d["tb"]), tuple(d["warp"]), d["stages"], tuple(d["cluster"]), d["schedule"],
                          d["streamk"], d["split"])


def _sm80(tile, warp, stages, streamk=False, split=1) -> GemmConfig:
    return GemmConfig("sm_80", tile, warp, stages, streamk=streamk, split_k=split)


def _sm90(tile, cluster, schedule, streamk=False, split=1) -> GemmConfig:
    return GemmConfig("sm_90a", tile, cluster=cluster, schedule=schedule, streamk=streamk, split_k=split)


# 16-bit operands: K tile 32 (64 bytes per row of a stage); 32-bit (TF32): K tile 16, the same bytes.
_SM80_16 = (
    _sm80((128, 256, 32), (64, 64, 32), 3),
    _sm80((256, 128, 32), (64, 64, 32), 3),
    _sm80((128, 128, 32), (64, 64, 32), 4),
    _sm80((128, 128, 64), (64, 64, 64), 3),
    _sm80((128, 64, 32), (64, 32, 32), 4),
    _sm80((64, 128, 32), (32, 64, 32), 4),
    _sm80((64, 64, 32), (32, 32, 32), 5),
    _sm80((128, 128, 32), (64, 64, 32), 4, streamk=True),
    # Split-K bases for small M (the heuristic runs them with split_k > 1, a run-time argument of
    # the same instance): a 128-token GEMM has too few output tiles for 108 SMs otherwise.
    _sm80((128, 64, 32), (64, 32, 32), 4, streamk=True),
    _sm80((64, 128, 32), (32, 64, 32), 4, streamk=True),
    _sm80((64, 64, 32), (32, 32, 32), 5, streamk=True),
)
_SM80_TF32 = (
    _sm80((128, 128, 16), (64, 64, 16), 4),
    _sm80((128, 256, 16), (64, 64, 16), 3),
    _sm80((128, 64, 16), (64, 32, 16), 4),
    _sm80((64, 64, 16), (32, 32, 16), 5),
    _sm80((128, 128, 16), (64, 64, 16), 4, streamk=True),
    _sm80((128, 64, 16), (64, 32, 16), 4, streamk=True),
    _sm80((64, 64, 16), (32, 32, 16), 5, streamk=True),
)
# Hopper: 128x256 cooperative with a 2x1 cluster is what reaches cuBLAS on large bf16/f16 GEMMs
# (TMA multicast halves B's loads); pingpong overlaps one warp group's epilogue with the other's
# MMAs and wins when K is short; 64-row tiles keep small M from wasting half a tile. Stream-K /
# split-K needs the cooperative schedule (CUTLASS's pingpong kernel static_asserts against the
# stream-K scheduler), and cooperative needs 128-row tiles: 128x64 is the smallest splittable tile.
_SM90_16 = (
    _sm90((128, 256, 64), (2, 1), "cooperative"),
    _sm90((256, 128, 64), (1, 2), "cooperative"),
    _sm90((128, 256, 64), (1, 1), "cooperative"),
    _sm90((128, 128, 64), (2, 1), "cooperative"),
    _sm90((128, 128, 64), (1, 1), "pingpong"),
    _sm90((64, 128, 64), (1, 1), "pingpong"),
    _sm90((64, 256, 64), (1, 1), "pingpong"),
    _sm90((64, 64, 64), (1, 1), "pingpong"),
    _sm90((128, 128, 64), (1, 1), "cooperative", streamk=True),
    _sm90((128, 64, 64), (1, 1), "cooperative", streamk=True),
)


# float32 on CUDA cores (CUTLASS's SIMT sgemm: alignment 1, so any K, N and pointer; cp.async of
# 4 bytes feeds a 4-5 stage pipeline). The tiles are CUTLASS's own sm_80 SIMT list; warp tile =
# tile / warp count, K tile 8.
_SM80_SIMT = (
    _sm80((128, 128, 8), (32, 64, 8), 4),
    _sm80((256, 128, 8), (64, 64, 8), 4),
    _sm80((128, 256, 8), (64, 64, 8), 4),
    _sm80((128, 64, 8), (64, 32, 8), 5),
    _sm80((64, 128, 8), (32, 64, 8), 5),
    _sm80((64, 64, 8), (32, 64, 8), 5),
    _sm80((128, 32, 8), (64, 32, 8), 5),
    _sm80((32, 128, 8), (32, 64, 8), 5),
)
# 16-bit operands whose rows are not 4-byte aligned (an odd K or N): cp.async moves 4, 8 or 16
# bytes, so these run the two-stage pipelined mainloop (plain loads, any alignment) on the same
# tensor cores: CUTLASS's sm_75 list, which it instantiates at alignment 1.
_SM80_16_NARROW = (
    _sm80((128, 128, 32), (64, 64, 32), 2),
    _sm80((128, 256, 32), (64, 64, 32), 2),
    _sm80((256, 128, 32), (64, 64, 32), 2),
    _sm80((128, 64, 32), (64, 32, 32), 2),
    _sm80((64, 128, 32), (32, 64, 32), 2),
    _sm80((64, 64, 32), (32, 32, 32), 2),
)


def gemm_candidates(arch: str, dtype: DType, *, tensor_cores: bool = True, narrow: bool = False) -> tuple[GemmConfig, ...]:
    """Every config the profiler may time for a GEMM of `dtype` operands on `arch`. sm_90a
    kernels need 16-byte (TMA) aligned 16-bit operands; callers fall back to the sm_80 list.
    float32 without tensor cores: the SIMT list; `narrow`: 16-bit rows under 4 bytes aligned."""
    if dtype is DType.float32:
        return _SM80_TF32 if tensor_cores else _SM80_SIMT
    if narrow:
        return _SM80_16_NARROW
    if arch == "sm_90a":
        return _SM90_16
    return _SM80_16


def conv_candidates(dtype: DType) -> tuple[GemmConfig, ...]:
    """Implicit-GEMM conv fprop (CUTLASS 2.x on both archs): no stream-K (the conv kernel has none)."""
    return tuple(c for c in gemm_candidates("sm_80", dtype) if not c.streamk)


def find(cands: tuple[GemmConfig, ...], name: str) -> Optional[GemmConfig]:
    return next((c for c in cands if c.name == name), None)


def base(cfg: GemmConfig) -> GemmConfig:
    """The candidate a split-K config runs: split_k is a run-time argument of the same kernel."""
    return dataclasses.replace(cfg, split_k=1)
