"""Which devices answer. cuda-python is optional; without it, or without a driver, there is no GPU.

Nothing here raises on a machine without a GPU except `require_cuda`, whose DeviceError says why.
"""
from __future__ import annotations

import functools
from typing import Optional

from ..errors import DeviceError


def _cudart():
    try:
        from cuda.bindings import runtime as cudart  # type: ignore
    except Exception:
        return None
    return cudart


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[int, str]:
    """(number of devices, why none) without raising."""
    cudart = _cudart()
    if cudart is None:
        return 0, "cuda-python is not installed (pip install 'aitgen[cuda]', or pip install cuda-bindings)"
    try:
        err, count = cudart.cudaGetDeviceCount()  # error 35 without a driver: no exception
    except Exception as e:  # noqa: BLE001 - a broken install is "no GPU", with its words
        return 0, f"cuda-python failed: {e}"
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        hint = (" (no NVIDIA driver, or one older than this CUDA)" if int(err) == 35 else
                " (no NVIDIA GPU visible)" if int(err) == 100 else "")
        return 0, f"cudaGetDeviceCount failed with {name} = {int(err)}{hint}"
    if not count:
        return 0, "no NVIDIA GPU is visible"
    return int(count), ""


def cuda_available() -> bool:
    return _probe()[0] > 0


def require_cuda() -> None:
    """Raise DeviceError, saying why, unless a CUDA device and its driver answer."""
    count, why = _probe()
    if count == 0:
        raise DeviceError(f"cannot run a CUDA model here: {why}")


@functools.lru_cache(maxsize=None)
def cuda_capability(device: int = 0) -> Optional[tuple[int, int]]:
    """(major, minor) compute capability of `device`, or None where no GPU answers."""
    if not cuda_available():
        return None
    cudart = _cudart()
    err, prop = cudart.cudaGetDeviceProperties(device)
    if int(err) != 0:
        return None
    return int(prop.major), int(prop.minor)
