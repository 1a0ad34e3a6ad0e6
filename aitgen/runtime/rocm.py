"""The ROCm side of Model, through hip-python (`hip.hip`): the device checks made before a library
is loaded, and device buffers and the inputs and outputs of a run.

The runs themselves are CudaIO's (runtime/cuda.py): the same staging buffers, DLPack reads and
output kinds, over `HipRuntime`, a facade that answers the few cuda-python calls CudaIO makes
(cudaMalloc, cudaFree, cudaMemcpy, cudaGetLastError) with HIP's. So the two GPU runtimes stay one
code path, as the shared C++ runtime (backends/gpu/src/gpu_runtime.cu) does. torch and cupy on
ROCm name AMD GPUs "cuda", so their outputs are allocated as on CUDA.

Imported only when a ROCm build is loaded: without hip-python or an AMD GPU, Model.load raises
DeviceError naming what is missing (runtime/device.py require_rocm).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import DeviceError, RuntimeInputError
from . import dlpack
from .cuda import CudaIO, check
from .device import _hip, require_rocm, rocm_arch

ROCM = 10   # DLDeviceType kDLROCM


class _MemcpyKinds:
    """cudaMemcpyKind's members as HIP's (same values, HIP's enum type)."""

    def __init__(self, hip):
        k = hip.hipMemcpyKind
        self.cudaMemcpyHostToDevice = k.hipMemcpyHostToDevice
        self.cudaMemcpyDeviceToHost = k.hipMemcpyDeviceToHost
        self.cudaMemcpyDeviceToDevice = k.hipMemcpyDeviceToDevice


class HipRuntime:
    """The cuda-python calls CudaIO and DeviceBuffer make, answered by hip-python. Results keep
    cuda-python's shape, (err, *values), with pointers as ints."""

    def __init__(self, hip=None):
        self.hip = hip if hip is not None else _hip()
        if self.hip is None:
            raise DeviceError("cannot run a ROCm model here: hip-python is not installed "
                              "(pip install 'aitgen[rocm]' with the hip-python version of the installed ROCm)")
        self.cudaMemcpyKind = _MemcpyKinds(self.hip)

    def cudaMalloc(self, nbytes: int):
        err, ptr = self.hip.hipMalloc(nbytes)
        return err, int(ptr) if int(err) == 0 else 0

    def cudaFree(self, ptr: int):
        return self.hip.hipFree(ptr)

    def cudaMemcpy(self, dst: int, src: int, nbytes: int, kind):
        return self.hip.hipMemcpy(dst, src, nbytes, kind)

    def cudaGetLastError(self):
        return self.hip.hipGetLastError()

    def cudaSetDevice(self, device: int):
        return self.hip.hipSetDevice(device)


def prepare_device(meta: dict, device: int, arch_for: Callable[[str], Optional[str]]) -> HipRuntime:
    """Before a ROCm library is loaded: an AMD GPU answers through hip-python, its gfx ISA is the
    one the library was built for (model.json device_archs), and it is the current device."""
    require_rocm()
    gfx = rocm_arch(device)
    if gfx is None:
        raise DeviceError(f"AMD GPU {device} does not answer (hipGetDeviceProperties failed)")
    built, wants = meta.get("arch"), arch_for(gfx)
    if built is not None and wants != built:
        need = (f"which runs {wants} code; rebuild with compile_model(..., target='rocm', arch={wants!r})" if wants
                else "which aitgen does not build for")
        raise DeviceError(f"this model was built for {built}, but AMD GPU {device} is {gfx}, {need}")
    rt = HipRuntime()
    check(rt.cudaSetDevice(device), f"hipSetDevice({device})")
    return rt


class RocmIO(CudaIO):
    """CudaIO over HIP: DLPack tensors on the model's AMD GPU are read in place (ROCm device type)."""

    def __init__(self, input_specs: dict, output_specs: dict, device: int, rt: Optional[HipRuntime] = None):
        super().__init__(input_specs, output_specs, device, rt if rt is not None else HipRuntime())

    def device_view(self, name: str, obj: Any) -> Optional[dlpack.DLView]:
        dev_type, dev_id = dlpack.device_of(obj, name)
        if dev_type == dlpack.CPU:
            return None
        if dev_type != ROCM:
            raise RuntimeInputError(f"input '{name}' lives on DLPack device type {dev_type}; this model runs on "
                                    f"AMD GPU {self.device} and reads ROCm or host tensors")
        if dev_id != self.device:
            raise RuntimeInputError(f"input '{name}' is on AMD GPU {dev_id}, the model runs on {self.device}")
        # stream 1 (the legacy default stream, HIP's null stream): every run waits for it.
        return dlpack.view(obj, name, stream=1)
