"""ONNX quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
QLinearMatMul, ConvInteger, QLinearConv, as the composites of aitgen/ops/quant.py.

Integer products are exact: MatMulInteger/QLinearMatMul multiply (a - a_zero_point) and
(b - b_zero_point) in float64 (the CPU loop GEMM), exact while K * 2^16 * 2^16 < 2^53 (checked);
the convolutions run in float32 (oneDNN) and are exact while every partial sum stays below 2^24
(checked from the operand ranges and the window size, refused beyond)."""
from __future__ import annotations

from ... import ops
from ...ir.dims import IntImm
from ...ir.dtype import DType
from ...ir.tensor import Tensor
from ...ops import quant
from ._proto import elem_dtype
from .registry import NodeContext, onnx_op

_Q_INTS = (DType.int8, DType.uint8, DType.int16, DType.uint16, DType.int4, DType.uint4, DType.int2, DType.uint2)
_Q_TYPES = _Q_INTS + (DType.float8_e4m3fn, DType.float8_e5m2, DType.float8_e4m3fnuz, DType.float8_e5m2fnuz,
                      DType.float4_e2m1fn)


def _opt(ctx: NodeContext, i: int, what: str):
    return ctx.input(i, what) if ctx.has_input(i) else None


def _block_size(ctx: NodeContext) -> int:
    b = int(ctx.attr("block_size", 0)) if ctx.opset >= 21 else 0
    if b < 0:
        raise ctx.malformed(f"block_size must be >= 0, got {b}")
    return b


@onnx_op("QuantizeLinear", min_opset=10)
def _quantize_linear(ctx: NodeContext):
    x, scale = ctx.input(0, "x"), ctx.input(1, "y_scale")
    zp = _opt(ctx, 2, "y_zero_point")
    out = None
    if ctx.opset >= 21 and ctx.attr("output_dtype", 0):
        out = elem_dtype(ctx.attr("output_dtype"), f"{ctx.label}: attribute 'output_dtype'")
    if zp is not None:
        if out is not None and out != zp.dtype:
            raise ctx.malformed(f"output_dtype {out} disagrees with y_zero_point's {zp.dtype}")
        out = zp.dtype
    out = out or DType.uint8
    if out not in _Q_TYPES:
        raise ctx.unsupported(f"quantizing to {out} (aitgen quantizes to {', '.join(map(str, _Q_TYPES))})")
    if not x.dtype.is_float or not scale.dtype.is_float:
        raise ctx.malformed(f"x and y_scale must be floats, got {x.dtype} and {scale.dtype}")
    prec = None
    if ctx.opset >= 23 and ctx.attr("precision", 0):
        prec = elem_dtype(ctx.attr("precision"), f"{ctx.label}: attribute 'precision'")
    return quant.quantize_linear(x, scale, zp, out, axis=int(ctx.attr("axis", 1)), block_size=_block_size(ctx),
                                 saturate=bool(ctx.attr("saturate", 1)), precision=prec,
                                 name=f"quantize_linear:{ctx.label}")


@onnx_op("DequantizeLinear", min_opset=10)
def _dequantize_linear(ctx: NodeContext):
    x, scale = ctx.input(0, "x"), ctx.input(1, "x_scale")
    zp = _opt(ctx, 2, "x_zero_point")
    if x.dtype not in _Q_TYPES and x.dtype is not DType.int32:
        raise ctx.unsupported(f"dequantizing {x.dtype}")
    if zp is not None and zp.dtype != x.dtype:
        raise ctx.malformed(f"x_zero_point has dtype {zp.dtype}, x has {x.dtype}")
    if zp is not None and (x.dtype.is_fp8 or x.dtype is DType.float4_e2m1fn):
        # ONNX: a float zero point must be 0 and onnx's reference leaves it out of the math; a
        # constant one is checked here, a run-time one is read as the 0 it must be
        v = ctx.const(2)
        if v is not None and v.astype("float32").any():
            raise ctx.malformed("a float8/float4 x_zero_point must be 0")
    out = None
    if ctx.opset >= 23 and ctx.attr("output_dtype", 0):
        out = elem_dtype(ctx.attr("output_dtype"), f"{ctx.label}: attribute 'output_dtype'")
    return quant.dequantize_linear(x, scale, zp, out, axis=int(ctx.attr("axis", 1)), block_size=_block_size(ctx),
                                   name=f"dequantize_linear:{ctx.label}")


@onnx_op("DynamicQuantizeLinear", min_opset=11)
def _dynamic_quantize_linear(ctx: NodeContext):
    """onnx's reference, step by step in float32: the range [min(0, min x), max(0, max x)] over 255
    steps (scale 1/255 for an all-zero x), zero point round(clamp(-min / scale, 0, 255))."""
    x = ctx.input(0, "x")
    if x.dtype is not DType.float32:
        raise ctx.malformed(f"x must be float32, got {x.dtype}")
    n = f"dynamic_quantize_linear:{ctx.label}"
    axes = list(range(len(x.shape)))
    hi = ops.maximum(ops.reduce_max(x, axes, name=f"{n}/max"), 0.0, name=f"{n}/max0") if axes else ops.maximum(x, 0.0)
    lo = ops.minimum(ops.reduce_min(x, axes, name=f"{n}/min"), 0.0, name=f"{n}/min0") if axes else ops.minimum(x, 0.0)
    rng = ops.where(ops.equal(hi, lo), 1.0, ops.sub(hi, lo), name=f"{n}/range")
    scale = ops.div(rng, 255.0, name=f"{n}/scale")
    zpf = ops.round(ops.clamp(ops.sub(0.0, ops.div(lo, scale)), 0.0, 255.0), name=f"{n}/zero_point")
    y = ops.clamp(ops.add(ops.round(ops.div(x, scale)), zpf), 0.0, 255.0, name=f"{n}/saturate")
    return [ops.cast(y, DType.uint8, name=f"{n}/cast"), scale, ops.cast(zpf, DType.uint8, name=f"{n}/zp_cast")]


def _centered(t: Tensor, zp, axis: int, what: str, ctx: NodeContext) -> Tensor:
    """t - zero_point in float64 (exact for 8/16-bit integers); zp per row of a (axis -2 of a
    matrix) or per column of b (axis -1), or a scalar."""
    if t.dtype not in (DType.int8, DType.uint8, DType.int16, DType.uint16):
        raise ctx.unsupported(f"{what} has dtype {t.dtype} (aitgen takes 8- and 16-bit integers)")
    f = ops.cast(t, DType.float64)
    if zp is None:
        return f
    if zp.dtype != t.dtype:
        raise ctx.malformed(f"{what}'s zero point has dtype {zp.dtype}, {what} has {t.dtype}")
    z = ops.cast(zp, DType.float64)
    if len(zp.shape) == 1 and zp.shape[0] != IntImm(1):
        dims = [1] * len(t.shape)
        dims[len(t.shape) + axis] = zp.shape[0]
        z = ops.reshape(z, dims)
    elif len(zp.shape) == 1:
        z = ops.reshape(z, [])
    elif len(zp.shape) > 1:
        raise ctx.unsupported(f"a {len(zp.shape)}-D zero point for {what}")
    return ops.sub(f, z)


def _int_matmul(ctx: NodeContext, a: Tensor, azp, b: Tensor, bzp) -> Tensor:
    k = a.shape[-1]
    if isinstance(k, IntImm) and k.value * (1 << 32) >= (1 << 53):
        raise ctx.unsupported(f"K = {k.value}: the float64 product of 16-bit integers would not be exact")
    return ops.matmul(_centered(a, azp, -2, "A", ctx), _centered(b, bzp, -1, "B", ctx))


def _integer_node(ctx: NodeContext, core, names: tuple[str, str], what: str) -> Tensor:
    """MatMulInteger / ConvInteger: core(ctx, a, a_zero_point, b, b_zero_point), exact, as int32.
    names: the ONNX names of inputs 0 and 1 (their zero points are named after them)."""
    x, w = names
    acc = core(ctx, ctx.input(0, x), _opt(ctx, 2, f"{x.lower()}_zero_point"), ctx.input(1, w),
               _opt(ctx, 3, f"{w.lower()}_zero_point"))
    return ops.cast(acc, DType.int32, name=f"{what}:{ctx.label}/cast")


def _qlinear_node(ctx: NodeContext, core, names: tuple[str, str], a_axis: int, b_axis: int) -> Tensor:
    """QLinearMatMul / QLinearConv: the integer core over (a, zero point, b, zero point) requantized
    by a_scale * b_scale / y_scale, per-row/column scales along the output's a_axis / b_axis."""
    x, w = names
    a, a_s, azp = ctx.input(0, x), ctx.input(1, f"{x}_scale"), _opt(ctx, 2, f"{x}_zero_point")
    b, b_s, bzp = ctx.input(3, w), ctx.input(4, f"{w}_scale"), _opt(ctx, 5, f"{w}_zero_point")
    y_s, yzp = ctx.input(6, "y_scale"), _opt(ctx, 7, "y_zero_point")
    acc = core(ctx, a, azp, b, bzp)
    out = yzp.dtype if yzp is not None else a.dtype
    return quant.requantize(acc, _multiplier(ctx, a_s, b_s, y_s, a_axis, b_axis, len(acc.shape)), yzp, out,
                            name=f"requantize:{ctx.label}")


@onnx_op("MatMulInteger", min_opset=10)
def _matmul_integer(ctx: NodeContext):
    return _integer_node(ctx, _int_matmul, ("A", "B"), "matmul_integer")


@onnx_op("QLinearMatMul", min_opset=10)
def _qlinear_matmul(ctx: NodeContext):
    return _qlinear_node(ctx, _int_matmul, ("a", "b"), -2, -1)


def _multiplier(ctx: NodeContext, a_s: Tensor, b_s: Tensor, y_s: Tensor, a_axis: int, b_axis: int, rank: int):
    """a_scale * b_scale / y_scale in the scales' dtype (onnx's order), per-row/column scales
    broadcast along the output's axes a_axis / b_axis."""
    def shaped(s: Tensor, axis: int) -> Tensor:
        if len(s.shape) == 0:
            return s
        if len(s.shape) != 1:
            raise ctx.unsupported(f"a {len(s.shape)}-D scale")
        if s.shape[0] == IntImm(1):
            return ops.reshape(s, [])
        dims = [1] * rank
        dims[rank + axis if axis < 0 else axis] = s.shape[0]
        return ops.reshape(s, dims)
    if not (a_s.dtype == b_s.dtype == y_s.dtype and a_s.dtype.is_float):
        raise ctx.malformed(f"scales must share a float dtype, got {a_s.dtype}, {b_s.dtype}, {y_s.dtype}")
    return ops.div(ops.mul(shaped(a_s, a_axis), shaped(b_s, b_axis)), y_s)


# -- ConvInteger / QLinearConv ----------------------------------------------------------------------

# float32 holds every integer below 2^24: a window of at most this many 255 x 255 products sums
# exactly (centered 8-bit operands lie in [-255, 255]).
_EXACT_TERMS = (1 << 24) // (255 * 255)


def _int_conv(ctx: NodeContext, x: Tensor, xzp, w: Tensor, wzp, bias=None) -> Tensor:
    """The integer convolution of (x - x_zero_point) and (w - w_zero_point) (+ bias) in float64,
    from float32 convolutions over input-channel chunks small enough that each is exact."""
    from .ops_nn import _as_2d, _kernel, to_nchw, to_nhwc, window_attrs
    for t, what in ((x, "x"), (w, "w")):
        if t.dtype not in (DType.int8, DType.uint8):
            raise ctx.unsupported(f"{what} has dtype {t.dtype} (aitgen takes 8-bit integers)")
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ctx.unsupported("integer convolution over other than 2-D windows")
    groups = int(ctx.attr("group", 1))
    kernel = _kernel(ctx, [d.value if isinstance(d, IntImm) else d for d in w.shape], 2)
    strides, dilations, begin, end = window_attrs(ctx, x, kernel, is_pool=False)
    xf = ops.cast(x, DType.float32)
    if xzp is not None:
        if len(xzp.shape) > 1 or (len(xzp.shape) == 1 and xzp.shape[0] != IntImm(1)):
            raise ctx.unsupported("a per-channel x_zero_point")
        xf = ops.sub(xf, ops.cast(ops.reshape(xzp, []) if len(xzp.shape) else xzp, DType.float32))
    wf = ops.cast(w, DType.float32)
    if wzp is not None:
        z = ops.cast(wzp, DType.float32)
        if len(wzp.shape) == 1 and wzp.shape[0] != IntImm(1):
            z = ops.reshape(z, [wzp.shape[0], 1, 1, 1])  # per output channel
        elif len(wzp.shape) == 1:
            z = ops.reshape(z, [])
        wf = ops.sub(wf, z)
    if not isinstance(w.shape[1], IntImm):
        raise ctx.unsupported("a dynamic input-channel count")
    cin, taps = w.shape[1].value, kernel[0] * kernel[1]
    step = cin if groups > 1 else max(1, _EXACT_TERMS // taps)
    if taps * (cin if groups > 1 else 1) > _EXACT_TERMS:
        raise ctx.unsupported(f"a window of {taps * (cin if groups > 1 else 1)} products per group "
                              f"exceeds the {_EXACT_TERMS} that float32 sums exactly")
    xn, wn = to_nhwc(xf), ops.permute(wf, [0, 2, 3, 1])  # NHWC activations, OHWI weights
    acc = None
    for c0 in range(0, cin, step):  # input-channel chunks, each exact in float32, summed in float64
        c1 = min(cin, c0 + step)
        xs = xn if step >= cin else ops.slice(xn, [c0], [c1], axes=[3])
        ws = wn if step >= cin else ops.slice(wn, [c0], [c1], axes=[3])
        y = ops.conv2d(xs, ws, None, stride=_as_2d(strides, 1), padding=(begin[0], end[0], begin[1], end[1]),
                       dilation=_as_2d(dilations, 1), groups=groups)
        y = ops.cast(y, DType.float64)
        acc = y if acc is None else ops.add(acc, y)
    acc = to_nchw(acc)
    if bias is not None:
        if bias.dtype is not DType.int32:
            raise ctx.malformed(f"B must be int32, got {bias.dtype}")
        acc = ops.add(acc, ops.reshape(ops.cast(bias, DType.float64), [bias.shape[0], 1, 1]))
    return acc


@onnx_op("ConvInteger", min_opset=10)
def _conv_integer(ctx: NodeContext):
    return _integer_node(ctx, _int_conv, ("x", "w"), "conv_integer")


@onnx_op("QLinearConv", min_opset=10)
def _qlinear_conv(ctx: NodeContext):
    # the accumulator is NCHW (rank 4): scales per output channel along axis 1; B read after input 7
    return _qlinear_node(ctx, lambda c, x, xzp, w, wzp: _int_conv(c, x, xzp, w, wzp, _opt(c, 8, "B")),
                         ("x", "w"), 0, 1)
