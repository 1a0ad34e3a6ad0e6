"""Model: a built library loaded through the C API (ctypes).

CPU models take and give numpy arrays (or host DLPack tensors, read as numpy). CUDA models
(runtime/cuda.py) also take DLPack tensors on their GPU, zero copy, and then give outputs in the
inputs' framework.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import dataclasses
import os
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..errors import AitgenError, ModelError, RuntimeInputError, RuntimeInputTypeError, WorkdirError
from ..ir.dtype import DType
from . import artifacts, dlpack, kernel_report
from .artifacts import GPU_TARGETS
from .lock import workdir_lock

MAX_RANK = 8
# Each runtime holds its own activation arena; beyond this a count is a mistake (2**32 + 1 once
# wrapped to 1 in the C int).
MAX_RUNTIMES = 1024
MAX_THREADS = 4096  # the CPU runtime's bound (backends/cpu/src/cpu_runtime.cpp)
MAX_ITERS = 10**9
# Index = the C API's AitDType code (runtime.h, codegen/cexpr.py CODE).
_DTYPES = [DType.float32, DType.float16, DType.bfloat16, DType.int8, DType.int32, DType.int64, DType.bool,
           DType.float64, DType.int16, DType.uint8, DType.uint16, DType.uint32, DType.uint64,
           DType.float8_e4m3fn, DType.float8_e5m2, DType.float8_e4m3fnuz, DType.float8_e5m2fnuz,
           DType.int4, DType.uint4, DType.int2, DType.uint2, DType.float4_e2m1fn,
           DType.float8_e8m0fnu]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: DType
    max_shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.max_shape)


def _bind(lib: ctypes.CDLL) -> None:
    P, I, I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.ait_model_create.argtypes = [ctypes.c_char_p, I, ctypes.POINTER(P)]
    lib.ait_model_destroy.argtypes = [P]
    lib.ait_model_destroy.restype = None
    for f in ("ait_model_num_inputs", "ait_model_num_outputs", "ait_model_num_constants"):
        getattr(lib, f).argtypes = [P]
    for f in ("ait_model_input_info", "ait_model_output_info"):
        getattr(lib, f).argtypes = [P, I, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(I),
                                    ctypes.POINTER(I), ctypes.POINTER(I64)]
    lib.ait_model_constant_info.argtypes = [P, I, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(I),
                                            ctypes.POINTER(I64)]
    lib.ait_model_run.argtypes = [P, ctypes.POINTER(P), ctypes.POINTER(ctypes.POINTER(I64)), ctypes.POINTER(P),
                                  ctypes.POINTER(I64)]
    lib.ait_model_run_on_stream.argtypes = lib.ait_model_run.argtypes + [P]
    lib.ait_model_set_constants.argtypes = [P, I, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(P),
                                            ctypes.POINTER(I64)]
    lib.ait_model_set_option.argtypes = [P, ctypes.c_char_p, I64]
    lib.ait_model_output_shapes.argtypes = [P, ctypes.POINTER(ctypes.POINTER(I64)), ctypes.POINTER(I64)]
    lib.ait_last_error.restype = ctypes.c_char_p


class Model:
    """A compiled model. `run` takes and returns dicts name -> array; wrong input raises
    RuntimeInputError and leaves the model usable. Thread-safe; `num_runtimes` calls run at once.

    CUDA models: `device` is the GPU to run on; `cuda_graph` (default: the compile option) replays
    the run sequence as CUDA graphs, one per set of bound dims. ROCm models likewise, through
    hip-python and HIP graphs (runtime/rocm.py). Where no GPU, driver or binding answers, loading
    raises aitgen.errors.DeviceError saying why.

    CPU models: `num_threads` (default None: OpenMP's own, OMP_NUM_THREADS or every core) is the
    OpenMP threads each run uses; set_num_threads changes it later. Where other processes keep
    some cores busy, a run as wide as the machine can be many times slower than one that leaves
    those cores alone (benchmarks/cpu_contention.py; README, "CPU threads")."""

    def __init__(self, workdir: Union[str, Path], num_runtimes: int = 1, *, cuda_graph: Optional[bool] = None,
                 device: int = 0, mock_device: bool = False, num_threads: Optional[int] = None):
        self._handle, self._io, self._impls, self._mock, self._mock_run = None, None, None, None, None
        self.num_threads: Optional[int] = None  # set_num_threads; None: OpenMP's default
        self._hip = None   # ROCm: the HIP runtime facade (runtime/rocm.py) prepare_device checked
        if not isinstance(mock_device, bool):
            raise RuntimeInputTypeError(f"mock_device must be True or False, got {type(mock_device).__name__}")
        num_runtimes = _count(num_runtimes, "num_runtimes", 1, MAX_RUNTIMES)
        device = _count(device, "device", 0, 1 << 16)
        if cuda_graph is not None and not isinstance(cuda_graph, bool):
            raise RuntimeInputTypeError(f"cuda_graph must be True, False or None, got {type(cuda_graph).__name__}")
        if num_threads is not None:
            num_threads = _count(num_threads, "num_threads", 1, MAX_THREADS)
        self.workdir = artifacts.resolve_workdir(workdir)
        with contextlib.ExitStack() as held:
            # Shared: a build into this workdir (exclusive) neither starts nor is half-seen until
            # the library has read its weights.
            try:
                held.enter_context(workdir_lock(self.workdir, exclusive=False))
            except WorkdirError as e:   # a lock file that is a link or a folder; a build that never ends
                raise ModelError(str(e)) from None
            art = artifacts.read_artifacts(self.workdir)
            self.meta = art.meta
            self.target = self.meta["target"]
            library = art.library
            if mock_device:
                from .mock import MockDevice
                runtime, library, self._mock_nodes = artifacts.mock_files(art)
                self._mock_ops = [str(o) for o in self.meta["mock"].get("ops", [])]
                self._mock = MockDevice.get(runtime)
                self._mock.configure(self.meta.get("arch"))
            elif self.target == "cuda":
                from .cuda import prepare_device
                prepare_device(self.meta, device, lambda cc: art.device_archs.get(f"{cc[0]}.{cc[1]}"))
            elif self.target == "rocm":
                from .rocm import prepare_device as prepare_rocm
                self._hip = prepare_rocm(self.meta, device, art.device_archs.get)
            try:
                self._lib = (self._mock.load_library(library) if self._mock is not None
                             else ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL))
                _bind(self._lib)
            except (OSError, AttributeError) as e:
                raise ModelError(f"cannot load {library}: {e}") from None
            handle = ctypes.c_void_p()
            self._check(self._lib.ait_model_create(os.fsencode(self.workdir), num_runtimes, ctypes.byref(handle)))
            self._handle = handle
        try:
            self._finish_load(art, cuda_graph, device)
            if num_threads is not None:
                self.set_num_threads(num_threads)
        except BaseException:
            self.close()
            raise

    def _finish_load(self, art: artifacts.Artifacts, cuda_graph: Optional[bool], device: int) -> None:
        handle = self._handle
        self.input_specs = self._specs(self._lib.ait_model_input_info, self._lib.ait_model_num_inputs(handle))
        self.output_specs = self._specs(self._lib.ait_model_output_info, self._lib.ait_model_num_outputs(handle))
        table = {}
        for i in range(self._lib.ait_model_num_constants(handle)):
            name, dt, nb = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int64()
            self._check(self._lib.ait_model_constant_info(handle, i, ctypes.byref(name), ctypes.byref(dt), ctypes.byref(nb)))
            table[self._text(name.value)] = (self._dtype(dt.value), nb.value)
        artifacts.check_library_tables(art, {n: (s.dtype, s.max_shape) for n, s in self.input_specs.items()},
                                       {n: (s.dtype, s.max_shape) for n, s in self.output_specs.items()}, table)
        self._constants = art.constants
        self._min_shape = {n: t.min_shape for n, t in art.inputs.items()}
        self._dim_names = {n: t.dims for n, t in art.inputs.items()}
        self._impls = kernel_report.ImplWatch(self._lib, art.kernel_ops)
        if self.target in GPU_TARGETS:
            if self.target == "rocm" and self._mock is None:
                from .rocm import RocmIO
                self._io = RocmIO(self.input_specs, self.output_specs, device, self._hip)
            else:
                from .cuda import CudaIO
                self._io = CudaIO(self.input_specs, self.output_specs, device,
                                  self._mock.cudart if self._mock is not None else None)
            use_graph = self.meta.get("cuda_graph", False) if cuda_graph is None else cuda_graph
            self._check(self._lib.ait_model_set_option(handle, b"cuda_graph", int(bool(use_graph))))
        elif cuda_graph:
            raise AitgenError(f"cuda_graph applies to CUDA models (and ROCm ones, as HIP graphs); {self.workdir} "
                              f"was built for {self.target}")

    def set_num_threads(self, n: Optional[int]) -> None:
        """The OpenMP threads each later run of this CPU model uses (1..MAX_THREADS), or None for
        OpenMP's default. Waits for runs in progress; runs started after it use the new count."""
        if self._handle is None:
            raise ModelError("the model is closed")
        if self.target != "cpu" or self._mock is not None:
            raise AitgenError(f"num_threads applies to CPU models; {self.workdir} was built for {self.target}")
        value = 0 if n is None else _count(n, "num_threads", 1, MAX_THREADS)
        self._check(self._lib.ait_model_set_option(self._handle, b"num_threads", value))
        self.num_threads = n

    @classmethod
    def load(cls, workdir: Union[str, Path], num_runtimes: int = 1, **kw) -> "Model":
        """Load a build directory; keyword arguments as for Model (cuda_graph, device, num_threads).
        `num_runtimes` (1..MAX_RUNTIMES) calls of `run` proceed at once. Every artefact is checked
        first (aitgen/runtime/artifacts.py); a bad one is a ModelError naming the file."""
        return cls(workdir, num_runtimes, **kw)

    # -- info -------------------------------------------------------------------------------
    def _specs(self, fn, n: int) -> dict[str, TensorSpec]:
        out = {}
        for i in range(n):
            name, dt, rank = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
            shape = (ctypes.c_int64 * MAX_RANK)()
            self._check(fn(self._handle, i, ctypes.byref(name), ctypes.byref(dt), ctypes.byref(rank), shape))
            if not 0 <= rank.value <= MAX_RANK:
                raise ModelError(f"the library reports rank {rank.value} for a tensor; the workdir is damaged")
            text = self._text(name.value)
            out[text] = TensorSpec(text, self._dtype(dt.value), tuple(shape[:rank.value]))
        return out

    @staticmethod
    def _text(raw: Optional[bytes]) -> str:
        try:
            return (raw or b"").decode()
        except UnicodeDecodeError:
            raise ModelError("the library reports a name that is not UTF-8; the workdir is damaged") from None

    @staticmethod
    def _dtype(code: int) -> DType:
        if not 0 <= code < len(_DTYPES):
            raise ModelError(f"the library reports dtype code {code}; the workdir is damaged")
        return _DTYPES[code]

    def _check(self, status: int) -> None:
        if status == 0:
            return
        msg = (self._lib.ait_last_error() or b"").decode(errors="replace")
        raise (RuntimeInputError if status == 1 else ModelError)(msg)

    # -- running ----------------------------------------------------------------------------
    # Every check on an input reads only its type, dtype and shape, so a bad call costs nothing
    # however large the array claims to be (a broadcast view); data is copied only once it passed.
    def _prepare(self, inputs: Mapping[str, object]) -> list[tuple[str, object]]:
        """(name, numpy array or CUDA DLView) per input, in the model's order, checked."""
        if not isinstance(inputs, Mapping):
            raise RuntimeInputTypeError(f"inputs must be a dict input name -> array, got {type(inputs).__name__}")
        for k in inputs:
            if not isinstance(k, str):
                raise RuntimeInputTypeError(f"input names are strings, got a key of type {type(k).__name__}")
        unknown = [k for k in inputs if k not in self.input_specs]
        if unknown:
            raise RuntimeInputError(f"unknown input '{unknown[0]}'; the inputs are {list(self.input_specs)}")
        missing = [k for k in self.input_specs if k not in inputs]
        if missing:
            raise RuntimeInputError(f"missing input '{missing[0]}'")
        feeds = []
        for name, spec in self.input_specs.items():
            a = inputs[name]
            if not isinstance(a, np.ndarray) and dlpack.is_dlpack(a):
                view = self._io.device_view(name, a) if self._io is not None else None
                if view is not None:
                    feeds.append((name, self._check_view(name, spec, view)))
                    continue
                a = self._host_array(name, spec, a)
            if not isinstance(a, np.ndarray):
                raise RuntimeInputTypeError(f"input '{name}': expected a numpy array or a DLPack tensor, got "
                                            f"{type(a).__name__}")
            self._check_meta(name, spec, a.dtype, a.shape)
            # Aligned too: a view at an odd byte offset is contiguous but not fit for the kernels.
            feeds.append((name, np.require(a, requirements=("C", "A"))))
        return feeds

    def _check_meta(self, name: str, spec: TensorSpec, dtype, shape: tuple) -> None:
        if dtype != spec.dtype.np:
            hint = " (byte order differs: use .astype(native))" if getattr(dtype, "byteorder", "=") not in "=|" else ""
            raise RuntimeInputError(f"input '{name}': dtype {dtype}{hint}, expected {spec.dtype}")
        if len(shape) != spec.rank:
            raise RuntimeInputError(f"input '{name}': rank {len(shape)} (shape {list(shape)}), expected rank "
                                    f"{spec.rank}")
        for axis, (n, lo, hi) in enumerate(zip(shape, self._min_shape[name], spec.max_shape)):
            if not lo <= n <= hi:
                want = f"expected {hi}" if lo == hi else f"outside its bounds [{lo}, {hi}]"
                dim = self._dim_names[name][axis] if lo != hi else ""
                raise RuntimeInputError(f"input '{name}': dim {axis}{f' ({dim!r})' if dim else ''} is {n}, {want}")

    def _host_array(self, name: str, spec: TensorSpec, a) -> np.ndarray:
        dev_type, dev_id = dlpack.device_of(a, name)
        if dev_type != dlpack.CPU:
            raise RuntimeInputError(f"input '{name}' lives on DLPack device ({dev_type}, {dev_id}); this model runs "
                                    "on the CPU and reads host memory")
        try:
            return np.from_dlpack(a)   # a view: checked by the caller before any copy
        except Exception:  # noqa: BLE001 - a dtype numpy's DLPack import lacks (bfloat16): read it ourselves
            v = dlpack.view(a, name)
            if v.dtype is None or not v.contiguous:
                raise RuntimeInputError(f"input '{name}': a host tensor of {v.dtype_text} that numpy cannot read "
                                        "(pass a contiguous tensor of a supported dtype)") from None
            self._check_meta(name, spec, v.dtype.np, v.shape)
            raw = (ctypes.c_char * v.nbytes).from_address(v.ptr)
            return np.frombuffer(raw, dtype=v.dtype.np).reshape(v.shape).copy()

    def _check_view(self, name: str, spec: TensorSpec, v) -> object:
        if v.dtype is DType.bool and spec.dtype is DType.uint8 and v.dtype_text == "uint8":
            v = dataclasses.replace(v, dtype=DType.uint8)  # DLPack's uint8 reads as a mask unless uint8 is expected
        if v.dtype is not spec.dtype:
            raise RuntimeInputError(f"input '{name}': dtype {v.dtype or v.dtype_text}, expected {spec.dtype}")
        self._check_meta(name, spec, spec.dtype.np, v.shape)
        if not v.contiguous:
            raise RuntimeInputError(f"input '{name}': a strided (non-contiguous) tensor; pass a contiguous one "
                                    "(e.g. .contiguous())")
        return v

    def _c_shapes(self, in_shapes: list[tuple]):
        n_in = max(len(in_shapes), 1)
        shapes = [(ctypes.c_int64 * MAX_RANK)(*s) for s in in_shapes]
        return (ctypes.POINTER(ctypes.c_int64) * n_in)(*shapes), shapes  # the rows must outlive the call

    @property
    def min_shapes(self) -> dict[str, tuple[int, ...]]:
        """The smallest shape each input may have (lower bounds of its dynamic dims)."""
        return dict(self._min_shape)

    def kernel_report(self) -> dict:
        """The oneDNN implementation of every GEMM/conv primitive this model's library has created in
        this process (runtime/kernel_report.py): {"onednn_impls": {kernel: implementation},
        "reference_kernels": [...], "onednn_primitives": [...]}, the records naming the ops. Primitives
        are created at a kernel's first run with each shape, so this covers the shapes run so far
        (compile_model runs the smallest ones once and writes the result to report.json). Empty
        lists for a library without oneDNN kernels (CUDA)."""
        if self._handle is None:
            raise ModelError("the model is closed")
        return kernel_report.summary(self._impls.records())

    def _unpack_shapes(self, out_shapes) -> list[tuple[int, ...]]:
        return [tuple(out_shapes[j * MAX_RANK + k] for k in range(spec.rank))
                for j, spec in enumerate(self.output_specs.values())]

    def output_shapes(self, in_shapes: list[tuple]) -> list[tuple[int, ...]]:
        """The output shapes a run on inputs of these shapes (in input_specs order) gives; the same
        checks as run, and nothing runs. A size that values set during the run (ops/dynamic.py)
        is given at its upper bound: the most a run may return."""
        shape_ptrs, _rows = self._c_shapes(in_shapes)
        out_shapes = (ctypes.c_int64 * (MAX_RANK * max(len(self.output_specs), 1)))()
        self._check(self._lib.ait_model_output_shapes(self._handle, shape_ptrs, out_shapes))
        return self._unpack_shapes(out_shapes)

    def _call(self, in_ptrs: list[int], in_shapes: list[tuple], out_ptrs: list[int],
              stream: int = 0) -> list[tuple[int, ...]]:
        """ait_model_run_on_stream on raw pointers; the actual output shapes."""
        n_in, n_out = len(in_ptrs), len(self.output_specs)
        c_in = (ctypes.c_void_p * max(n_in, 1))(*in_ptrs)
        shape_ptrs, _rows = self._c_shapes(in_shapes)
        c_out = (ctypes.c_void_p * max(n_out, 1))(*out_ptrs)
        out_shapes = (ctypes.c_int64 * (MAX_RANK * max(n_out, 1)))()
        self._check(self._lib.ait_model_run_on_stream(self._handle, c_in, shape_ptrs, c_out, out_shapes,
                                                      ctypes.c_void_p(stream or None)))
        return self._unpack_shapes(out_shapes)

    def run(self, inputs: Mapping[str, object], stream=None) -> dict[str, object]:
        """Run once. CUDA models start after the work queued so far on `stream` (a
        torch.cuda.Stream, a cupy Stream or a raw cudaStream_t handle as an int; default: torch's
        current stream when an input is a torch tensor, cupy's for cupy, else the legacy default
        stream alone), and return when the run is complete."""
        if self._handle is None:
            raise ModelError("the model is closed")
        handle = _stream_handle(stream)
        if handle and self._io is None:
            raise RuntimeInputTypeError("stream applies to CUDA models; this one runs on the CPU")
        feeds = self._prepare(inputs)
        if self._mock is not None:
            return self._mock_call(feeds, handle)
        if self._io is not None:
            return self._io.run(feeds, self._call, handle)
        arrays = [a for _, a in feeds]
        # Outputs of their exact size, not of the bounds': a dim bounded by 2**40 must not cost
        # terabytes on a run with batch 2.
        shapes = self.output_shapes([a.shape for a in arrays])
        outs = []
        for (name, spec), shape in zip(self.output_specs.items(), shapes):
            try:
                outs.append(np.empty(shape, spec.dtype.np))
            except (MemoryError, ValueError) as e:
                raise ModelError(f"output '{name}' of shape {list(shape)} does not fit in memory: {e}") from None
        got = self._call([a.ctypes.data for a in arrays], [a.shape for a in arrays],
                         [o.ctypes.data for o in outs])
        self._impls.poll()  # a primitive created by this run that is oneDNN's reference kernel: a warning
        if got != shapes:  # the run writes the shapes it computed: they must be the ones allocated
            # ... unless sizes are bound during the run: the shapes asked before it are the planned
            # upper bounds, and each kernel wrote its output in the actual shape, from the start.
            if not (self.meta.get("data_dependent") and all(
                    len(g) == len(s) and all(0 <= a <= b for a, b in zip(g, s)) for g, s in zip(got, shapes))):
                raise ModelError(f"the library gave output shapes {got} after promising {shapes}")
            outs = [o.reshape(-1)[:math.prod(g)].reshape(g).copy() if g != s else o
                    for o, g, s in zip(outs, got, shapes)]
        return dict(zip(self.output_specs, outs))

    def _mock_call(self, feeds, stream: Optional[int]) -> dict[str, object]:
        """A run on the mock device: the library's host side runs, the launches are checked."""
        from .mock import RUN_LOCK, raise_failures
        with RUN_LOCK:
            self._mock.begin(self._mock_nodes)
            try:
                out = self._io.run(feeds, self._call, stream)
            except AitgenError as e:
                # The library refused (a kernel's own check): the mock's finding comes first when it has one.
                self._mock_run = self._mock.collect(self._mock_ops)
                raise_failures(self._mock_run, self._mock_ops, cause=e)
                raise
            self._mock_run = self._mock.collect(self._mock_ops)
        raise_failures(self._mock_run, self._mock_ops)
        return out

    def launch_log(self) -> list:
        """The kernel launches of the last run on the mock device (aitgen.runtime.mock.Launch), each
        with the checks it failed; `mock_run()` adds the run's failures and alignment census."""
        return list(self.mock_run().launches)

    def mock_run(self):
        """The last run on the mock device: aitgen.runtime.mock.MockRun."""
        if self._mock is None:
            raise AitgenError("launch records exist for models loaded with mock_device=True")
        if self._mock_run is None:
            raise AitgenError("no run on the mock device yet: call run() first")
        return self._mock_run

    def benchmark(self, inputs: Mapping[str, np.ndarray], iters: int = 50, warmup: int = 5) -> dict[str, float]:
        """Latency of `run` in milliseconds over `iters` timed calls, after `warmup` untimed ones:
        median_ms, p90_ms, p99_ms (linear interpolation between the closest runs), min_ms, max_ms,
        mean_ms, stdev_ms (sample standard deviation; 0 for one run), and iters. The spread tells
        a steady model from one with a few slow runs, which pull the mean far above the median."""
        iters = _count(iters, "iters", 1, MAX_ITERS)
        warmup = _count(warmup, "warmup", 0, MAX_ITERS)
        for _ in range(warmup):
            self.run(inputs)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.run(inputs)
            times.append((time.perf_counter() - t0) * 1e3)
        p90, p99 = (float(v) for v in np.percentile(times, [90, 99]))
        return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "min_ms": min(times),
                "iters": iters, "p90_ms": p90, "p99_ms": p99, "max_ms": max(times),
                "stdev_ms": statistics.stdev(times) if iters > 1 else 0.0}

    def set_constants(self, values: Mapping[str, np.ndarray]) -> None:
        """Replace constants by name (names as in report/graph after name_graph), each an array of
        the constant's dtype and shape. All at once: a run sees every old or every new value, and
        when any entry is bad (RuntimeInputError naming it) nothing changes."""
        if not isinstance(values, Mapping):
            raise RuntimeInputTypeError(f"set_constants takes a dict constant name -> array, got "
                                        f"{type(values).__name__}")
        if self._handle is None:
            raise ModelError("the model is closed")
        names, arrays = [], []
        for name, v in values.items():
            if not isinstance(name, str):
                raise RuntimeInputTypeError(f"constant names are strings, got a key of type {type(name).__name__}")
            c = self._constants.get(name)
            if c is None:
                raise RuntimeInputError(f"no constant named '{name}' (folded away, or a typo); "
                                        f"known: {sorted(self._constants)[:8]}...")
            if not isinstance(v, np.ndarray):
                raise RuntimeInputTypeError(f"constant '{name}': expected a numpy array, got {type(v).__name__}")
            if v.dtype != c.dtype.np or v.shape != c.shape:
                raise RuntimeInputError(f"constant '{name}': got {v.dtype} of shape {list(v.shape)}, expected "
                                        f"{c.dtype} of shape {list(c.shape)}")
            names.append(name.encode())
            arrays.append(np.require(v, requirements=("C", "A")))
        if not names:
            return
        n = len(names)
        self._check(self._lib.ait_model_set_constants(
            self._handle, n, (ctypes.c_char_p * n)(*names), (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays]),
            (ctypes.c_int64 * n)(*[a.nbytes for a in arrays])))

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self._lib.ait_model_destroy(self._handle)
            self._handle = None
        if getattr(self, "_io", None) is not None:
            self._io.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _stream_handle(stream) -> Optional[int]:
    """The cudaStream_t of Model.run's `stream` argument (None: the default of the inputs' framework)."""
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):   # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)) or not 0 <= int(stream) < 1 << 64:
        raise RuntimeInputTypeError(f"stream must be a torch/cupy CUDA stream or a cudaStream_t handle (int), got "
                                    f"{type(stream).__name__}")
    return int(stream)


def _count(value, what: str, lo: int, hi: int) -> int:
    """An int argument in [lo, hi]: bool and other types are RuntimeInputTypeError (a C int would
    otherwise take them, or wrap a large one)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise RuntimeInputTypeError(f"{what} must be an int, got {type(value).__name__}")
    if not lo <= int(value) <= hi:
        raise RuntimeInputError(f"{what} must be in [{lo}, {hi}], got {int(value)}")
    return int(value)
