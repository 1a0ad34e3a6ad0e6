"""The mock device: a GPU build's host side (CUDA or ROCm), run with no GPU.

`Model.load(dir, mock_device=True)` (and `aitgen run DIR --mock-device`) loads the build's mock
variant (`mock_<digest>.so`, the same objects linked against `libaitgen_mock_cudart.so`, or
`libaitgen_mock_hiprt.so` for a ROCm build, see aitgen/codegen/mock_build.py and
backends/gpu/mock/). Everything of the library runs: the
container, constant upload, arena, dim binding, each kernel's host function with its dispatch,
CUTLASS's `can_implement` and workspace sizing, TMA descriptor encoding, graph capture; the kernels
themselves are recorded, not executed, so outputs hold no results. Each launch is checked: its
pointer arguments lie in live allocations, each node's operands meet the alignment their kernel
declares, the launch fits the arch's limits, nothing allocates or synchronises during a capture,
and with several streams every read is ordered after the write it reads. A run that breaks a check
raises MockDeviceError naming the first failing launch; `Model.launch_log()` gives the records.

One mock device per process and runtime (as one GPU of each kind): the first mock runtime of a kind
loaded serves every mock model of that kind. Kernel parameter layouts come from the device code:
cubin.py reads a CUDA build's, hsaco.py a ROCm build's.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import threading
from pathlib import Path
from typing import Optional

from ..errors import DeviceError, MockDeviceError
from . import cubin, hsaco
from .artifacts import MOCK_RUNTIMES

# The simulated GPU per arch: (cc major, cc minor, SMs, shared memory per block opt-in, per SM).
# AMD: compute units and LDS (64 KiB per work-group and per CU on CDNA2/3); MI250X's GCD (gfx90a)
# and MI300X (gfx940 code runs there); HIP reports CDNA's "compute capability" as 9.0 / 9.4.
ARCH_DEVICE = {"sm_80": (8, 0, 108, 166912, 167936), "sm_90a": (9, 0, 132, 232448, 233472),
               "gfx90a": (9, 0, 110, 65536, 65536), "gfx940": (9, 4, 304, 65536, 65536)}
RUN_LOCK = threading.Lock()  # one run at a time on the mock device: its log is global


@dataclasses.dataclass(frozen=True)
class Launch:
    index: int
    kernel: str          # demangled device function name
    node: int            # the run sequence's call that issued it (-1: none)
    op: str              # the op of that call
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    shared_bytes: int
    stream: int          # 1: the legacy default stream; 2 and up: created streams
    from_graph: bool     # replayed from a captured CUDA graph
    pointers: tuple[int, ...]  # device addresses among its arguments
    failure: str         # "" when every check passed


@dataclasses.dataclass
class MockRun:
    launches: list[Launch]
    failures: list[str]
    operands: int = 0    # node operands checked for alignment
    unpacked: int = 0    # of those, pointers that missed the alignment their kernel prefers
    stale_words: int = 0  # argument words into memory freed before this model loaded (unwritten fields)

    def summary(self) -> str:
        if not self.failures:
            stale = (f" ({self.stale_words} argument words held an earlier model's freed pointers: unwritten "
                     "fields)") if self.stale_words else ""
            return f"mock run: {len(self.launches)} launches, all checks passed{stale}"
        return f"mock run: {len(self.launches)} launches, {len(self.failures)} failed checks; first: {self.failures[0]}"


class _Shim:
    """The few cuda-python runtime calls runtime/cuda.py makes (runtime/rocm.py's HipRuntime makes
    the same ones for a ROCm build), answered by the mock runtime: each returns (status, *values)
    as cuda.bindings.runtime does. `api` is the runtime's prefix: "cuda", or "hip" for the HIP mock,
    whose entry points have HIP's names (mock_api.h)."""

    class cudaMemcpyKind:
        cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice = 1, 2, 3

    def __init__(self, lib: ctypes.CDLL, api: str = "cuda"):
        self._lib, self._api = lib, api

    def _fn(self, name: str):
        return getattr(self._lib, self._api + name)

    def cudaMalloc(self, n: int):
        p = ctypes.c_void_p()
        return self._fn("Malloc")(ctypes.byref(p), ctypes.c_size_t(n)), p.value or 0

    def cudaFree(self, p: int):
        return (self._fn("Free")(ctypes.c_void_p(p)),)

    def cudaMemcpy(self, dst: int, src: int, n: int, kind):
        return (self._fn("Memcpy")(ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(n), int(kind)),)

    def cudaGetLastError(self):
        return (self._fn("GetLastError")(),)

    def cudaStreamCreateWithFlags(self, flags: int):
        s = ctypes.c_void_p()
        return self._fn("StreamCreateWithFlags")(ctypes.byref(s), ctypes.c_uint(flags)), s.value or 0

    def cudaMemsetAsync(self, p: int, value: int, n: int, stream: int):
        return (self._fn("MemsetAsync")(ctypes.c_void_p(p), value, ctypes.c_size_t(n), ctypes.c_void_p(stream)),)

    def cudaStreamSynchronize(self, stream: int):
        return (self._fn("StreamSynchronize")(ctypes.c_void_p(stream)),)

    def cudaSetDevice(self, d: int):
        return (self._fn("SetDevice")(d),)


class MockDevice:
    _instances: dict[str, "MockDevice"] = {}
    _guard = threading.Lock()

    def __init__(self, runtime: Path):
        self.path, self.digest = runtime, _sha256(runtime)
        self.hip = runtime.name == MOCK_RUNTIMES["rocm"]
        self.arch: Optional[str] = None
        self.lib = ctypes.CDLL(str(runtime), mode=ctypes.RTLD_LOCAL)
        L, I64 = self.lib, ctypes.c_longlong
        L.aitmock_configure.argtypes = [ctypes.c_int] * 3 + [I64, I64]
        L.aitmock_add_kernel.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(I64), ctypes.c_int, I64]
        L.aitmock_set_arch_name.argtypes = [ctypes.c_char_p]
        L.aitmock_set_nodes.argtypes = [ctypes.c_int, ctypes.POINTER(I64)]
        L.aitmock_fail_at.argtypes = [I64]
        L.aitmock_launch.argtypes = [I64]
        L.aitmock_launch.restype = ctypes.c_char_p
        L.aitmock_failure.argtypes = [ctypes.c_int]
        L.aitmock_failure.restype = ctypes.c_char_p
        L.aitmock_operands.argtypes = [ctypes.c_int]
        for f in ("aitmock_api_calls", "aitmock_launch_count", "aitmock_live_bytes", "aitmock_operands"):
            getattr(L, f).restype = I64
        self.cudart = _Shim(L, "hip" if self.hip else "cuda")
        self.libraries: set[str] = set()

    @classmethod
    def get(cls, runtime: Path) -> "MockDevice":
        """The process's mock device of `runtime`'s kind, loading it the first time. A library that
        needs the mock runtime binds to the loaded one by its soname, so a second, different
        runtime file of the same name could not be used: it is refused."""
        with cls._guard:
            have = cls._instances.get(runtime.name)
            if have is None:
                have = cls._instances[runtime.name] = MockDevice(runtime)
            elif have.digest != _sha256(runtime):
                raise DeviceError(f"{runtime} differs from the mock runtime this process loaded first "
                                  f"({have.path}): builds of two aitgen versions; use one per process")
            return have

    def configure(self, arch: Optional[str]) -> None:
        default = "gfx90a" if self.hip else "sm_80"
        self.arch = arch or default
        self.lib.aitmock_configure(*ARCH_DEVICE.get(self.arch, ARCH_DEVICE[default]))
        self.lib.aitmock_set_arch_name(self.arch.encode())

    def load_library(self, library: Path) -> ctypes.CDLL:
        """Register the kernels of `library` (their parameter layouts, from its device code), then
        load it. RTLD_DEEPBIND: its CUDA calls bind to the mock runtime, its own dependency, even
        in a process where a real libcudart is loaded globally."""
        if str(library) not in self.libraries:
            if self.hip:   # the code object of the arch configured (each holds the same kernels)
                kernels, compressed = hsaco.library_kernels(library, self.arch)
            else:
                kernels, compressed = cubin.library_kernels(library)
            if compressed:
                raise DeviceError(f"{library}: {compressed} device code blocks are compressed, so the mock cannot "
                                  "read their kernels' parameters; this aitgen builds without compression: rebuild")
            for k in kernels.values():
                sizes = (ctypes.c_longlong * max(len(k.params), 1))(*[s for _, s in k.params])
                self.lib.aitmock_add_kernel(k.name.encode(), len(k.params), sizes, k.max_threads, k.static_smem)
            self.libraries.add(str(library))
        self.lib.aitmock_model_loading()
        return ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL | os.RTLD_DEEPBIND)

    def begin(self, nodes: list) -> None:
        flat: list[int] = []
        for row in nodes:
            flat.append(len(row))
            for extent, align, write in row:
                flat += [extent, align, write]
        arr = (ctypes.c_longlong * max(len(flat), 1))(*flat)
        self.lib.aitmock_set_nodes(len(nodes), arr)
        self.lib.aitmock_begin()

    def fail_at(self, n: int) -> None:
        """Make the n-th counted CUDA call from now fail (-1: none): fault injection."""
        self.lib.aitmock_fail_at(n)

    def api_calls(self) -> int:
        return int(self.lib.aitmock_api_calls())

    def live_bytes(self) -> int:
        return int(self.lib.aitmock_live_bytes())

    def collect(self, ops: list[str]) -> MockRun:
        launches = []
        for i in range(int(self.lib.aitmock_launch_count())):
            raw = self.lib.aitmock_launch(i).decode(errors="replace").split("\t")
            idx, node, grid, block, cluster, smem, stream, graph, ptrs, kernel, failure = (raw + [""] * 11)[:11]
            n = int(node)
            launches.append(Launch(int(idx), kernel, n, ops[n] if 0 <= n < len(ops) else "", _dim3(grid),
                                   _dim3(block), _dim3(cluster), int(smem), int(stream), graph == "1",
                                   tuple(int(p, 16) for p in ptrs.split(",") if p), failure))
        failures = [self.lib.aitmock_failure(i).decode(errors="replace")
                    for i in range(self.lib.aitmock_failure_count())]
        return MockRun(launches, failures, int(self.lib.aitmock_operands(0)), int(self.lib.aitmock_operands(1)),
                       int(self.lib.aitmock_operands(2)))


def raise_failures(run: MockRun, ops: list[str], cause: Optional[BaseException] = None) -> None:
    """MockDeviceError naming the first failing launch (else the first failed check), if any."""
    if not run.failures:
        return
    first = run.failures[0]
    for launch in run.launches:  # name the op of the first failing launch, when there is one
        if launch.failure:
            first = f"launch #{launch.index} of op {launch.op!r} ({launch.kernel}): {launch.failure}"
            break
    also = f" (the library then failed: {cause})" if cause is not None else ""
    raise MockDeviceError(run.summary().split(";")[0] + f"; first: {first}{also}", run.failures,
                          run.launches) from cause


def _dim3(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.split(",") if x] + [1, 1, 1]
    return parts[0], parts[1], parts[2]


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
