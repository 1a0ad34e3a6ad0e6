"""Element types of the IR and their numpy counterparts (bfloat16 and float8 through ml_dtypes).

ml_dtypes is imported on the first use of bfloat16 or a float8 type: it takes about a second to
import, and a process that loads a float32 model should not pay for it.

float8 types follow ONNX (and ml_dtypes): e4m3fn (no infinities, one NaN pattern per sign), e5m2
(IEEE-like), and the fnuz forms (no infinities, no negative zero, NaN = 0x80). They are storage
types: the oracle and the kernels compute in float32 and round per op, as for float16/bfloat16."""
from __future__ import annotations

import enum
import functools
import sys

import numpy as np

from ..errors import DTypeError


class DType(enum.Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int8 = "int8"
    int32 = "int32"
    int64 = "int64"
    bool = "bool"
    float64 = "float64"
    int16 = "int16"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e5m2 = "float8_e5m2"
    float8_e4m3fnuz = "float8_e4m3fnuz"
    float8_e5m2fnuz = "float8_e5m2fnuz"
    # Sub-byte types, one element per byte (unpacked, as ml_dtypes holds them): the value in the low
    # bits, the rest zero (int4 -1 is 0x0f). ONNX packs two (four) per byte; the loader unpacks.
    int4 = "int4"
    uint4 = "uint4"
    int2 = "int2"
    uint2 = "uint2"
    float4_e2m1fn = "float4_e2m1fn"
    # ONNX FLOAT8E8M0: a power of two 2^(bits - 127) or NaN (0xff); no sign, no zero
    float8_e8m0fnu = "float8_e8m0fnu"

    @property
    def np(self) -> np.dtype:
        n = _NP.get(self)
        return n if n is not None else _ml_dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return self in _INTS

    @property
    def is_unsigned(self) -> bool:
        return self in (DType.uint8, DType.uint16, DType.uint32, DType.uint64, DType.uint4, DType.uint2)

    @property
    def is_subbyte_int(self) -> bool:
        """int4/uint4/int2/uint2: integers narrower than their byte of storage."""
        return self in _SUBBYTE_INTS

    @property
    def int_range(self) -> tuple[int, int]:
        """Smallest and largest value of an integer type (sub-byte ones included)."""
        if self in _SUBBYTE_INTS:
            bits = _SUBBYTE_INTS[self]
            return (0, (1 << bits) - 1) if self.is_unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        i = np.iinfo(self.np)
        return int(i.min), int(i.max)

    @property
    def is_fp8(self) -> bool:
        return self in _FP8

    @property
    def is_low_float(self) -> bool:
        """A float storage type that computes in float32 (float16, bfloat16, float8)."""
        return self in _FLOATS and self not in (DType.float32, DType.float64)

    @property
    def short(self) -> str:
        """Compact spelling used by the printer: f32, f16, bf16, i8, i32, i64, bool."""
        return _SHORT[self]

    def __str__(self) -> str:
        return self.value


_NP = {
    DType.float32: np.dtype(np.float32),
    DType.float16: np.dtype(np.float16),
    DType.int8: np.dtype(np.int8),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.bool: np.dtype(np.bool_),
    DType.float64: np.dtype(np.float64),
    DType.int16: np.dtype(np.int16),
    DType.uint8: np.dtype(np.uint8),
    DType.uint16: np.dtype(np.uint16),
    DType.uint32: np.dtype(np.uint32),
    DType.uint64: np.dtype(np.uint64),
}
_FP8 = (DType.float8_e4m3fn, DType.float8_e5m2, DType.float8_e4m3fnuz, DType.float8_e5m2fnuz)
_FLOATS = (DType.float32, DType.float16, DType.bfloat16, DType.float64) + _FP8 + (DType.float4_e2m1fn,
                                                                                  DType.float8_e8m0fnu)
_SUBBYTE_INTS = {DType.int4: 4, DType.uint4: 4, DType.int2: 2, DType.uint2: 2}  # value bits
_INTS = (DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8, DType.uint16, DType.uint32,
         DType.uint64) + tuple(_SUBBYTE_INTS)
# ml_dtypes spells them as we do
_ML_DTYPES = ("bfloat16",) + tuple(t.value for t in _FP8) + tuple(t.value for t in _SUBBYTE_INTS) + ("float4_e2m1fn", "float8_e8m0fnu")


@functools.lru_cache(maxsize=None)
def _ml_dtype(name: str) -> np.dtype:
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name))


def _bfloat16() -> np.dtype:
    return _ml_dtype("bfloat16")


_SHORT = {
    DType.float32: "f32", DType.float16: "f16", DType.bfloat16: "bf16", DType.int8: "i8",
    DType.int32: "i32", DType.int64: "i64", DType.bool: "bool", DType.float64: "f64", DType.int16: "i16",
    DType.uint8: "u8", DType.uint16: "u16", DType.uint32: "u32", DType.uint64: "u64",
    DType.float8_e4m3fn: "f8e4m3fn", DType.float8_e5m2: "f8e5m2", DType.float8_e4m3fnuz: "f8e4m3fnuz",
    DType.float8_e5m2fnuz: "f8e5m2fnuz", DType.int4: "i4", DType.uint4: "u4", DType.int2: "i2", DType.uint2: "u2",
    DType.float4_e2m1fn: "f4e2m1", DType.float8_e8m0fnu: "f8e8m0",
}
_ALIASES = {"float": DType.float32, "half": DType.float16, "fp32": DType.float32, "fp16": DType.float16,
            "bf16": DType.bfloat16, "f32": DType.float32, "f16": DType.float16, "i8": DType.int8,
            "i32": DType.int32, "i64": DType.int64, "long": DType.int64, "int": DType.int32,
            "double": DType.float64, "f64": DType.float64, "fp64": DType.float64, "i16": DType.int16,
            "short": DType.int16, "u8": DType.uint8, "u16": DType.uint16, "u32": DType.uint32, "u64": DType.uint64}


def as_dtype(d) -> DType:
    """Normalise a DType, its name, an alias, or a numpy dtype."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str):
        if d in DType.__members__:
            return DType[d]
        if d in _ALIASES:
            return _ALIASES[d]
        raise DTypeError(f"unknown dtype {d!r}; expected one of {[t.value for t in DType]}")
    try:
        npd = np.dtype(d)
    except TypeError as e:
        raise DTypeError(f"unknown dtype {d!r}") from e
    for t, n in _NP.items():
        if n == npd:
            return t
    # A bfloat16/float8 array exists only where ml_dtypes is already loaded.
    if "ml_dtypes" in sys.modules:
        for name in _ML_DTYPES:
            if npd == _ml_dtype(name):
                return DType(name)
    raise DTypeError(f"numpy dtype {npd} has no aitgen counterpart")


def compute_dtype(d: DType) -> np.dtype:
    """The numpy type the oracle computes in: float32 for every float storage type but float64,
    int32 for the sub-byte integers (ml_dtypes' int4 arithmetic would wrap at 4 bits per step; the
    kernels compute in 32 bits and wrap once, when they store)."""
    if d.is_subbyte_int:
        return np.dtype(np.int32)
    return np.dtype(np.float32) if d.is_low_float else d.np
