"""torch dtypes and tensors as aitgen's: the importer and the converters both read them."""
from __future__ import annotations

import numpy as np
import torch

from ...errors import DTypeError
from ...ir.dtype import DType

_DTYPES = {torch.float32: DType.float32, torch.float16: DType.float16, torch.bfloat16: DType.bfloat16,
           torch.int8: DType.int8, torch.int32: DType.int32, torch.int64: DType.int64, torch.bool: DType.bool}


def ir_dtype(dt: torch.dtype, what: str) -> DType:
    try:
        return _DTYPES[dt]
    except KeyError:
        hint = " (convert the model with .float() first)" if dt == torch.float64 else ""
        raise DTypeError(f"{what}: torch dtype {dt} has no aitgen counterpart{hint}") from None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: carry the values in float32
        return t.float().numpy().copy()
    return t.numpy().copy()
