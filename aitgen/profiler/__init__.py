"""Kernel configuration choice for the CUTLASS templates: candidates, a deterministic heuristic, an
sqlite cache of profiled winners, and the runner that times candidates on a GPU."""
from .cache import ProfileCache, ProfileKey
from .candidates import GemmConfig, conv_candidates, gemm_candidates
from .heuristic import choose_gemm
from .select import Problem, dispatch, m_buckets

__all__ = ["ProfileCache", "ProfileKey", "GemmConfig", "gemm_candidates", "conv_candidates", "choose_gemm",
           "Problem", "dispatch", "m_buckets"]
