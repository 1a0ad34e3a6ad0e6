"""Lowerings shared by the GPU backends (CUDA and ROCm): our own kernels (element-wise, layout copies,
pad, gather, reductions, norms, softmax, pooling, scans, the SIMT attention kernel), rendered from one set of templates
(backends/gpu/templates) whose platform spellings come from each backend's aitgen/gpu_dialect.h,
and whose warp geometry comes from the backend's GpuDialect (dialect.py). Each module registers
for every backend of dialect.BACKENDS; a backend's package (kernels/cuda, kernels/rocm) imports
this one, so the shared families exist exactly when one of those backends is the target."""
from . import elementwise, gather, norm, pool, reduce, scan, softmax, view  # noqa: F401
from . import attention  # noqa: F401 - simt_call, which kernels/cuda/attention.py and kernels/rocm/attention.py use
