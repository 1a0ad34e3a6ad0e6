"""Kernel configuration choice for the CUTLASS templates: candidates, a deterministic heuristic, an
sqlite cache of profiled winners, and the selection per M bucket. A leaf: it imports no code
generation; the drivers that time candidates on a GPU are the backends' (codegen/kernels/cuda/profile.py,
codegen/kernels/rocm/profile.py, sharing kernels/gpu/profiling.py), which store their winners here
(ROCm's candidates are Composable Kernel instances, select.Problem takes any named config)."""
from .cache import ProfileCache, ProfileKey
from .candidates import GemmConfig, conv_candidates, gemm_candidates
from .heuristic import choose_gemm
from .select import Problem, dispatch, m_buckets

__all__ = ["ProfileCache", "ProfileKey", "GemmConfig", "gemm_candidates", "conv_candidates", "choose_gemm",
           "Problem", "dispatch", "m_buckets"]
