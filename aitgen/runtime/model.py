"""Model: a built library loaded through the C API (ctypes). numpy arrays in and out."""
from __future__ import annotations

import ctypes
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from ..errors import AitgenError, RuntimeInputError
from ..ir.dtype import DType

MAX_RANK = 8
_DTYPES = [DType.float32, DType.float16, DType.bfloat16, DType.int8, DType.int32, DType.int64, DType.bool]


class ModelError(AitgenError, RuntimeError):
    """The library failed for a reason other than bad input (it says which)."""


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
    lib.ait_last_error.restype = ctypes.c_char_p


class Model:
    """A compiled model. `run` takes and returns dicts name -> numpy array; wrong input raises
    RuntimeInputError and leaves the model usable. Thread-safe; `num_runtimes` calls run at once."""

    def __init__(self, workdir: Union[str, Path], num_runtimes: int = 1):
        self.workdir = Path(workdir)
        meta_path = self.workdir / "model.json"
        if not meta_path.exists():
            raise AitgenError(f"{self.workdir} holds no built model (no model.json)")
        self.meta = json.loads(meta_path.read_text())
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

    @classmethod
    def load(cls, workdir: Union[str, Path], num_runtimes: int = 1) -> "Model":
        return cls(workdir, num_runtimes)

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
    def _prepare(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        unknown = [k for k in inputs if k not in self.input_specs]
        if unknown:
            raise RuntimeInputError(f"unknown input '{unknown[0]}'; the inputs are {list(self.input_specs)}")
        arrays = []
        for name, spec in self.input_specs.items():
            if name not in inputs:
                raise RuntimeInputError(f"missing input '{name}'")
            a = inputs[name]
            if not isinstance(a, np.ndarray):
                raise RuntimeInputError(f"input '{name}': expected a numpy array, got {type(a).__name__}")
            if a.dtype != spec.dtype.np:
                raise RuntimeInputError(f"input '{name}': dtype {a.dtype}, expected {spec.dtype}")
            if a.ndim != spec.rank:
                raise RuntimeInputError(f"input '{name}': rank {a.ndim} (shape {list(a.shape)}), expected rank {spec.rank}")
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._handle is None:
            raise ModelError("the model is closed")
        arrays = self._prepare(inputs)
        n_in, n_out = len(arrays), len(self.output_specs)
        in_ptrs = (ctypes.c_void_p * max(n_in, 1))(*[a.ctypes.data for a in arrays])
        shapes = [(ctypes.c_int64 * MAX_RANK)(*a.shape) for a in arrays]
        shape_ptrs = (ctypes.POINTER(ctypes.c_int64) * max(n_in, 1))(*shapes)
        outs = [np.empty(int(np.prod(s.max_shape, dtype=np.int64)), s.dtype.np) for s in self.output_specs.values()]
        out_ptrs = (ctypes.c_void_p * max(n_out, 1))(*[o.ctypes.data for o in outs])
        out_shapes = (ctypes.c_int64 * (MAX_RANK * max(n_out, 1)))()
        self._check(self._lib.ait_model_run(self._handle, in_ptrs, shape_ptrs, out_ptrs, out_shapes))
        result = {}
        for j, (name, spec) in enumerate(self.output_specs.items()):
            shape = tuple(out_shapes[j * MAX_RANK + k] for k in range(spec.rank))
            result[name] = outs[j][: int(np.prod(shape, dtype=np.int64))].reshape(shape)
        return result

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

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
