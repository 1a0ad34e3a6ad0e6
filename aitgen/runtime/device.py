"""Which devices answer. cuda-python (NVIDIA) and hip-python (AMD) are optional; without them, or
without a driver, there is no GPU.

Nothing here raises on a machine without a GPU except `require_cuda` / `require_rocm`, whose
DeviceError says why.
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


# ---------------------------------------------------------------------------------------------
# ROCm (AMD GPUs), through hip-python where installed
# ---------------------------------------------------------------------------------------------

KFD = "/dev/kfd"   # the AMD GPU kernel driver's node: without it no AMD GPU answers, whatever is installed
HIP_PYTHON_HINT = "pip install 'aitgen[rocm]' (hip-python matching the installed ROCm)"


def _hip():
    try:
        from hip import hip  # type: ignore
    except Exception:
        return None
    return hip


def _count_by_library() -> tuple[int, str]:
    """hipGetDeviceCount from libamdhip64 itself (no hip-python): enough to pick the target."""
    import ctypes
    for name in ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        n = ctypes.c_int(0)
        err = lib.hipGetDeviceCount(ctypes.byref(n))
        return (int(n.value), "") if err == 0 and n.value > 0 else (0, f"hipGetDeviceCount failed ({err})")
    return 0, "neither hip-python nor libamdhip64 is installed"


@functools.lru_cache(maxsize=1)
def _probe_rocm() -> tuple[int, str]:
    """(number of AMD GPUs, why none) without raising; cheap where there is no AMD driver (one stat)."""
    import os
    if not os.path.exists(KFD):
        return 0, f"no AMD GPU driver ({KFD} is absent)"
    hip = _hip()
    if hip is None:
        return _count_by_library()
    try:
        err, count = hip.hipGetDeviceCount()
    except Exception as e:  # noqa: BLE001 - a broken install is "no GPU", with its words
        return 0, f"hip-python failed: {e}"
    if int(err) != 0:
        return 0, f"hipGetDeviceCount failed with {getattr(err, 'name', str(err))} = {int(err)}"
    if not count:
        return 0, "no AMD GPU is visible"
    return int(count), ""


def rocm_available() -> bool:
    return _probe_rocm()[0] > 0


def rocm_unavailable_reason() -> str:
    """Why no AMD GPU answers ("" when one does): the driver, the HIP library, the device count."""
    return _probe_rocm()[1]


def require_rocm() -> None:
    """Raise DeviceError naming what is missing (the driver, hip-python, a GPU) unless an AMD GPU
    answers through hip-python, which the ROCm runtime needs for device memory."""
    count, why = _probe_rocm()
    if count == 0:
        raise DeviceError(f"cannot run a ROCm model here: {why}")
    if _hip() is None:
        raise DeviceError(f"cannot run a ROCm model here: hip-python is not installed ({HIP_PYTHON_HINT})")


def gfx_name(arch_name: str) -> str:
    """'gfx90a:sramecc+:xnack-' (hipDeviceProp_t.gcnArchName) -> 'gfx90a': the ISA, less the target features."""
    return arch_name.split(":", 1)[0].strip()


@functools.lru_cache(maxsize=None)
def rocm_arch(device: int = 0) -> Optional[str]:
    """The gfx ISA of AMD `device` ('gfx90a'), or None where none answers (or hip-python is absent)."""
    if not rocm_available():
        return None
    hip = _hip()
    if hip is None:
        return None
    try:
        err, prop = hip.hipGetDeviceProperties(device)
    except Exception:  # noqa: BLE001
        return None
    if int(err) != 0:
        return None
    name = prop.gcnArchName
    return gfx_name(name.decode() if isinstance(name, bytes) else str(name))
