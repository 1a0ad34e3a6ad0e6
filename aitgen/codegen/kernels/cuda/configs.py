"""The CUTLASS configs a CUDA GEMM-shaped kernel is built with: per M bucket, the profiled winner
from the profile cache, else the heuristic's choice (aitgen.profiler.select.dispatch). The cache
file and the CUTLASS version, which the profiler takes as arguments, are this backend's to know."""
from __future__ import annotations

from ....profiler import select
from ...locate import pin
from ..gpu.profiling import default_cache  # noqa: F401 - shared with ROCm; tests patch it here


def cutlass_version() -> str:
    """The pinned CUTLASS version (locate.cutlass() checks that the installed one equals it): part of
    every profile key, so a new pin is a new key, never a stale answer."""
    return pin("cutlass").version


def configs(problem: select.Problem, arch: str) -> list[dict]:
    """The template's `configs` for `problem` built for `arch`."""
    return select.dispatch(problem, arch, default_cache(), cutlass_version())
