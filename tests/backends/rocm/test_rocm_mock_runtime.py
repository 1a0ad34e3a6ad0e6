"""The mock device's ROCm half, below a whole model build: the mock runtime (backends/gpu/mock/,
compiled with -DAITMOCK_HIP) stands in for libamdhip64 under objects that hipcc built, and
runtime/hsaco.py reads each kernel's parameters and limits from the library's code objects.

A small HIP source with three kernels (a launch bound, static LDS, 1-, 4- and 8-byte parameters) is
compiled for gfx90a and gfx940 (a few seconds); its host functions launch the kernels through
hipcc's own stubs (__hipPushCallConfiguration, hipLaunchKernel), and the mock's launch log is read
back: the launch configuration, the device pointers found among the arguments, and the checks that
must fail (a block beyond the kernel's launch bound, a pointer past its allocation, an unregistered
kernel's parameters unknown)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from aitgen.codegen import mock_build
from aitgen.codegen.build import Source, build
from aitgen.runtime import hsaco
from aitgen.runtime.mock import MockDevice

pytestmark = pytest.mark.skipif(shutil.which("hipcc") is None,
                                reason="hipcc absent (apt-get install hipcc libamdhip64-dev)")

KERNELS = r"""
#include <hip/hip_runtime.h>
__global__ void __launch_bounds__(128) scale(float* x, int n, double s) {
  __shared__ float tile[64];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x % 64] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) x[i] = tile[(threadIdx.x + 1) % 64] * static_cast<float>(s);
}
__global__ void copy_bytes(const char* src, char* dst, char pad, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = src[i] + pad;
}
extern "C" int run_scale(float* x, int n, int block) {
  scale<<<(n + block - 1) / block, block, 0, nullptr>>>(x, n, 2.0);
  return hipGetLastError();
}
extern "C" int run_copy(const char* src, char* dst, long n) {
  copy_bytes<<<(n + 255) / 256, 256>>>(src, dst, 1, n);
  return hipGetLastError();
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("hipmock")
    src = work / "k.hip"
    src.write_text(KERNELS)
    env = dict(os.environ, HIP_PLATFORM="amd")
    obj = work / "k.o"
    subprocess.run(["hipcc", "-std=c++17", "-O2", "-fPIC", "--offload-arch=gfx90a", "--offload-arch=gfx940",
                    "-c", str(src), "-o", str(obj)], check=True, capture_output=True, env=env)
    cxx, flags, rt_link, _ = mock_build._toolchain("rocm", "hipcc")
    runtime = work / mock_build.RUNTIMES["rocm"]
    sources = [Source(Path(rel).name, (Path(mock_build.backends_dir()) / rel).read_text())
               for rel in mock_build.SOURCES]
    build(sources, runtime, compiler=cxx, flags=flags, link_flags=rt_link + [f"-Wl,-soname,{runtime.name}"],
          workdir=work / "obj_mock", progress=False)
    lib = work / "kmock.so"
    subprocess.run([cxx, "-shared", str(obj), "-o", str(lib), str(runtime)], check=True, capture_output=True)
    real = work / "kreal.so"   # linked as a real build is: against libamdhip64
    subprocess.run(["hipcc", "-shared", str(obj), "-o", str(real)], check=True, capture_output=True, env=env)
    return work, runtime, lib, real


def test_code_object_metadata(built):
    _, _, _, real = built
    for arch in ("gfx90a", "gfx940"):
        ks, compressed = hsaco.library_kernels(real, arch)
        assert compressed == 0
        by = {k.name: k for k in ks.values()}
        scale = by["_Z5scalePfid"]
        assert [s for _, s in scale.params] == [8, 4, 8]
        assert scale.max_threads == 128 and scale.static_smem == 64 * 4
        cp = by["_Z10copy_bytesPKcPccl"]
        assert [s for _, s in cp.params] == [8, 8, 1, 8]
        assert cp.params[3][0] % 8 == 0   # the long after the char is 8-aligned in the kernarg segment
    assert hsaco.library_kernels(real, "gfx1100")[0] == {}
    with pytest.raises(hsaco.CodeObjectError):
        hsaco.kernels_of_code_object(b"\x7fELF" + b"\x02\x01" + b"\0" * 58)


def test_launches_checked(built):
    # Through the process's mock device of this kind (one per process, as a model load does): a
    # library needing libaitgen_mock_hiprt.so binds to the one already loaded, if a test before
    # this one loaded a ROCm model's.
    _, runtime, lib, _ = built
    dev = MockDevice.get(runtime)
    dev.configure("gfx90a")
    rt = dev.lib
    m = dev.load_library(lib)   # registers the kernels of its gfx90a code object, then loads it
    x, y = ctypes.c_void_p(), ctypes.c_void_p()
    assert rt.hipMalloc(ctypes.byref(x), ctypes.c_size_t(4096)) == 0
    assert rt.hipMalloc(ctypes.byref(y), ctypes.c_size_t(4096)) == 0
    m.run_scale.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    m.run_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]

    rt.aitmock_begin()
    assert m.run_scale(x, 1024, 128) == 0 and m.run_copy(x, y, 4096) == 0
    assert rt.aitmock_launch_count() == 2 and rt.aitmock_failure_count() == 0
    fields = rt.aitmock_launch(0).decode().split("\t")
    assert fields[2:4] == ["8,1,1", "128,1,1"] and "scale(float*, int, double)" in fields
    ptrs = rt.aitmock_launch(1).decode()
    assert hex(x.value) in ptrs and hex(y.value) in ptrs

    rt.aitmock_begin()
    assert m.run_scale(x, 1024, 256) != 0   # 256 threads into a kernel bounded at 128
    assert m.run_copy(x, ctypes.c_void_p(y.value + 8192), 16) != 0   # past y's 4096 bytes
    failures = [rt.aitmock_failure(i).decode() for i in range(rt.aitmock_failure_count())]
    assert len(failures) == 2, failures
    assert "128" in failures[0] and "256" in failures[0]
    assert "allocation" in failures[1]
