"""Lowering functions, one file per op family; importing this package registers them."""
from . import attention, conv, elementwise, gemm, grouped, memory, norm, pool, reduce  # noqa: F401
from . import cuda  # noqa: F401,E402 - the CUDA lowerings (kernels/cuda/)
