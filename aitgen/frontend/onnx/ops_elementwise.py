"""ONNX element-wise ops: math, logic, comparison, activations (decomposed where the IR has no
single op and the decomposition is exact), Clip, Where, Cast/CastLike, variadic Sum/Mean/Max/Min.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dtype import DType, as_dtype
from ...errors import DTypeError
from ...ops.elementwise import CastAttrs, _cast as _ew_cast
from ...ir.tensor import Tensor, constant
from ._proto import elem_dtype
from .registry import NodeContext, onnx_op

# -- one IR op per ONNX op ------------------------------------------------------------------------

_UNARY = {
    "Relu": ops.relu, "Sigmoid": ops.sigmoid, "Tanh": ops.tanh, "Exp": ops.exp, "Log": ops.log,
    "Sqrt": ops.sqrt, "Reciprocal": ops.reciprocal, "Abs": ops.abs, "Neg": ops.neg, "Erf": ops.erf,
    "HardSwish": ops.hardswish, "Not": ops.logical_not,
}
# Kinds added to the IR for the importer (aitgen/ops/elementwise.py); absent ones are skipped so
# this module imports against an IR without them.
_NEW_UNARY = {
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
    "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
    "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "IsNaN": "isnan",
    "BitwiseNot": "bitwise_not",
}
for _onnx, _fn in _NEW_UNARY.items():
    if hasattr(ops, _fn):
        _UNARY[_onnx] = getattr(ops, _fn)

_BINARY = {
    "Add": ops.add, "Sub": ops.sub, "Mul": ops.mul, "Div": ops.div,
    "Equal": ops.equal, "Less": ops.less, "LessOrEqual": ops.less_equal, "Greater": ops.greater,
    "GreaterOrEqual": ops.greater_equal, "And": ops.logical_and, "Or": ops.logical_or,
    "Xor": ops.not_equal,  # on bools, xor is inequality
}
_NEW_BINARY = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}
for _onnx, _fn in _NEW_BINARY.items():
    if hasattr(ops, _fn):
        _BINARY[_onnx] = getattr(ops, _fn)


@onnx_op("BitShift", min_opset=11)
def _bitshift(ctx: NodeContext):
    x, y = ctx.input(0), ctx.input(1)
    d = ctx.attr("direction")
    d = d.decode() if isinstance(d, bytes) else d
    if d not in ("LEFT", "RIGHT"):
        raise ctx.malformed(f"direction must be LEFT or RIGHT, got {d!r}")
    if not x.dtype.is_int or (ctx.opset < 28 and not x.dtype.is_unsigned):
        raise ctx.malformed(f"BitShift takes {'' if ctx.opset >= 28 else 'unsigned '}integers, got {x.dtype}")
    return ops.shift_left(x, y) if d == "LEFT" else ops.shift_right(x, y)


def _check_bool(ctx: NodeContext, *xs: Tensor) -> None:
    if ctx.op_type in ("And", "Or", "Xor", "Not"):
        for x in xs:
            if x.dtype != DType.bool:
                raise ctx.malformed(f"needs bool operands, got {x.dtype}")


@onnx_op(*_UNARY)
def _unary(ctx: NodeContext):
    x = ctx.input(0)
    _check_bool(ctx, x)
    return _UNARY[ctx.op_type](x)


@onnx_op(*_BINARY, min_opset=7)
def _binary(ctx: NodeContext):
    a, b = ctx.input(0), ctx.input(1)
    _check_bool(ctx, a, b)
    return _BINARY[ctx.op_type](a, b)


@onnx_op("Pow", min_opset=7)
def _pow(ctx: NodeContext):
    x, y = ctx.input(0), ctx.input(1)
    if x.dtype.is_float:
        return ops.pow(x, y if y.dtype == x.dtype else ops.cast(y, x.dtype))
    # Integer powers: float32 holds the small results exactly; round off pow's last-bit error.
    r = ops.pow(ops.cast(x, "float32"), ops.cast(y, "float32"))
    return ops.cast(_round(r), x.dtype)


def _round(x: Tensor) -> Tensor:
    if hasattr(ops, "round"):
        return ops.round(x)
    return ops.where(ops.less(x, 0.0), ops.neg(ops.cast(ops.cast(ops.sub(0.5, x), "int64"), x.dtype)),
                     ops.cast(ops.cast(ops.add(x, 0.5), "int64"), x.dtype))


@onnx_op("Sum", "Mean", "Max", "Min", min_opset=8)
def _variadic(ctx: NodeContext):
    xs = [ctx.input(i) for i in range(ctx.num_inputs)]
    if not xs:
        raise ctx.malformed("needs at least one input")
    fn = {"Sum": ops.add, "Mean": ops.add, "Max": ops.maximum, "Min": ops.minimum}[ctx.op_type]
    acc = xs[0]
    for x in xs[1:]:
        acc = fn(acc, x)
    if ctx.op_type == "Mean":
        acc = ops.div(acc, float(len(xs)) if acc.dtype.is_float else len(xs))
    return acc


# -- activations that decompose exactly -----------------------------------------------------------

@onnx_op("LeakyRelu", min_opset=6)
def _leaky_relu(ctx: NodeContext):
    x = ctx.input(0)
    return ops.where(ops.less(x, 0.0), ops.mul(x, ctx.attr("alpha", 0.01)), x)


@onnx_op("PRelu", min_opset=7)
def _prelu(ctx: NodeContext):
    x, slope = ctx.input(0), ctx.input(1)
    return ops.where(ops.less(x, 0.0), ops.mul(x, slope), x)


@onnx_op("ThresholdedRelu", min_opset=10)
def _thresholded_relu(ctx: NodeContext):
    x = ctx.input(0)
    return ops.where(ops.greater(x, ctx.attr("alpha", 1.0)), x, 0.0)


def _expm1(x: Tensor) -> Tensor:
    return ops.expm1(x) if hasattr(ops, "expm1") else ops.sub(ops.exp(x), 1.0)


@onnx_op("Elu", min_opset=6)
def _elu(ctx: NodeContext):
    x = ctx.input(0)
    return ops.where(ops.greater(x, 0.0), x, ops.mul(_expm1(x), ctx.attr("alpha", 1.0)))


@onnx_op("Selu", min_opset=6)
def _selu(ctx: NodeContext):
    x = ctx.input(0)
    alpha, gamma = ctx.attr("alpha", 1.67326319217681884765625), ctx.attr("gamma", 1.05070102214813232421875)
    return ops.mul(ops.where(ops.greater(x, 0.0), x, ops.mul(_expm1(x), alpha)), gamma)


@onnx_op("Celu", min_opset=12)
def _celu(ctx: NodeContext):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.0)
    neg = ops.mul(_expm1(ops.div(x, alpha)), alpha)
    return ops.add(ops.relu(x), ops.minimum(neg, 0.0))


def _softplus(x: Tensor) -> Tensor:
    # relu(x) + log(1 + exp(-|x|)): equal to log(1 + exp(x)) and free of overflow for large x
    t = ops.exp(ops.neg(ops.abs(x)))
    return ops.add(ops.relu(x), ops.log1p(t) if hasattr(ops, "log1p") else ops.log(ops.add(t, 1.0)))


@onnx_op("Softplus")
def _softplus_op(ctx: NodeContext):
    return _softplus(ctx.input(0))


@onnx_op("Softsign")
def _softsign(ctx: NodeContext):
    x = ctx.input(0)
    return ops.div(x, ops.add(ops.abs(x), 1.0))


@onnx_op("HardSigmoid", min_opset=6)
def _hard_sigmoid(ctx: NodeContext):
    x = ctx.input(0)
    return ops.clamp(ops.add(ops.mul(x, ctx.attr("alpha", 0.2)), ctx.attr("beta", 0.5)), 0.0, 1.0)


@onnx_op("Mish", min_opset=18)
def _mish(ctx: NodeContext):
    x = ctx.input(0)
    return ops.mul(x, ops.tanh(_softplus(x)))


@onnx_op("Gelu", min_opset=20)
def _gelu(ctx: NodeContext):
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ctx.malformed(f"approximate must be 'none' or 'tanh', got {approx!r}")
    return ops.gelu(ctx.input(0), approximate=approx)


@onnx_op("Swish", min_opset=24)
def _swish(ctx: NodeContext):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.0)
    return ops.silu(x) if alpha == 1.0 else ops.mul(x, ops.sigmoid(ops.mul(x, alpha)))


@onnx_op("SwiGLU", min_opset=28)
def _swiglu(ctx: NodeContext):
    """Swish(a) * b with Swish's alpha; a and b of one shape (no broadcasting, as the spec says)."""
    a, b = ctx.input(0), ctx.input(1)
    if list(a.shape) != list(b.shape) or a.dtype != b.dtype:
        raise ctx.malformed(f"A and B must share shape and dtype, got {a.dtype}{list(map(str, a.shape))} "
                            f"and {b.dtype}{list(map(str, b.shape))}")
    alpha = ctx.attr("alpha", 1.0)
    swish = ops.silu(a) if alpha == 1.0 else ops.mul(a, ops.sigmoid(ops.mul(a, alpha)))
    return ops.mul(swish, b)


@onnx_op("Shrink", min_opset=9)
def _shrink(ctx: NodeContext):
    x = ctx.input(0)
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    if not x.dtype.is_float and (float(bias) != int(bias) or float(lambd) != int(lambd)):
        raise ctx.unsupported(f"non-integer bias/lambd on a {x.dtype} input")
    cast = (lambda v: v) if x.dtype.is_float else int
    lo = ops.where(ops.less(x, cast(-lambd)), ops.add(x, cast(bias)), 0)
    return ops.where(ops.greater(x, cast(lambd)), ops.sub(x, cast(bias)), lo)


# -- clip, where, cast ----------------------------------------------------------------------------

@onnx_op("Clip", min_opset=6)
def _clip_attr(ctx: NodeContext):
    return ops.clamp(ctx.input(0), ctx.attr("min", float("-inf")), ctx.attr("max", float("inf")))


@onnx_op("Clip", min_opset=11)
def _clip(ctx: NodeContext):
    x = ctx.input(0)
    bounds = []
    for i in (1, 2):
        if not ctx.has_input(i):
            bounds.append(None)
            continue
        c = ctx.const(i)
        bounds.append(c.reshape(-1)[0].item() if c is not None and c.size == 1 else ctx.input(i))
    lo, hi = bounds
    if all(b is None or not isinstance(b, Tensor) for b in bounds):
        if lo is not None and hi is not None and lo > hi:  # ONNX (and np.clip): every output is max
            return ops.expand(constant(np.asarray(hi, dtype=x.dtype.np)), x.shape)
        return ops.clamp(x, lo, hi)
    y = x if lo is None else ops.maximum(x, lo)
    return y if hi is None else ops.minimum(y, hi)


@onnx_op("Where", min_opset=9)
def _where(ctx: NodeContext):
    c, a, b = ctx.input(0), ctx.input(1), ctx.input(2)
    if c.dtype != DType.bool:
        raise ctx.malformed(f"condition must be bool, got {c.dtype}")
    return ops.where(c, a, b)


def _cast_to(ctx: NodeContext, x: Tensor, to: DType) -> Tensor:
    # saturate (opset 19+, default 1) decides only float -> float8 overflow; round_mode (opset 25+)
    # only the rounding to float8 e8m0
    mode = ctx.attr("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("up", "down", "nearest"):
        raise ctx.malformed(f"round_mode must be up, down or nearest, got {mode!r}")
    return x if x.dtype == to else ops.cast(x, to, saturate=bool(ctx.attr("saturate", 1)), round_mode=mode)


@onnx_op("Cast", min_opset=6)
def _cast(ctx: NodeContext):
    to = elem_dtype(ctx.attr("to"), f"{ctx.label}: attribute 'to'")
    return _cast_to(ctx, ctx.input(0), to)


@onnx_op("CastLike", min_opset=15)
def _cast_like(ctx: NodeContext):
    like = ctx.input(1)
    c = ctx.const(0)
    if c is not None:  # only the other input's dtype matters: a constant stays a constant
        return ctx.constant_value(_np_cast(c, like.dtype, bool(ctx.attr("saturate", 1))))
    return _cast_to(ctx, ctx.input(0), like.dtype)


@onnx_op("BitCast", min_opset=26)
def _bitcast(ctx: NodeContext):
    x = ctx.input(0)
    to = elem_dtype(ctx.attr("to"), f"{ctx.label}: attribute 'to'")
    try:
        return ops.bitcast(x, to, name=ctx.label)
    except DTypeError as e:
        raise ctx.unsupported(str(e)) from None


def _np_cast(a: np.ndarray, to: DType, saturate: bool = True) -> np.ndarray:
    """The IR cast's own reference (truncation toward zero, float8 saturation), at import time."""
    if as_dtype(a.dtype).is_low_float:
        a = a.astype(np.float32)  # float16/bfloat16/float8 compute in float32, as the cast kernel does
    return np.asarray(_ew_cast(a, CastAttrs(to, saturate))).astype(to.np)

@onnx_op("IsInf", min_opset=10)
def _isinf(ctx: NodeContext):
    x = ctx.input(0)
    y = ops.isinf(x)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    if pos and neg:
        return y
    if not pos and not neg:
        return ops.logical_and(y, False)
    return ops.logical_and(y, ops.greater(x, 0.0) if pos else ops.less(x, 0.0))


@onnx_op("Mod", min_opset=10)
def _mod(ctx: NodeContext):
    a, b = ctx.input(0), ctx.input(1)
    return ops.fmod(a, b) if ctx.attr("fmod", 0) else ops.mod(a, b)
