"""Model: a built library loaded through the C API (ctypes).

CPU models take and give numpy arrays (or host DLPack tensors, read as numpy). CUDA models
(runtime/cuda.py) also take DLPack tensors on their GPU, zero copy, and then give outputs in the
inputs' framework.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from ..errors import AitgenError, ModelError, RuntimeInputError
from ..ir.dtype import DType
from . import dlpack

MAX_RANK = 8
_DTYPES = [DType.float32, DType.float16, DType.bfloat16, DType.int8, DType.int32, DType.int64, DType.bool]


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
    lib.ait_model_set_constant.argtypes = [P, ctypes.c_char_p, P, I64]
    lib.ait_model_set_option.argtypes = [P, ctypes.c_char_p, I64]
    lib.ait_last_error.restype = ctypes.c_char_p


class Model:
    """A compiled model. `run` takes and returns dicts name -> array; wrong input raises
    RuntimeInputError and leaves the model usable. Thread-safe; `num_runtimes` calls run at once.

    CUDA models: `device` is the GPU to run on; `cuda_graph` (default: the compile option) replays
    the run sequence as CUDA graphs, one per set of bound dims. Where no GPU or driver answers,
    loading raises aitgen.errors.DeviceError saying why."""

    def __init__(self, workdir: Union[str, Path], num_runtimes: int = 1, *, cuda_graph: Optional[bool] = None,
                 device: int = 0):
        self.workdir = Path(workdir)
        meta_path = self.workdir / "model.json"
        if not meta_path.exists():
            raise AitgenError(f"{self.workdir} holds no built model (no model.json)")
        self.meta = json.loads(meta_path.read_text())
        self.target = self.meta.get("target", "cpu")
        self._io = None
        if self.target == "cuda":
            from ..codegen.backend import load_backend
            from .cuda import prepare_device
            caps = dict(load_backend("cuda").capabilities)
            prepare_device(self.meta, device, lambda cc: caps.get(f"{cc[0]}.{cc[1]}"))
        self._lib = ctypes.CDLL(str(self.workdir / self.meta["library"]), mode=ctypes.RTLD_LOCAL)
        _bind(self._lib)
        handle = ctypes.c_void_p()
        self._check(self._lib.ait_model_create(str(self.workdir).encode(), int(num_runtimes), ctypes.byref(handle)))
        self._handle = handle
        self.input_specs = self._specs(self._lib.ait_model_input_info, self._lib.ait_model_num_inputs(handle))
        self.output_specs = self._specs(self._lib.ait_model_output_info, self._lib.ait_model_num_outputs(handle))
        self._constants = {}
        for i in range(self._lib.ait_model_num_constants(handle)):
            name, dt, nb = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int64()
            self._check(self._lib.ait_model_constant_info(handle, i, ctypes.byref(name), ctypes.byref(dt), ctypes.byref(nb)))
            self._constants[name.value.decode()] = (_DTYPES[dt.value], nb.value)
        if self.target == "cuda":
            from .cuda import CudaIO
            self._io = CudaIO(self.input_specs, self.output_specs, device)
            use_graph = self.meta.get("cuda_graph", False) if cuda_graph is None else cuda_graph
            self._check(self._lib.ait_model_set_option(handle, b"cuda_graph", int(bool(use_graph))))
        elif cuda_graph:
            raise AitgenError(f"cuda_graph applies to CUDA models; {self.workdir} was built for {self.target}")

    @classmethod
    def load(cls, workdir: Union[str, Path], num_runtimes: int = 1, **kw) -> "Model":
        """Load a build directory; keyword arguments as for Model (cuda_graph, device)."""
        return cls(workdir, num_runtimes, **kw)

    # -- info -------------------------------------------------------------------------------
    def _specs(self, fn, n: int) -> dict[str, TensorSpec]:
        out = {}
        for i in range(n):
            name, dt, rank = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
            shape = (ctypes.c_int64 * MAX_RANK)()
            self._check(fn(self._handle, i, ctypes.byref(name), ctypes.byref(dt), ctypes.byref(rank), shape))
            out[name.value.decode()] = TensorSpec(name.value.decode(), _DTYPES[dt.value], tuple(shape[:rank.value]))
        return out

    def _check(self, status: int) -> None:
        if status == 0:
            return
        msg = (self._lib.ait_last_error() or b"").decode(errors="replace")
        raise (RuntimeInputError if status == 1 else ModelError)(msg)

    # -- running ----------------------------------------------------------------------------
    def _prepare(self, inputs: Mapping[str, object]) -> list[tuple[str, object]]:
        """(name, numpy array or CUDA DLView) per input, in the model's order, checked."""
        unknown = [k for k in inputs if k not in self.input_specs]
        if unknown:
            raise RuntimeInputError(f"unknown input '{unknown[0]}'; the inputs are {list(self.input_specs)}")
        feeds = []
        for name, spec in self.input_specs.items():
            if name not in inputs:
                raise RuntimeInputError(f"missing input '{name}'")
            a = inputs[name]
            if not isinstance(a, np.ndarray) and dlpack.is_dlpack(a):
                view = self._io.device_view(name, a) if self._io is not None else None
                if view is not None:
                    feeds.append((name, self._check_view(name, spec, view)))
                    continue
                a = self._host_array(name, a)
            if not isinstance(a, np.ndarray):
                raise RuntimeInputError(f"input '{name}': expected a numpy array or a DLPack tensor, got "
                                        f"{type(a).__name__}")
            if a.dtype != spec.dtype.np:
                raise RuntimeInputError(f"input '{name}': dtype {a.dtype}, expected {spec.dtype}")
            if a.ndim != spec.rank:
                raise RuntimeInputError(f"input '{name}': rank {a.ndim} (shape {list(a.shape)}), expected rank {spec.rank}")
            feeds.append((name, np.ascontiguousarray(a)))
        return feeds

    @staticmethod
    def _host_array(name: str, a) -> np.ndarray:
        dev_type, dev_id = dlpack.device_of(a)
        if dev_type != dlpack.CPU:
            raise RuntimeInputError(f"input '{name}' lives on DLPack device ({dev_type}, {dev_id}); this model runs "
                                    "on the CPU and reads host memory")
        try:
            return np.from_dlpack(a)
        except Exception:  # noqa: BLE001 - a dtype numpy's DLPack import lacks (bfloat16): read it ourselves
            v = dlpack.view(a, name)
            if v.dtype is None or not v.contiguous:
                raise RuntimeInputError(f"input '{name}': a host tensor of {v.dtype_text} that numpy cannot read "
                                        "(pass a contiguous tensor of a supported dtype)") from None
            raw = (ctypes.c_char * v.nbytes).from_address(v.ptr)
            return np.frombuffer(raw, dtype=v.dtype.np).reshape(v.shape).copy()

    @staticmethod
    def _check_view(name: str, spec: TensorSpec, v) -> object:
        if v.dtype is not spec.dtype:
            raise RuntimeInputError(f"input '{name}': dtype {v.dtype or v.dtype_text}, expected {spec.dtype}")
        if len(v.shape) != spec.rank:
            raise RuntimeInputError(f"input '{name}': rank {len(v.shape)} (shape {list(v.shape)}), expected rank "
                                    f"{spec.rank}")
        if not v.contiguous:
            raise RuntimeInputError(f"input '{name}': a strided (non-contiguous) tensor; pass a contiguous one "
                                    "(e.g. .contiguous())")
        return v

    def _call(self, in_ptrs: list[int], in_shapes: list[tuple], out_ptrs: list[int]) -> list[tuple[int, ...]]:
        """ait_model_run on raw pointers; the actual output shapes."""
        n_in, n_out = len(in_ptrs), len(self.output_specs)
        c_in = (ctypes.c_void_p * max(n_in, 1))(*in_ptrs)
        shapes = [(ctypes.c_int64 * MAX_RANK)(*s) for s in in_shapes]
        shape_ptrs = (ctypes.POINTER(ctypes.c_int64) * max(n_in, 1))(*shapes)
        c_out = (ctypes.c_void_p * max(n_out, 1))(*out_ptrs)
        out_shapes = (ctypes.c_int64 * (MAX_RANK * max(n_out, 1)))()
        self._check(self._lib.ait_model_run(self._handle, c_in, shape_ptrs, c_out, out_shapes))
        return [tuple(out_shapes[j * MAX_RANK + k] for k in range(spec.rank))
                for j, spec in enumerate(self.output_specs.values())]

    def run(self, inputs: Mapping[str, object]) -> dict[str, object]:
        if self._handle is None:
            raise ModelError("the model is closed")
        feeds = self._prepare(inputs)
        if self._io is not None:
            return self._io.run(feeds, self._call)
        arrays = [a for _, a in feeds]
        outs = [np.empty(int(np.prod(s.max_shape, dtype=np.int64)), s.dtype.np) for s in self.output_specs.values()]
        shapes = self._call([a.ctypes.data for a in arrays], [a.shape for a in arrays], [o.ctypes.data for o in outs])
        return {name: outs[j][: int(np.prod(shapes[j], dtype=np.int64))].reshape(shapes[j])
                for j, name in enumerate(self.output_specs)}

    def benchmark(self, inputs: Mapping[str, np.ndarray], iters: int = 50, warmup: int = 5) -> dict[str, float]:
        """Latency of `run` in milliseconds: median, mean, min over `iters` timed calls."""
        for _ in range(warmup):
            self.run(inputs)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.run(inputs)
            times.append((time.perf_counter() - t0) * 1e3)
        return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "min_ms": min(times),
                "iters": iters}

    def set_constants(self, values: Mapping[str, np.ndarray]) -> None:
        """Replace constants by name (names as in report/graph after name_graph)."""
        for name, v in values.items():
            if name not in self._constants:
                raise RuntimeInputError(f"no constant named '{name}' (folded away, or a typo); "
                                        f"known: {sorted(self._constants)[:8]}...")
            dt, nbytes = self._constants[name]
            a = np.ascontiguousarray(v)
            if a.dtype != dt.np or a.nbytes != nbytes:
                raise RuntimeInputError(f"constant '{name}': got {a.dtype} with {a.nbytes} bytes, expected {dt} "
                                        f"with {nbytes} bytes")
            self._check(self._lib.ait_model_set_constant(self._handle, name.encode(), a.ctypes.data, a.nbytes))

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
