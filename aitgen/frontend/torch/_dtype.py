"""torch dtypes and tensors as aitgen's: the importer and the converters both read them."""
from __future__ import annotations

import numpy as np
import torch

from ...errors import DTypeError
from ...ir.dtype import DType

_DTYPES = {torch.float32: DType.float32, torch.float16: DType.float16, torch.bfloat16: DType.bfloat16,
           torch.int8: DType.int8, torch.int32: DType.int32, torch.int64: DType.int64, torch.bool: DType.bool,
           torch.float64: DType.float64, torch.int16: DType.int16, torch.uint8: DType.uint8,
           torch.uint16: DType.uint16, torch.uint32: DType.uint32, torch.uint64: DType.uint64,
           torch.float8_e4m3fn: DType.float8_e4m3fn, torch.float8_e5m2: DType.float8_e5m2,
           torch.float8_e4m3fnuz: DType.float8_e4m3fnuz, torch.float8_e5m2fnuz: DType.float8_e5m2fnuz}


def ir_dtype(dt: torch.dtype, what: str) -> DType:
    try:
        return _DTYPES[dt]
    except KeyError:
        raise DTypeError(f"{what}: torch dtype {dt} has no aitgen counterpart") from None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: carry the values in float32
        return t.float().numpy().copy()
    dt = _DTYPES.get(t.dtype)
    if dt is not None and dt.is_fp8:  # torch has no numpy float8: the bytes, as ml_dtypes' type
        return t.contiguous().view(torch.uint8).numpy().copy().view(dt.np)
    return t.numpy().copy()
