"""Lowering functions, one file per op family; importing this package registers them."""
from . import attention, conv, elementwise, gemm, memory, norm, pool, reduce  # noqa: F401
