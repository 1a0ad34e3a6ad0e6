"""The CUDA side of Model, through cuda-python (`cuda.bindings.runtime`): the device checks made
before a library is loaded, device buffers, and the inputs and outputs of a run.

Inputs are numpy arrays (copied into per-runtime device staging buffers, allocated once at their
largest shape, so a CUDA graph replays) or DLPack tensors on the model's GPU (torch, cupy, ...:
read in place, zero copy). Outputs follow the inputs: numpy arrays when every input was numpy,
torch tensors on the GPU when any input was a torch tensor, cupy arrays for cupy, else a
DeviceArray (``__cuda_array_interface__``, ``.numpy()``). A run has finished on the GPU when
`run` returns.
"""
from __future__ import annotations

import functools
import math
import queue
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import DeviceError, RuntimeInputError
from ..ir.dtype import DType
from . import dlpack
from .device import cuda_capability, require_cuda

ModelErrorFactory = Callable[[str], Exception]
# The alignment every tensor base of a CUDA build meets (backends/cuda/backend.yaml `alignment`).
ALIGNMENT = 256


def _cudart():
    from cuda.bindings import runtime as cudart  # type: ignore
    return cudart


def check(result, what: str, error: ModelErrorFactory = DeviceError, rt=None):
    """cuda-python returns (err, *values): raise `error` naming `what` unless err is success. A
    failed call also sets the thread's last CUDA error, which the next kernel launch's check would
    report as its own: `rt` (the runtime API used) clears it first."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        if rt is not None:
            rt.cudaGetLastError()
        name = getattr(err, "name", str(err))
        raise error(f"{what} failed: {name} ({int(err)})")
    return values[0] if len(values) == 1 else tuple(values)


def prepare_device(meta: dict, device: int, arch_for: Callable[[tuple[int, int]], Optional[str]]) -> None:
    """Before a CUDA library is loaded: a GPU answers, it is the arch the library was built for,
    and it is the calling thread's current device (the library's runtimes use that one)."""
    require_cuda()
    cc = cuda_capability(device)
    if cc is None:
        raise DeviceError(f"CUDA device {device} does not answer (cudaGetDeviceProperties failed)")
    built, wants = meta.get("arch"), arch_for(cc)
    if built is not None and wants != built:
        need = (f"which runs {wants} code; rebuild with compile_model(..., arch={wants!r})" if wants
                else "which aitgen does not build for")
        raise DeviceError(f"this model was built for {built}, but CUDA device {device} has compute capability "
                          f"{cc[0]}.{cc[1]}, {need}")
    check(_cudart().cudaSetDevice(device), f"cudaSetDevice({device})")


class DeviceBuffer:
    """cudaMalloc'd bytes, freed with the object (or by free()). `rt`: the runtime API to use
    (cuda-python's, or the mock device's: runtime/mock.py)."""

    def __init__(self, nbytes: int, rt=None):
        self.nbytes, self.rt = int(nbytes), rt or _cudart()
        self.ptr = int(check(self.rt.cudaMalloc(max(self.nbytes, 1)), f"cudaMalloc of {self.nbytes} bytes", rt=self.rt))

    def free(self) -> None:
        if getattr(self, "ptr", 0):
            try:
                self.rt.cudaFree(self.ptr)
            except Exception:  # noqa: BLE001 - at interpreter exit the module may be half gone
                pass
            self.ptr = 0

    def __del__(self) -> None:
        self.free()


def copy_to_device(dst: int, a: np.ndarray, rt=None) -> None:
    if a.nbytes:
        rt = rt or _cudart()
        k = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        check(rt.cudaMemcpy(dst, a.ctypes.data, a.nbytes, k), "copying an input to the GPU", rt=rt)


def copy_to_host(a: np.ndarray, src: int, rt=None) -> None:
    if a.nbytes:
        rt = rt or _cudart()
        k = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        check(rt.cudaMemcpy(a.ctypes.data, src, a.nbytes, k), "copying an output from the GPU", rt=rt)


def copy_device_to_device(dst: int, src: int, nbytes: int, rt=None) -> None:
    """A synchronous copy on the legacy stream: after the producer's work (DLPack stream 1)."""
    if nbytes:
        rt = rt or _cudart()
        k = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        check(rt.cudaMemcpy(dst, src, nbytes, k), "staging a misaligned input", rt=rt)


class DeviceArray:
    """A model output in GPU memory (inputs were DLPack tensors of a framework other than torch or
    cupy). Zero-copy into cupy/numba/torch through __cuda_array_interface__; numpy() copies."""

    def __init__(self, buffer: DeviceBuffer, shape: tuple[int, ...], dtype: DType):
        self.buffer, self.shape, self.dtype = buffer, tuple(shape), dtype

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    @property
    def __cuda_array_interface__(self) -> dict:
        # stream None: the run has finished, so a consumer needs no synchronisation.
        return {"shape": self.shape, "typestr": self.dtype.np.str, "data": (self.buffer.ptr, False),
                "version": 3, "strides": None, "stream": None}

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype.np)
        copy_to_host(out, self.buffer.ptr, self.buffer.rt)
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.buffer.ptr:x})"


def _framework(obj: Any) -> str:
    mod = type(obj).__module__.split(".")[0]
    return mod if mod in ("torch", "cupy") else "other"


class CudaIO:
    """Inputs and outputs of a CUDA model's runs (see the module docstring)."""

    def __init__(self, input_specs: dict, output_specs: dict, device: int, rt=None):
        self.input_specs, self.output_specs, self.device, self.rt = input_specs, output_specs, device, rt
        self._staging: "queue.SimpleQueue[dict[str, DeviceBuffer]]" = queue.SimpleQueue()
        # Sizes at the bounds, once: a run is on the latency path of batch-1 inference, where a
        # numpy reduction per tensor (microseconds each) is a visible part of a run.
        self._max_bytes = {**{"in:" + n: _nbytes(s.max_shape, s.dtype) for n, s in input_specs.items()},
                           **{"out:" + n: _nbytes(s.max_shape, s.dtype) for n, s in output_specs.items()}}

    def device_view(self, name: str, obj: Any) -> Optional[dlpack.DLView]:
        """A CUDA DLPack tensor as read in place; None for a host one (the caller copies it)."""
        dev_type, dev_id = dlpack.device_of(obj, name)
        if dev_type == dlpack.CPU:
            return None
        if dev_type not in (dlpack.CUDA, dlpack.CUDA_MANAGED):
            raise RuntimeInputError(f"input '{name}' lives on DLPack device type {dev_type}; this model runs on "
                                    f"cuda:{self.device} and reads CUDA or host tensors")
        if dev_id != self.device:
            raise RuntimeInputError(f"input '{name}' is on cuda:{dev_id}, the model runs on cuda:{self.device}")
        # stream 1: the producer orders its pending writes before the legacy default stream, which
        # every run waits for (backends/gpu/src/gpu_runtime.cu).
        return dlpack.view(obj, name, stream=1)

    def run(self, feeds: Sequence[tuple[str, Any]], call, stream: Optional[int] = None) -> dict[str, Any]:
        """feeds: (name, numpy array or DLView) per input in order; call(in_ptrs, in_shapes,
        out_ptrs, stream) runs the library and returns the output shapes. stream: the cudaStream_t
        the run orders itself after; None: torch's (cupy's) current stream when an input is a
        torch (cupy) tensor, since outputs are allocated on it, else none beyond the legacy one."""
        try:
            staging = self._staging.get_nowait()   # one set per concurrent caller, reused after
        except queue.Empty:
            staging = {}
        try:
            return self._run(feeds, call, staging, stream)
        finally:
            self._staging.put(staging)

    def close(self) -> None:
        """Free the staging buffers now rather than at garbage collection."""
        while True:
            try:
                staging = self._staging.get_nowait()
            except queue.Empty:
                return
            for buf in staging.values():
                buf.free()

    def _buffer(self, staging: dict, key: str, nbytes: int) -> int:
        buf = staging.get(key)
        if buf is None:
            buf = staging[key] = DeviceBuffer(nbytes, self.rt)
        return buf.ptr

    def _run(self, feeds, call, staging, stream) -> dict[str, Any]:
        ptrs, shapes, frameworks = [], [], set()
        for name, value in feeds:
            spec = self.input_specs[name]
            if isinstance(value, np.ndarray):
                for axis, (n, top) in enumerate(zip(value.shape, spec.max_shape)):
                    if n > top:  # checked here too: the staging buffer holds the largest shape only
                        raise RuntimeInputError(f"input '{name}': dim {axis} is {n}, above its largest allowed "
                                                f"size {top}")
                ptr = self._buffer(staging, "in:" + name, self._max_bytes["in:" + name])
                copy_to_device(ptr, value, self.rt)
                ptrs.append(ptr)
                shapes.append(value.shape)
            else:
                frameworks.add(_framework(value.keepalive[1]))
                ptr = value.ptr
                if ptr % ALIGNMENT:
                    # A view at an offset (x[1:], a slice of a packed buffer): the kernels were built
                    # for 256-byte aligned bases (backend.yaml), so it is read through a staging copy
                    # rather than refused by a kernel's alignment check.
                    ptr = self._buffer(staging, "in:" + name, self._max_bytes["in:" + name])
                    copy_device_to_device(ptr, value.ptr, value.nbytes, self.rt)
                ptrs.append(ptr)
                shapes.append(value.shape)
        mode = ("torch" if "torch" in frameworks else "cupy" if "cupy" in frameworks else
                "device" if frameworks else "host")
        outs, out_ptrs = [], []
        for name, spec in self.output_specs.items():
            if mode == "host":
                out_ptrs.append(self._buffer(staging, "out:" + name, self._max_bytes["out:" + name]))
                continue
            buf = _allocate(mode, spec, self.device, self.rt)
            outs.append(buf)
            out_ptrs.append(_data_ptr(buf))
        if stream is None:
            stream = _current_stream(mode, self.device)
        out_shapes = call(ptrs, shapes, out_ptrs, stream or 0)
        result = {}
        for j, (name, spec) in enumerate(self.output_specs.items()):
            shape = tuple(out_shapes[j])
            numel = math.prod(shape)
            if mode == "host":
                a = np.empty(shape, spec.dtype.np)
                copy_to_host(a, out_ptrs[j], self.rt)
                result[name] = a
            elif mode == "device":
                result[name] = DeviceArray(outs[j], shape, spec.dtype)
            else:  # torch / cupy: a view of the first numel elements
                result[name] = outs[j][:numel].reshape(shape)
        return result


def _current_stream(mode: str, device: int) -> int:
    """The framework's current stream on `device` (0: none to order after beyond the legacy one)."""
    if mode == "torch":
        import torch
        return int(torch.cuda.current_stream(device).cuda_stream)
    if mode == "cupy":
        import cupy
        with cupy.cuda.Device(device):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _nbytes(shape, dtype: DType) -> int:
    return math.prod(int(d) for d in shape) * dtype.itemsize


@functools.lru_cache(maxsize=None)
def _torch_dtype(dtype: DType):
    import torch
    return {DType.float32: torch.float32, DType.float16: torch.float16, DType.bfloat16: torch.bfloat16,
            DType.int8: torch.int8, DType.int32: torch.int32, DType.int64: torch.int64, DType.bool: torch.bool,
            DType.uint8: torch.uint8}[dtype]


def _allocate(mode: str, spec, device: int, rt=None):
    numel = math.prod(int(d) for d in spec.max_shape)
    if mode == "torch":
        import torch
        return torch.empty(max(numel, 1), dtype=_torch_dtype(spec.dtype), device=torch.device("cuda", device))
    if mode == "cupy":
        import cupy
        with cupy.cuda.Device(device):
            return cupy.empty(max(numel, 1), dtype=spec.dtype.np)
    return DeviceBuffer(numel * spec.dtype.itemsize, rt)   # rt: the mock's, or HIP's (runtime/rocm.py)


def _data_ptr(buf) -> int:
    if isinstance(buf, DeviceBuffer):
        return buf.ptr
    if hasattr(buf, "data_ptr"):   # torch
        return int(buf.data_ptr())
    return int(buf.data.ptr)       # cupy
