"""Reading a DLPack tensor (torch, cupy, jax, numpy...) without importing its framework: its data
pointer, device, dtype and shape, straight from the capsule that `__dlpack__` returns.

The capsule is not consumed (its name stays "dltensor"), so its own destructor calls the
producer's deleter when the last reference goes; `DLView.keepalive` holds it for as long as the
pointer is in use.
"""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Any, Optional

from ..errors import RuntimeInputError, RuntimeInputTypeError
from ..ir.dtype import DType

# DLDeviceType values
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm", 13: "cuda_managed"}

# (type code, bits) -> DType; codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
# (1, 8) is read as bool for producers that export masks as uint8 (kept from before uint8 existed);
# Model._dl_input reads it as uint8 where the model expects uint8.
_DTYPES = {(0, 8): DType.int8, (0, 16): DType.int16, (0, 32): DType.int32, (0, 64): DType.int64,
           (2, 16): DType.float16, (2, 32): DType.float32, (2, 64): DType.float64, (4, 16): DType.bfloat16,
           (6, 8): DType.bool, (1, 8): DType.bool, (1, 16): DType.uint16, (1, 32): DType.uint32,
           (1, 64): DType.uint64}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclasses.dataclass
class DLView:
    ptr: int                       # data pointer with byte_offset applied
    device_type: int
    device_id: int
    dtype: Optional[DType]         # None: a type aitgen has no name for (uint16, complex, ...)
    dtype_text: str
    shape: tuple[int, ...]
    contiguous: bool               # dense row-major (strides absent or matching)
    keepalive: Any                 # the capsule and its producer

    @property
    def device(self) -> str:
        return f"{_DEVICE_NAMES.get(self.device_type, f'device_type {self.device_type}')}:{self.device_id}"

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * (self.dtype.itemsize if self.dtype else 0)


def is_dlpack(obj: Any) -> bool:
    return hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")


def device_of(obj: Any, name: str) -> tuple[int, int]:
    """(DLDeviceType, device id) of input `name`; a producer whose answer is not that pair is a
    RuntimeInputTypeError."""
    try:
        dev_type, dev_id = obj.__dlpack_device__()
        return int(dev_type), int(dev_id)
    except Exception as e:  # noqa: BLE001 - any object may claim the protocol
        raise RuntimeInputTypeError(f"input '{name}': its __dlpack_device__ did not give (device type, id): "
                                    f"{type(e).__name__}") from None


def view(obj: Any, name: str, stream: Optional[int] = None) -> DLView:
    """Describe `obj` (input `name`, for errors). `stream`: for a CUDA tensor, the stream the
    consumer will read it on (1 = the legacy default stream); the producer orders its pending
    writes before that stream, as the DLPack protocol says."""
    try:
        capsule = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    except Exception as e:  # noqa: BLE001 - the producer's refusal (e.g. a tensor that needs grad)
        raise RuntimeInputError(f"input '{name}': its __dlpack__ failed: {e}") from e
    if not _is_valid(capsule, b"dltensor"):
        raise RuntimeInputError(f"input '{name}': __dlpack__ did not return an unused 'dltensor' capsule")
    managed = _DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    contiguous = True
    if t.strides:
        expect = 1
        for i in reversed(range(t.ndim)):
            # a dim of size 1 may carry any stride: it is never stepped over
            if shape[i] != 1 and int(t.strides[i]) != expect:
                contiguous = False
            expect *= shape[i]
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dtype = _DTYPES.get((code, bits)) if lanes == 1 else None
    text = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}.get(code, f"code{code}") + str(bits)
    return DLView(ptr=(t.data or 0) + int(t.byte_offset), device_type=int(t.device.device_type),
                  device_id=int(t.device.device_id), dtype=dtype, dtype_text=text if lanes == 1 else f"{text}x{lanes}",
                  shape=shape, contiguous=contiguous, keepalive=(capsule, obj))
