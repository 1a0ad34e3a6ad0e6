"""Element types of the IR and their numpy counterparts (bfloat16 through ml_dtypes).

ml_dtypes is imported on the first use of bfloat16: it takes about a second to import, and a
process that loads a float32 model should not pay for it."""
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

    @property
    def np(self) -> np.dtype:
        return _NP[self] if self is not DType.bfloat16 else _bfloat16()

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float16, DType.bfloat16)

    @property
    def is_int(self) -> bool:
        return self in (DType.int8, DType.int32, DType.int64)

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
}


@functools.lru_cache(maxsize=1)
def _bfloat16() -> np.dtype:
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


_SHORT = {
    DType.float32: "f32", DType.float16: "f16", DType.bfloat16: "bf16", DType.int8: "i8",
    DType.int32: "i32", DType.int64: "i64", DType.bool: "bool",
}
_ALIASES = {"float": DType.float32, "half": DType.float16, "fp32": DType.float32, "fp16": DType.float16,
            "bf16": DType.bfloat16, "f32": DType.float32, "f16": DType.float16, "i8": DType.int8,
            "i32": DType.int32, "i64": DType.int64, "long": DType.int64, "int": DType.int32}


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
    # A bfloat16 array exists only where ml_dtypes is already loaded.
    if "ml_dtypes" in sys.modules and npd == _bfloat16():
        return DType.bfloat16
    raise DTypeError(f"numpy dtype {npd} has no aitgen counterpart")


def compute_dtype(d: DType) -> np.dtype:
    """The numpy type the oracle computes in: float32 for every float storage type."""
    return np.dtype(np.float32) if d.is_float else d.np
