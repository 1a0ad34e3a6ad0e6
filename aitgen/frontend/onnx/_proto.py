"""The onnx package (an optional dependency, imported on first use) and ONNX element types as
aitgen dtypes: what the loader, the shape folding and the converters all read of onnx itself."""
from __future__ import annotations

from ...errors import ImportError_, UnsupportedOpError
from ...ir.dtype import DType

_DTYPES = {"FLOAT": DType.float32, "FLOAT16": DType.float16, "BFLOAT16": DType.bfloat16,
           "INT8": DType.int8, "INT32": DType.int32, "INT64": DType.int64, "BOOL": DType.bool,
           "DOUBLE": DType.float64, "INT16": DType.int16, "UINT8": DType.uint8, "UINT16": DType.uint16,
           "UINT32": DType.uint32, "UINT64": DType.uint64, "FLOAT8E4M3FN": DType.float8_e4m3fn,
           "FLOAT8E5M2": DType.float8_e5m2, "FLOAT8E4M3FNUZ": DType.float8_e4m3fnuz,
           "FLOAT8E5M2FNUZ": DType.float8_e5m2fnuz, "INT4": DType.int4, "UINT4": DType.uint4,
           "INT2": DType.int2, "UINT2": DType.uint2, "FLOAT4E2M1": DType.float4_e2m1fn,
           "FLOAT8E8M0": DType.float8_e8m0fnu}


def onnx_module():
    """The onnx package, imported on first use: it is an optional dependency."""
    try:
        import onnx  # noqa: F401
        from onnx import numpy_helper  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError_("importing ONNX models needs the onnx package: "
                           "pip install 'aitgen[onnx]' (or pip install onnx)") from e
    return onnx


def elem_dtype(elem_type: int, what: str) -> DType:
    onnx = onnx_module()
    try:
        name = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        raise ImportError_(f"{what}: unknown element type {elem_type}") from None
    if name not in _DTYPES:
        raise UnsupportedOpError(f"{what}: element type {name} has no aitgen dtype "
                                 f"(supported: {', '.join(_DTYPES)})")
    return _DTYPES[name]
