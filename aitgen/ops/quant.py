"""Linear quantization as composites of existing ops (division, round, clamp, cast, multiply).

Each builder names its ops `<name>/<step>` under a `quantize_linear` / `dequantize_linear` /
`requantize` prefix, so a later pass (issue 14: Q/DQ pairs around MatMul/Conv folded into int8
kernels) finds the pattern by name and kind without a dedicated op kind. The math is ONNX's
(onnx.reference's QuantizeLinear / DequantizeLinear), and exact:

- quantize to an integer type: q = clamp(round_half_even(x / scale) + zero_point, lo, hi). The
  round and the zero point are added in float32 (float64 for a float64 x): exact while
  |round(x / scale)| < 2^24, and beyond that the clamp gives lo or hi either way;
- quantize to float8: cast(x / scale) with ONNX's saturate (the zero point must be 0); to float4:
  cast(x / scale + zero_point);
- dequantize: (float32(x) - float32(zero_point)) * scale, in float32 (float64 for a float64
  scale), then the output dtype: float32 holds every integer of 16 bits or fewer exactly.

Scale and zero point are a scalar, a 1-D tensor along `axis` (per-axis) or, with `block_size`, a
tensor of x's rank whose `axis` dim is ceil(x.shape[axis] / block_size) (blocked)."""
from __future__ import annotations

from typing import Optional

from ..errors import ShapeError
from ..ir.dims import IntImm
from ..ir.dtype import DType, as_dtype
from ..ir.tensor import Tensor
from . import elementwise as ew
from . import view


def _static(d, what: str) -> int:
    if not isinstance(d, IntImm):
        raise ShapeError(f"{what} must be static for blocked quantization, got {d}")
    return d.value


def broadcast_param(p: Tensor, x: Tensor, axis: int, block_size: int, name: str) -> Tensor:
    """Scale or zero point p shaped to broadcast against x (see the module's head)."""
    r = len(x.shape)
    if len(p.shape) == 0:
        return p
    if not block_size:
        if len(p.shape) != 1:
            raise ShapeError(f"{name}: a per-axis parameter must be 1-D, got shape {list(p.shape)}")
        if p.shape[0] == IntImm(1):
            return view.reshape(p, [], name=f"{name}/scalar")
        if not 0 <= axis < r:
            raise ShapeError(f"{name}: axis {axis} is out of range for rank {r}")
        dims = [1] * r
        dims[axis] = p.shape[0]
        return view.reshape(p, dims, name=f"{name}/per_axis")
    if len(p.shape) != r or not 0 <= axis < r:
        raise ShapeError(f"{name}: a blocked parameter needs x's rank {r} and an axis in range, "
                         f"got shape {list(p.shape)}, axis {axis}")
    n = _static(x.shape[axis], f"{name}: x's dim {axis}")
    nb = _static(p.shape[axis], f"{name}: the parameter's dim {axis}")
    if nb != -(-n // block_size):
        raise ShapeError(f"{name}: {nb} blocks of {block_size} do not cover x's dim {axis} ({n})")
    # repeat each block's value block_size times along axis: unsqueeze, expand, merge, trim
    e = view.unsqueeze(p, [axis + 1], name=f"{name}/blocks")
    shape = list(e.shape)
    shape[axis + 1] = block_size
    e = view.expand(e, shape, name=f"{name}/repeat")
    merged = list(p.shape)
    merged[axis] = nb * block_size
    e = view.reshape(e, merged, name=f"{name}/merge")
    if nb * block_size != n:
        e = view.slice(e, [0], [n], axes=[axis], name=f"{name}/trim")
    return e


def _float(t: Tensor, like: DType, name: str) -> Tensor:
    return t if t.dtype == like else ew.cast(t, like, name=name)


def quantize_linear(x: Tensor, scale: Tensor, zero_point: Optional[Tensor], out_dtype, *, axis: int = 1,
                    block_size: int = 0, saturate: bool = True, precision=None,
                    name: str = "quantize_linear") -> Tensor:
    """ONNX QuantizeLinear (see the module's head)."""
    out = as_dtype(out_dtype)
    axis = axis + len(x.shape) if axis < 0 else axis
    s = broadcast_param(scale, x, axis, block_size, f"{name}/scale")
    if precision is not None:
        x, s = _float(x, as_dtype(precision), f"{name}/x_precision"), _float(s, as_dtype(precision), f"{name}/s_precision")
    elif s.dtype != x.dtype:  # numpy promotes mixed floats; float32 holds both of them here
        x, s = _float(x, DType.float32, f"{name}/x_f32"), _float(s, DType.float32, f"{name}/s_f32")
    q = ew.div(x, s, name=f"{name}/div")
    zp = None if zero_point is None else broadcast_param(zero_point, x, axis, block_size, f"{name}/zero_point")
    if out.is_fp8:
        return ew.cast(q, out, saturate=saturate, name=f"{name}/cast")
    ct = DType.float64 if q.dtype is DType.float64 else DType.float32
    q = _float(q, ct, f"{name}/to_compute")
    if out is DType.float4_e2m1fn:
        if zp is not None:
            q = ew.add(q, _float(zp, ct, f"{name}/zp_float"), name=f"{name}/add_zero_point")
        return ew.cast(q, out, name=f"{name}/cast")
    if not out.is_int:
        raise ShapeError(f"{name}: quantizing to {out} is not defined (integers, float8, float4)")
    q = ew.round(q, name=f"{name}/round")
    if zp is not None:
        q = ew.add(q, _float(zp, ct, f"{name}/zp_float"), name=f"{name}/add_zero_point")
    lo, hi = out.int_range
    q = ew.clamp(q, float(lo), float(hi), name=f"{name}/saturate")
    return ew.cast(q, out, name=f"{name}/cast")


def dequantize_linear(x: Tensor, scale: Tensor, zero_point: Optional[Tensor], out_dtype=None, *,
                      axis: int = 1, block_size: int = 0, name: str = "dequantize_linear") -> Tensor:
    """ONNX DequantizeLinear (see the module's head); out_dtype defaults to the scale's."""
    out = as_dtype(out_dtype) if out_dtype is not None else scale.dtype
    axis = axis + len(x.shape) if axis < 0 else axis
    ct = DType.float64 if scale.dtype is DType.float64 else DType.float32
    dx = _float(x, ct, f"{name}/x_float")
    if zero_point is not None and not (x.dtype.is_fp8 or x.dtype is DType.float4_e2m1fn):
        zp = broadcast_param(zero_point, x, axis, block_size, f"{name}/zero_point")
        dx = ew.sub(dx, _float(zp, ct, f"{name}/zp_float"), name=f"{name}/sub_zero_point")
    s = _float(broadcast_param(scale, x, axis, block_size, f"{name}/scale"), ct, f"{name}/scale_float")
    y = ew.mul(dx, s, name=f"{name}/mul")
    return _float(y, out, f"{name}/cast")


def requantize(acc: Tensor, multiplier: Tensor, zero_point: Optional[Tensor], out_dtype, *,
               name: str = "requantize") -> Tensor:
    """An integer accumulator (held exactly in float64) to a quantized output: clamp(round(acc *
    multiplier) + zero_point) as onnx's QLinearMatMul computes it (int32 x float promotes to
    float64; multiplier = a_scale * b_scale / y_scale in the scales' own dtype, then widened)."""
    out = as_dtype(out_dtype)
    d = ew.mul(_float(acc, DType.float64, f"{name}/acc"), _float(multiplier, DType.float64, f"{name}/m"),
               name=f"{name}/scale")
    if zero_point is not None:
        d = ew.add(d, _float(zero_point, DType.float64, f"{name}/zp"), name=f"{name}/add_zero_point")
    lo, hi = out.int_range
    d = ew.clamp(ew.round(d, name=f"{name}/round"), float(lo), float(hi), name=f"{name}/saturate")
    return ew.cast(d, out, name=f"{name}/cast")
