"""The ROCm Python runtime without an AMD GPU: the HIP facade that lets CudaIO serve ROCm builds,
checked against a fake hip-python whose "device memory" is host memory; the device checks before a
library loads (arch from gcnArchName, what is missing); DLPack device types."""
from __future__ import annotations

import ctypes
import enum
import types

import numpy as np
import pytest

from aitgen.errors import DeviceError, RuntimeInputError
from aitgen.ir.dtype import DType
from aitgen.runtime import device
from aitgen.runtime import rocm
from aitgen.runtime.model import TensorSpec


class _Err(enum.IntEnum):
    hipSuccess = 0
    hipErrorOutOfMemory = 2


class _Kind(enum.IntEnum):
    hipMemcpyHostToDevice = 1
    hipMemcpyDeviceToHost = 2
    hipMemcpyDeviceToDevice = 3


class _Pointer:
    """hip-python hands pointers back as objects that int() turns into addresses."""

    def __init__(self, address: int):
        self.address = address

    def __int__(self) -> int:
        return self.address


def fake_hip(limit: int = 1 << 20):
    """hip.hip's calls as hip-python shapes them: (err, value) tuples, enums; memory from ctypes."""
    blocks, log = {}, []

    def hipMalloc(n):
        if n > limit:
            return _Err.hipErrorOutOfMemory, None
        buf = ctypes.create_string_buffer(n)
        blocks[ctypes.addressof(buf)] = buf
        return _Err.hipSuccess, _Pointer(ctypes.addressof(buf))

    def hipFree(p):
        blocks.pop(int(p), None)
        return (_Err.hipSuccess,)

    def hipMemcpy(dst, src, n, kind):
        assert isinstance(kind, _Kind)
        log.append(kind.name)
        ctypes.memmove(int(dst), int(src), n)
        return (_Err.hipSuccess,)

    ns = types.SimpleNamespace(hipMalloc=hipMalloc, hipFree=hipFree, hipMemcpy=hipMemcpy, hipMemcpyKind=_Kind,
                               hipGetLastError=lambda: (_Err.hipSuccess,),
                               hipSetDevice=lambda d: log.append(f"set {d}") or (_Err.hipSuccess,))
    return ns, blocks, log


def _specs():
    return ({"x": TensorSpec("x", DType.float32, (8, 4))}, {"y": TensorSpec("y", DType.float32, (8, 4))})


def test_rocm_io_runs_through_the_hip_facade():
    hip, blocks, log = fake_hip()
    ins, outs = _specs()
    io = rocm.RocmIO(ins, outs, 0, rocm.HipRuntime(hip))
    seen = []

    def call(in_ptrs, in_shapes, out_ptrs, stream):   # the library: y = x, on the "device"
        seen.append((in_shapes, stream))
        ctypes.memmove(out_ptrs[0], in_ptrs[0], int(np.prod(in_shapes[0])) * 4)
        return [in_shapes[0]]

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = io.run([("x", x)], call)
    np.testing.assert_array_equal(out["y"], x)
    assert seen == [([(3, 4)], 0)]
    assert log == ["hipMemcpyHostToDevice", "hipMemcpyDeviceToHost"]
    assert len(blocks) == 2               # one staging buffer each for x and y, at their largest shape
    io.run([("x", x[:1])], call)          # reused, not reallocated
    assert len(blocks) == 2
    io.close()
    assert not blocks


def test_hip_errors_become_device_errors():
    hip, _, _ = fake_hip(limit=16)
    ins, outs = _specs()
    io = rocm.RocmIO(ins, outs, 0, rocm.HipRuntime(hip))
    with pytest.raises(DeviceError, match="cudaMalloc of 128 bytes failed: hipErrorOutOfMemory"):
        io.run([("x", np.zeros((8, 4), np.float32))], lambda *a: [(8, 4)])


def test_dlpack_device_types():
    hip, _, _ = fake_hip()
    io = rocm.RocmIO(*_specs(), 1, rocm.HipRuntime(hip))

    def on(dev_type, dev_id):
        return type("T", (), {"__dlpack_device__": lambda self: (dev_type, dev_id),
                              "__dlpack__": lambda self, stream=None: pytest.fail("must not be read")})()

    assert io.device_view("x", on(1, 0)) is None                       # host: copied in
    with pytest.raises(RuntimeInputError, match="DLPack device type 2.*ROCm or host"):
        io.device_view("x", on(2, 1))                                  # a CUDA tensor
    with pytest.raises(RuntimeInputError, match="AMD GPU 0, the model runs on 1"):
        io.device_view("x", on(rocm.ROCM, 0))


def test_prepare_device_checks_the_gfx_isa(monkeypatch):
    hip, _, log = fake_hip()
    monkeypatch.setattr(rocm, "require_rocm", lambda: None)
    monkeypatch.setattr(rocm, "_hip", lambda: hip)
    archs = {"gfx90a": "gfx90a", "gfx940": "gfx940"}
    monkeypatch.setattr(rocm, "rocm_arch", lambda d: "gfx940")
    with pytest.raises(DeviceError, match="built for gfx90a, but AMD GPU 0 is gfx940.*arch='gfx940'"):
        rocm.prepare_device({"arch": "gfx90a"}, 0, archs.get)
    monkeypatch.setattr(rocm, "rocm_arch", lambda d: "gfx908")
    with pytest.raises(DeviceError, match="gfx908, which aitgen does not build for"):
        rocm.prepare_device({"arch": "gfx90a"}, 0, archs.get)
    monkeypatch.setattr(rocm, "rocm_arch", lambda d: "gfx90a")
    rt = rocm.prepare_device({"arch": "gfx90a"}, 0, archs.get)
    assert isinstance(rt, rocm.HipRuntime) and log == ["set 0"]


def test_require_rocm_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(device, "_probe_rocm", lambda: (0, "no AMD GPU driver (/dev/kfd is absent)"))
    with pytest.raises(DeviceError, match="/dev/kfd"):
        device.require_rocm()
    monkeypatch.setattr(device, "_probe_rocm", lambda: (1, ""))
    monkeypatch.setattr(device, "_hip", lambda: None)
    monkeypatch.setattr(rocm, "_hip", lambda: None)
    with pytest.raises(DeviceError, match="hip-python is not installed"):
        device.require_rocm()
    with pytest.raises(DeviceError, match="hip-python"):
        rocm.HipRuntime(None)
