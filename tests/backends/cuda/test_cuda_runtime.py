"""The CUDA runtime where no GPU answers (this machine): every way of failing is a typed error that
says why, never a crash; and the host side of a CUDA run (staging, bounds, output kinds, DLPack
reading) checked with host memory standing in for device memory."""
from __future__ import annotations

import ctypes
import json
import sys

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import AitgenError, DeviceError, RuntimeInputError
from aitgen.ir.dtype import DType
from aitgen.runtime import cuda as rcuda
from aitgen.runtime import device, dlpack
from aitgen.runtime.model import TensorSpec

from cuda_helpers import copies

no_gpu = pytest.mark.skipif(device.cuda_available(), reason="checks the no-GPU path; a GPU answers here")


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory):
    try:
        from aitgen.codegen import locate
        locate.nvcc(), locate.cutlass()
    except AitgenError as e:
        pytest.skip(f"CUDA toolchain missing: {e}")
    return ag.compile_model(copies(), target="cuda", arch="sm_80", workdir=tmp_path_factory.mktemp("rt") / "m",
                            load=False)


# -- no driver, no GPU, no cuda-python -----------------------------------------------------------

def test_without_cuda_python(monkeypatch):
    device._probe.cache_clear()
    try:
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)   # import fails as if not installed
        monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", None)
        assert device.cuda_available() is False
        assert device.cuda_capability.__wrapped__() is None
        with pytest.raises(DeviceError, match="cuda-python is not installed.*pip install"):
            device.require_cuda()
    finally:
        monkeypatch.undo()
        device._probe.cache_clear()


@no_gpu
def test_load_without_a_driver_is_a_device_error(cuda_build):
    with pytest.raises(DeviceError, match="cannot run a CUDA model here: .*cudaGetDeviceCount"):
        ag.Model.load(cuda_build)
    with pytest.raises(DeviceError):   # and again: nothing was left half-initialised
        ag.Model.load(cuda_build, cuda_graph=True)


@no_gpu
def test_compile_and_load_builds_then_raises(tmp_path, cuda_toolchain):
    with pytest.raises(DeviceError):
        ag.compile_model(copies(), target="cuda", arch="sm_80", workdir=tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert (tmp_path / "m" / meta["library"]).is_file()   # built; loadable where a GPU answers


@no_gpu
def test_c_api_reports_the_missing_driver(cuda_build):
    """The library itself, called directly: a status and a message, twice, and the process lives."""
    meta = json.loads((cuda_build / "model.json").read_text())
    lib = ctypes.CDLL(str(cuda_build / meta["library"]))
    lib.ait_model_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    lib.ait_last_error.restype = ctypes.c_char_p
    for _ in range(2):
        handle = ctypes.c_void_p()
        assert lib.ait_model_create(str(cuda_build).encode(), 1, ctypes.byref(handle)) == 2   # AIT_ERROR
        assert handle.value is None
        assert b"cudaGetDeviceCount" in lib.ait_last_error()


def test_arch_mismatch_is_a_device_error(monkeypatch):
    monkeypatch.setattr(rcuda, "require_cuda", lambda: None)
    monkeypatch.setattr(rcuda, "cuda_capability", lambda dev: (8, 0))
    arch_for = {"8.0": "sm_80", "9.0": "sm_90a"}
    with pytest.raises(DeviceError, match=r"built for sm_90a.*8\.0.*arch='sm_80'"):
        rcuda.prepare_device({"arch": "sm_90a"}, 0, lambda cc: arch_for.get(f"{cc[0]}.{cc[1]}"))
    monkeypatch.setattr(rcuda, "cuda_capability", lambda dev: (7, 5))
    with pytest.raises(DeviceError, match="does not build for"):
        rcuda.prepare_device({"arch": "sm_80"}, 0, lambda cc: arch_for.get(f"{cc[0]}.{cc[1]}"))


# -- the host side of a CUDA run, with host memory as the "device" -------------------------------

class HostBuffer:
    """Stands in for DeviceBuffer: numpy bytes at a stable address."""
    live = []

    def __init__(self, nbytes, rt=None):
        self.nbytes, self.rt = nbytes, rt
        self.mem = np.zeros(max(nbytes, 1), np.uint8)
        self.ptr = self.mem.ctypes.data
        HostBuffer.live.append(self)


def _memmove_to(dst, a, rt=None):
    ctypes.memmove(dst, a.ctypes.data, a.nbytes)


def _memmove_from(a, src, rt=None):
    ctypes.memmove(a.ctypes.data, src, a.nbytes)


@pytest.fixture
def host_io(monkeypatch):
    monkeypatch.setattr(rcuda, "DeviceBuffer", HostBuffer)
    monkeypatch.setattr(rcuda, "copy_to_device", _memmove_to)
    monkeypatch.setattr(rcuda, "copy_to_host", _memmove_from)
    monkeypatch.setattr(rcuda, "copy_device_to_device", lambda dst, src, n, rt=None: ctypes.memmove(dst, src, n))
    ins = {"x": TensorSpec("x", DType.float32, (8, 4))}
    outs = {"y": TensorSpec("y", DType.float32, (8, 4))}
    io = rcuda.CudaIO(ins, outs, 0)
    calls = []

    def twice(in_ptrs, in_shapes, out_ptrs, stream=0):
        """The 'kernel': y = 2 x, read and written through the raw pointers it is handed."""
        calls.append((list(in_ptrs), list(out_ptrs)))
        n = int(np.prod(in_shapes[0]))
        x = np.frombuffer((ctypes.c_float * n).from_address(in_ptrs[0]), np.float32)
        np.frombuffer((ctypes.c_float * n).from_address(out_ptrs[0]), np.float32)[:] = 2 * x
        return [tuple(in_shapes[0])]

    return io, twice, calls


def test_numpy_in_numpy_out_through_stable_staging(host_io):
    io, twice, calls = host_io
    for n in (3, 8, 5):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        y = io.run([("x", x)], twice)["y"]
        assert isinstance(y, np.ndarray) and y.shape == (n, 4)
        np.testing.assert_array_equal(y, 2 * x)
    # the same staging buffers every run: what lets a captured CUDA graph replay
    assert calls[0] == calls[1] == calls[2]


def test_input_above_its_bound_is_refused_before_any_copy(host_io):
    io, twice, calls = host_io
    with pytest.raises(RuntimeInputError, match="input 'x': dim 0 is 9, above its largest allowed size 8"):
        io.run([("x", np.zeros((9, 4), np.float32))], twice)
    assert calls == []
    np.testing.assert_array_equal(io.run([("x", np.ones((2, 4), np.float32))], twice)["y"], 2)   # still usable


def aligned_floats(n: int, offset_bytes: int = 0) -> np.ndarray:
    """n float32 at a 256-byte aligned address plus offset_bytes (a device tensor stand-in)."""
    raw = np.zeros(n * 4 + 512 + offset_bytes, np.uint8)
    start = -raw.ctypes.data % 256 + offset_bytes
    return raw[start:start + n * 4].view(np.float32)


def test_device_tensor_in_device_array_out(host_io):
    io, twice, calls = host_io
    x = aligned_floats(12).reshape(3, 4)
    x[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = dlpack.DLView(ptr=x.ctypes.data, device_type=dlpack.CUDA, device_id=0, dtype=DType.float32,
                         dtype_text="float32", shape=(3, 4), contiguous=True, keepalive=(None, object()))
    y = io.run([("x", view)], twice)["y"]
    assert isinstance(y, rcuda.DeviceArray) and y.shape == (3, 4)
    assert calls[0][0] == [x.ctypes.data]            # read in place: zero copy
    cai = y.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["data"] == (y.ptr, False)
    np.testing.assert_array_equal(y.numpy(), 2 * x)


def test_misaligned_device_tensor_is_staged_not_refused(host_io):
    """A view at an offset (x[1:] of a bigger tensor) is copied to an aligned staging buffer: the
    kernels were built for 256-byte bases and would refuse it at run time."""
    io, twice, calls = host_io
    x = aligned_floats(12, offset_bytes=4).reshape(3, 4)
    x[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = dlpack.DLView(ptr=x.ctypes.data, device_type=dlpack.CUDA, device_id=0, dtype=DType.float32,
                         dtype_text="float32", shape=(3, 4), contiguous=True, keepalive=(None, object()))
    y = io.run([("x", view)], twice)["y"]
    assert calls[0][0] != [x.ctypes.data]   # the library read the staging copy, not the view
    np.testing.assert_array_equal(y.numpy(), 2 * x)


# -- DLPack reading (host tensors here) ----------------------------------------------------------

def test_dlpack_view_of_numpy_and_torch():
    a = np.arange(24, dtype=np.int64).reshape(4, 6)
    v = dlpack.view(a, "a")
    assert (v.ptr, v.shape, v.dtype, v.contiguous, v.device) == (a.ctypes.data, (4, 6), DType.int64, True, "cpu:0")
    assert dlpack.view(a[:, 2:], "a").contiguous is False
    assert dlpack.view(a[:, 2:], "a").ptr == a.ctypes.data + 16
    assert dlpack.view(a[:1], "a").contiguous is True
    torch = pytest.importorskip("torch")
    t = torch.zeros(3, 5, dtype=torch.bfloat16)
    v = dlpack.view(t, "t")
    assert (v.ptr, v.shape, v.dtype) == (t.data_ptr(), (3, 5), DType.bfloat16)
    assert dlpack.view(t.t(), "t").contiguous is False


def test_cpu_model_reads_host_dlpack_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    x = ag.Tensor([ag.IntVar("b", 1, 8), 4], dtype="bfloat16", name="x")
    m = ag.compile_model({"y": ops.relu(x) * 2.0}, target="cpu", workdir=tmp_path / "m")
    t = torch.randn(3, 4).to(torch.bfloat16)
    a = t.float().numpy().astype(DType.bfloat16.np)
    np.testing.assert_array_equal(m.run({"x": t})["y"], m.run({"x": a})["y"])

    class OnGpu:   # a DLPack tensor that says it lives on a GPU
        def __dlpack_device__(self):
            return (dlpack.CUDA, 0)

        def __dlpack__(self, stream=None):
            raise AssertionError("must not be read")

    with pytest.raises(RuntimeInputError, match="input 'x' lives on DLPack device"):
        m.run({"x": OnGpu()})
    with pytest.raises(AitgenError, match="cuda_graph applies to CUDA models"):
        ag.Model.load(tmp_path / "m", cuda_graph=True)
    assert m._lib.ait_model_set_option(m._handle, b"cuda_graph", 1) == 1   # AIT_BAD_INPUT on the CPU
    assert b"no option 'cuda_graph'" in m._lib.ait_last_error()
