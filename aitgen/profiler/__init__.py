"""Kernel configuration choice for the CUTLASS templates: candidates, a deterministic heuristic, an
sqlite cache of profiled winners, and the selection per M bucket. A leaf: it imports no code
generation; the driver that times candidates on a GPU is the CUDA backend's
(codegen/kernels/cuda/profile.py), which stores its winners here."""
from .cache import ProfileCache, ProfileKey
from .candidates import GemmConfig, conv_candidates, gemm_candidates
from .heuristic import choose_gemm
from .select import Problem, dispatch, m_buckets

__all__ = ["ProfileCache", "ProfileKey", "GemmConfig", "gemm_candidates", "conv_candidates", "choose_gemm",
           "Problem", "dispatch", "m_buckets"]
