"""The CUTLASS configs a CUDA GEMM-shaped kernel is built with: per M bucket, the profiled winner
from the profile cache, else the heuristic's choice (aitgen.profiler.select.dispatch). The cache
file and the CUTLASS version, which the profiler takes as arguments, are this backend's to know."""
from __future__ import annotations

from ....profiler import select
from ....profiler.cache import ProfileCache
from ...build import default_cache_dir
from ...locate import pin


def default_cache() -> ProfileCache:
    """The build cache dir's profile file (AITGEN_CACHE_DIR or ~/.cache/aitgen), beside the object
    cache, so every build on a machine shares what was measured there."""
    return ProfileCache(default_cache_dir() / "profiler.sqlite")


def cutlass_version() -> str:
    """The pinned CUTLASS version (locate.cutlass() checks that the installed one equals it): part of
    every profile key, so a new pin is a new key, never a stale answer."""
    return pin("cutlass").version


def configs(problem: select.Problem, arch: str) -> list[dict]:
    """The template's `configs` for `problem` built for `arch`."""
    return select.dispatch(problem, arch, default_cache(), cutlass_version())
