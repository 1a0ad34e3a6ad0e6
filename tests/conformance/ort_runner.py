"""onnxruntime on the same node cases, for the side-by-side figure.

Data that numpy has no type for (bfloat16, float8, int4/uint4, int2/uint2, float4) is handed to
onnxruntime as its own element type through OrtValues, and outputs of such types are read back
through an IO binding, so ORT is judged on every case it implements.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Optional

import numpy as np

try:
    from . import nodecases
    from .conf_worker import compare
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nodecases  # type: ignore[no-redef]
    from conf_worker import compare  # type: ignore[no-redef]

# Element types numpy lacks: (TensorProto enum name, bits per element).
_SPECIAL = {"bfloat16": ("BFLOAT16", 16), "float8_e4m3fn": ("FLOAT8E4M3FN", 8), "float8_e5m2": ("FLOAT8E5M2", 8),
            "float8_e4m3fnuz": ("FLOAT8E4M3FNUZ", 8), "float8_e5m2fnuz": ("FLOAT8E5M2FNUZ", 8),
            "float8_e8m0fnu": ("FLOAT8E8M0", 8), "int4": ("INT4", 4), "uint4": ("UINT4", 4),
            "int2": ("INT2", 2), "uint2": ("UINT2", 2), "float4_e2m1fn": ("FLOAT4E2M1", 4)}


def _pack(a: np.ndarray, bits: int) -> np.ndarray:
    """Sub-byte elements packed the ONNX way: the first element in the low bits of a byte."""
    codes = a.reshape(-1).view(np.uint8) & ((1 << bits) - 1)
    per = 8 // bits
    codes = np.concatenate([codes, np.zeros((-len(codes)) % per, np.uint8)]).reshape(-1, per)
    return np.bitwise_or.reduce(codes << (np.arange(per, dtype=np.uint8) * bits), axis=1).astype(np.uint8)


def _unpack(raw: np.ndarray, bits: int, like: np.ndarray) -> np.ndarray:
    per = 8 // bits
    codes = ((raw[:, None] >> (np.arange(per, dtype=np.uint8) * bits)) & ((1 << bits) - 1)).reshape(-1)
    codes = codes[: like.size].astype(np.uint8)
    if like.dtype.name in ("int4", "int2"):  # sign-extend into the byte ml_dtypes stores
        sign = 1 << (bits - 1)
        codes = np.where(codes & sign, codes | (0xFF ^ ((1 << bits) - 1)), codes).astype(np.uint8)
    return codes.view(like.dtype).reshape(like.shape)


def _ort_value(ort, a: np.ndarray):
    from onnx import TensorProto
    spec = _SPECIAL.get(a.dtype.name)
    if spec is None:
        return ort.OrtValue.ortvalue_from_numpy(np.array(a, order="C"))  # 0-d stays 0-d
    name, bits = spec
    if bits >= 8:
        raw = np.array(a.view(np.uint16) if bits == 16 else a.view(np.uint8), order="C")
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, getattr(TensorProto, name))
    # Sub-byte: an OrtValue of the logical shape, filled with the packed bytes.
    v = ort.OrtValue.ortvalue_from_shape_and_type(list(a.shape), getattr(TensorProto, name), "cpu", 0)
    raw = _pack(a, bits)
    ctypes.memmove(v.data_ptr(), raw.ctypes.data, raw.nbytes)
    return v


def _read(v, like: Optional[np.ndarray]):
    try:
        got = v.numpy()
        if like is not None and like.dtype.name in _SPECIAL and got.dtype.itemsize == like.dtype.itemsize \
                and _SPECIAL[like.dtype.name][1] >= 8:
            got = got.view(like.dtype)  # float8 comes back as its uint8 codes
        return got
    except Exception:
        if like is None or like.dtype.name not in _SPECIAL:
            raise
    bits = _SPECIAL[like.dtype.name][1]
    shape = tuple(v.shape())
    n = int(np.prod(shape))
    nbytes = n * bits // 8 if bits >= 8 else -(-n * bits // 8)
    raw = np.empty(nbytes, np.uint8)
    ctypes.memmove(raw.ctypes.data, v.data_ptr(), nbytes)
    if bits >= 8:
        return raw.view(like.dtype).reshape(shape)
    return _unpack(raw, bits, np.empty(shape, like.dtype))


class _Plain:
    """A numpy result of sess.run, read like an OrtValue."""

    def __init__(self, a):
        self.a = a

    def numpy(self):
        return self.a


def _run_bound(ort, sess, names, arrays) -> list:
    io = sess.io_binding()
    for n, a in zip(names, arrays):
        io.bind_ortvalue_input(n, _ort_value(ort, a))
    for o in sess.get_outputs():
        io.bind_output(o.name, "cpu")
    sess.run_with_iobinding(io)
    return io.get_outputs()


def run_case(case: "nodecases.Case") -> tuple[str, str]:
    """('pass' | 'fail' | 'error', reason) of onnxruntime on one case, with the case's tolerances."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(case.model, so, providers=["CPUExecutionProvider"])
    except Exception as e:
        return "error", f"session: {str(e).splitlines()[0][:300]}"
    names = [i.name for i in sess.get_inputs()]
    rtol, atol = case.tolerances()
    for d, (ins, outs) in enumerate(case.data_sets):
        arrays = [nodecases.to_array(v) for v in ins]
        if any(a is None for a in arrays) or len(arrays) != len(names):
            return "error", "inputs that are no tensors (sequences, optionals) or a count mismatch"
        special = any(a.dtype.name in _SPECIAL for a in arrays) or any(
            getattr(nodecases.to_array(w), "dtype", np.dtype(np.float32)).name in _SPECIAL for w in outs)
        if not special:  # plain numpy in and out (strings included)
            try:
                vals = sess.run(None, dict(zip(names, arrays)))
            except Exception as e:
                return "error", f"run: {str(e).splitlines()[0][:300]}"
            vals = [_Plain(v) for v in vals]
        else:
            try:
                vals = _run_bound(ort, sess, names, arrays)
            except Exception as e:
                return "error", f"run: {str(e).splitlines()[0][:300]}"
        if len(vals) != len(outs):
            return "fail", f"{len(vals)} outputs, expected {len(outs)}"
        for j, (v, w) in enumerate(zip(vals, outs)):
            wa = nodecases.to_array(w)
            try:
                got = _read(v, wa)
            except Exception as e:
                return "error", f"output {j}: {str(e).splitlines()[0][:200]}"
            why = compare(got, w, rtol, atol)
            if why:
                return "fail", f"output {j} (data set {d}): {why}"
    return "pass", ""
