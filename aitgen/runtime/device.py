"""Which devices answer. cuda-python is optional; without it, or without a driver, there is no GPU."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    try:
        from cuda.bindings import runtime as cudart  # type: ignore
    except Exception:
        return False
    try:
        err, count = cudart.cudaGetDeviceCount()  # error 35 without a driver: no exception
    except Exception:
        return False
    return int(err) == 0 and count > 0
