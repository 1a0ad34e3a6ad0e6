"""Element-wise ops: unary, binary with numpy broadcasting, where, comparisons, cast."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

import numpy as np
from scipy import special

from ..errors import DTypeError, ShapeError
from ..ir.dims import Dim, IntImm
from ..ir.dtype import DType, as_dtype, compute_dtype
from ..ir.op import NoAttrs, OpKind
from ..ir.tensor import Tensor, constant
from .registry import Category, make_op1, register

__all__ = ["GeluAttrs", "ClampAttrs", "CastAttrs", "relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "neg", "erf", "logical_not", "clamp", "relu6", "cast", "bitcast", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "where",
           "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1",
           "log1p", "floor", "ceil", "round", "sign", "isnan", "isinf", "bitwise_not", "mod", "fmod",
           "bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right"]

Operand = Union[Tensor, int, float, bool]


@dataclasses.dataclass(frozen=True)
class GeluAttrs:
    approximate: str = "none"  # "none" (erf) or "tanh"


@dataclasses.dataclass(frozen=True)
class ClampAttrs:
    min: Optional[float] = None
    max: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class CastAttrs:
    dtype: DType
    # ONNX Cast (opset 19+) to a float8 type: out-of-range values clamp to the largest finite value
    # (True, ONNX's default) or overflow to inf/NaN (False, numpy's astype). Other targets ignore it.
    saturate: bool = True
    # ONNX BitCast: the same bits read as `dtype` (of the same width), not a conversion of the value
    bitcast: bool = False
    # ONNX Cast (opset 25+) to float8 e8m0: "up" (the default), "down" or "nearest"
    round_mode: str = "up"


E8M0_ROUND_MODES = ("up", "down", "nearest")  # codes 0, 1, 2 of ait::e8m0_cast (e8m0.h)


def _to_e8m0(x, saturate: bool, mode: str):
    """onnx's rule (numpy_helper.to_float8e8m0) on the float32 bits: the exponent field, rounded
    up by the mantissa as `mode` says; NaN/inf give 0xff; saturate keeps 2^127 from rounding to NaN.
    The sign is ignored, as there."""
    import ml_dtypes
    u = np.array(x, dtype=np.float32, order="C").view(np.uint32)
    e = ((u >> 23) & 0xFF).astype(np.uint16)
    if mode == "up":
        up = (u & 0x7FFFFF) != 0
    elif mode == "nearest":
        up = ((u & 0x400000) != 0) & (((u & 0x200000) != 0) | ((u & 0x1FFFFF) != 0) | (e > 0))
    else:
        up = np.zeros(u.shape, bool)
    up &= e != 0xFF
    if saturate:
        up &= e != 0xFE
    return (e + up).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


# Types whose compute value holds their stored bits (not float16/bfloat16/float8, which compute in
# float32, nor the sub-byte types): what bitcast reinterprets.
_BITCASTABLE = (DType.float32, DType.float64, DType.int8, DType.int16, DType.int32, DType.int64, DType.uint8,
                DType.uint16, DType.uint32, DType.uint64, DType.bool)


# -- broadcasting ---------------------------------------------------------------------------

def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """numpy broadcasting over symbolic dims: equal dims, or 1 against anything."""
    ndim = max(len(s) for s in shapes)
    out: list[Dim] = []
    for axis in range(ndim):
        dims = [s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0]
        cur: Dim = IntImm(1)
        for d in dims:
            if d == 1:
                continue
            if cur == 1:
                cur = d
            elif cur != d:
                raise ShapeError(f"cannot broadcast dim {axis - ndim} ({cur} vs {d}) across shapes "
                                 + " and ".join("[" + ", ".join(map(str, s)) + "]" for s in shapes))
        out.append(cur)
    return tuple(out)


def as_operand(x: Operand, like: Optional[Tensor]) -> Tensor:
    """A Python scalar becomes a 0-d constant of the other operand's dtype."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return constant(x, dtype=like.dtype if like is not None else None)
    if isinstance(x, (bool, int, float, np.number)):
        if like is None:
            raise DTypeError("an element-wise op needs at least one Tensor operand")
        if isinstance(x, float) and not float(x).is_integer() and not like.dtype.is_float:
            raise DTypeError(f"float scalar {x} with a {like.dtype} tensor")
        if like.dtype.is_int and not np.iinfo(like.dtype.np).min <= x <= np.iinfo(like.dtype.np).max:
            raise DTypeError(f"scalar {x} does not fit a {like.dtype} tensor")
        return constant(np.asarray(x, dtype=like.dtype.np), dtype=like.dtype)
    raise DTypeError(f"element-wise operand of type {type(x).__name__}")


# -- unary ----------------------------------------------------------------------------------

_TO_BOOL = {OpKind.ISNAN, OpKind.ISINF}
_INT_ONLY = {OpKind.BITWISE_NOT, OpKind.BITWISE_AND, OpKind.BITWISE_OR, OpKind.BITWISE_XOR, OpKind.SHIFT_LEFT,
             OpKind.SHIFT_RIGHT}


def _make_infer_unary(kind: OpKind):
    def infer(inputs, attrs):
        (x,) = inputs
        if kind in _INT_ONLY and not x.dtype.is_int:
            raise DTypeError(f"needs an integer operand, got {x.dtype}")
        if kind in _TO_BOOL:
            return [(x.shape, DType.bool)]
        return [(x.shape, attrs.dtype if isinstance(attrs, CastAttrs) else x.dtype)]
    return infer


def _sign(x):
    return np.sign(x).astype(x.dtype)


def _gelu(x, a):
    c = x.dtype.type  # constants in the compute type: float32 rounds them, float64 keeps them
    if a.approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(c(np.sqrt(2.0 / np.pi)) * (x + c(0.044715) * x ** 3)))
    return 0.5 * x * (1.0 + special.erf(x / c(np.sqrt(2.0))))


def _clamp(x, a):
    lo = -np.inf if a.min is None else a.min
    hi = np.inf if a.max is None else a.max
    return np.clip(x, lo, hi).astype(x.dtype)


def _cast(x, a):
    if a.bitcast:
        return np.array(x, order="C").view(a.dtype.np)  # (ascontiguousarray would make a 0-d array 1-d)
    if a.dtype is DType.float8_e8m0fnu:
        return _to_e8m0(x.astype(np.float32), a.saturate, a.round_mode)
    if a.dtype.is_int and x.dtype.kind == "f":
        x = np.trunc(x)  # C semantics: toward zero
        if a.dtype.is_subbyte_int:
            # as ml_dtypes (onnx's reference, astype): a value outside the range (NaN too) gives 0
            lo, hi = a.dtype.int_range
            with np.errstate(invalid="ignore"):
                x = np.where((x >= lo) & (x <= hi), x, 0).astype(x.dtype)
    if a.dtype.is_fp8:
        if a.saturate and x.dtype.kind == "f":  # as onnx's reference (numpy_helper.saturate_cast)
            m = np.finfo(a.dtype.np).max
            x = np.clip(x, -m, m).astype(x.dtype)
        # float32 first, as the kernels (compute type float) do; exact for every float32 operand
        return x.astype(np.float32).astype(a.dtype.np)
    return x.astype(compute_dtype(a.dtype))


_UNARY = {
    OpKind.RELU: (lambda x, a: np.maximum(x, x.dtype.type(0)), NoAttrs, False),
    OpKind.CLAMP: (_clamp, ClampAttrs, False),
    OpKind.GELU: (_gelu, GeluAttrs, True),
    OpKind.SILU: (lambda x, a: x * special.expit(x), NoAttrs, True),
    OpKind.SIGMOID: (lambda x, a: special.expit(x), NoAttrs, True),
    OpKind.TANH: (lambda x, a: np.tanh(x), NoAttrs, True),
    OpKind.HARDSWISH: (lambda x, a: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0, NoAttrs, True),
    OpKind.EXP: (lambda x, a: np.exp(x), NoAttrs, True),
    OpKind.LOG: (lambda x, a: np.log(x), NoAttrs, True),
    OpKind.SQRT: (lambda x, a: np.sqrt(x), NoAttrs, True),
    OpKind.RSQRT: (lambda x, a: 1.0 / np.sqrt(x), NoAttrs, True),
    OpKind.RECIPROCAL: (lambda x, a: 1.0 / x, NoAttrs, True),
    OpKind.ABS: (lambda x, a: np.abs(x), NoAttrs, False),
    OpKind.NEG: (lambda x, a: -x, NoAttrs, False),
    OpKind.ERF: (lambda x, a: special.erf(x), NoAttrs, True),
    OpKind.CAST: (_cast, CastAttrs, False),
    OpKind.LOGICAL_NOT: (lambda x, a: np.logical_not(x), NoAttrs, False),
    OpKind.SIN: (lambda x, a: np.sin(x), NoAttrs, True),
    OpKind.COS: (lambda x, a: np.cos(x), NoAttrs, True),
    OpKind.TAN: (lambda x, a: np.tan(x), NoAttrs, True),
    OpKind.ASIN: (lambda x, a: np.arcsin(x), NoAttrs, True),
    OpKind.ACOS: (lambda x, a: np.arccos(x), NoAttrs, True),
    OpKind.ATAN: (lambda x, a: np.arctan(x), NoAttrs, True),
    OpKind.SINH: (lambda x, a: np.sinh(x), NoAttrs, True),
    OpKind.COSH: (lambda x, a: np.cosh(x), NoAttrs, True),
    OpKind.ASINH: (lambda x, a: np.arcsinh(x), NoAttrs, True),
    OpKind.ACOSH: (lambda x, a: np.arccosh(x), NoAttrs, True),
    OpKind.ATANH: (lambda x, a: np.arctanh(x), NoAttrs, True),
    OpKind.EXPM1: (lambda x, a: np.expm1(x), NoAttrs, True),
    OpKind.LOG1P: (lambda x, a: np.log1p(x), NoAttrs, True),
    OpKind.FLOOR: (lambda x, a: np.floor(x), NoAttrs, True),
    OpKind.CEIL: (lambda x, a: np.ceil(x), NoAttrs, True),
    OpKind.ROUND: (lambda x, a: np.round(x), NoAttrs, True),  # numpy rounds half to even
    OpKind.SIGN: (lambda x, a: _sign(x), NoAttrs, False),
    OpKind.ISNAN: (lambda x, a: np.isnan(x), NoAttrs, True),
    OpKind.ISINF: (lambda x, a: np.isinf(x), NoAttrs, True),
    OpKind.BITWISE_NOT: (lambda x, a: np.invert(x), NoAttrs, False),
}

for _kind, (_fn, _attrs, _float) in _UNARY.items():
    register(_kind, Category.ELEMENTWISE, _attrs, _make_infer_unary(_kind),
             (lambda fn: lambda args, attrs, ctx: [np.asarray(fn(args[0], attrs))])(_fn),
             num_inputs=(1, 1), float_only=_float)


def _unary(kind: OpKind, x: Tensor, attrs=None, name=None) -> Tensor:
    if kind == OpKind.LOGICAL_NOT and isinstance(x, Tensor) and x.dtype != DType.bool:
        raise DTypeError(f"logical_not needs a bool operand, got {x.dtype}")
    # numpy has no negation of bools, and relu/clamp/abs of a mask is a user error, not a no-op
    if kind not in (OpKind.LOGICAL_NOT, OpKind.CAST) and isinstance(x, Tensor) and x.dtype == DType.bool:
        raise DTypeError(f"{kind.value} needs a numeric operand, got bool")
    return make_op1(kind, [x], attrs if attrs is not None else NoAttrs(), name)


def relu(x: Tensor, name=None) -> Tensor: return _unary(OpKind.RELU, x, name=name)
def gelu(x: Tensor, approximate: str = "none", name=None) -> Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(OpKind.GELU, x, GeluAttrs(approximate), name)
def silu(x: Tensor, name=None) -> Tensor: return _unary(OpKind.SILU, x, name=name)
def sigmoid(x: Tensor, name=None) -> Tensor: return _unary(OpKind.SIGMOID, x, name=name)
def tanh(x: Tensor, name=None) -> Tensor: return _unary(OpKind.TANH, x, name=name)
def hardswish(x: Tensor, name=None) -> Tensor: return _unary(OpKind.HARDSWISH, x, name=name)
def exp(x: Tensor, name=None) -> Tensor: return _unary(OpKind.EXP, x, name=name)
def log(x: Tensor, name=None) -> Tensor: return _unary(OpKind.LOG, x, name=name)
def sqrt(x: Tensor, name=None) -> Tensor: return _unary(OpKind.SQRT, x, name=name)
def rsqrt(x: Tensor, name=None) -> Tensor: return _unary(OpKind.RSQRT, x, name=name)
def reciprocal(x: Tensor, name=None) -> Tensor: return _unary(OpKind.RECIPROCAL, x, name=name)
def abs(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ABS, x, name=name)  # noqa: A001
def neg(x: Tensor, name=None) -> Tensor: return _unary(OpKind.NEG, x, name=name)
def erf(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ERF, x, name=name)
def logical_not(x: Tensor, name=None) -> Tensor: return _unary(OpKind.LOGICAL_NOT, x, name=name)
def sin(x: Tensor, name=None) -> Tensor: return _unary(OpKind.SIN, x, name=name)
def cos(x: Tensor, name=None) -> Tensor: return _unary(OpKind.COS, x, name=name)
def tan(x: Tensor, name=None) -> Tensor: return _unary(OpKind.TAN, x, name=name)
def asin(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ASIN, x, name=name)
def acos(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ACOS, x, name=name)
def atan(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ATAN, x, name=name)
def sinh(x: Tensor, name=None) -> Tensor: return _unary(OpKind.SINH, x, name=name)
def cosh(x: Tensor, name=None) -> Tensor: return _unary(OpKind.COSH, x, name=name)
def asinh(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ASINH, x, name=name)
def acosh(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ACOSH, x, name=name)
def atanh(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ATANH, x, name=name)
def expm1(x: Tensor, name=None) -> Tensor: return _unary(OpKind.EXPM1, x, name=name)
def log1p(x: Tensor, name=None) -> Tensor: return _unary(OpKind.LOG1P, x, name=name)
def floor(x: Tensor, name=None) -> Tensor: return _unary(OpKind.FLOOR, x, name=name)
def ceil(x: Tensor, name=None) -> Tensor: return _unary(OpKind.CEIL, x, name=name)
def round(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ROUND, x, name=name)  # noqa: A001 - half to even
def sign(x: Tensor, name=None) -> Tensor: return _unary(OpKind.SIGN, x, name=name)
def isnan(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ISNAN, x, name=name)
def isinf(x: Tensor, name=None) -> Tensor: return _unary(OpKind.ISINF, x, name=name)
def bitwise_not(x: Tensor, name=None) -> Tensor: return _unary(OpKind.BITWISE_NOT, x, name=name)


def clamp(x: Tensor, min: Optional[float] = None, max: Optional[float] = None, name=None) -> Tensor:  # noqa: A002
    if min is not None and max is not None and min > max:
        raise ValueError(f"clamp: min {min} > max {max}")
    return _unary(OpKind.CLAMP, x, ClampAttrs(None if min is None else float(min), None if max is None else float(max)), name)


def relu6(x: Tensor, name=None) -> Tensor:
    return clamp(x, 0.0, 6.0, name=name)


def cast(x: Tensor, dtype, name=None, saturate: bool = True, round_mode: str = "up") -> Tensor:
    """Convert to `dtype` (floats to integers truncate toward zero). `saturate` matters only for a
    float8 target: clamp out-of-range values to its largest finite value (ONNX Cast's default)."""
    try:
        dt = as_dtype(dtype)
    except DTypeError as e:
        raise DTypeError(f"cast{f' {name!r}' if name else ''}: {e}") from None
    if round_mode not in E8M0_ROUND_MODES:
        raise ValueError(f"cast: round_mode must be one of {E8M0_ROUND_MODES}, got {round_mode!r}")
    if dt is not DType.float8_e8m0fnu:
        round_mode = "up"  # matters only for e8m0: one spelling keeps equal casts equal
    return _unary(OpKind.CAST, x, CastAttrs(dt, bool(saturate), round_mode=round_mode), name)


def bitcast(x: Tensor, dtype, name=None) -> Tensor:
    """x's bits read as `dtype`, which has the same width (ONNX BitCast). float16, bfloat16, float8
    and sub-byte types are refused: their kernels compute in float32/int32, not in their bits."""
    dt = as_dtype(dtype)
    for d, what in ((x.dtype, "operand"), (dt, "target")):
        if d not in _BITCASTABLE or (what == "target" and d is DType.bool):
            raise DTypeError(f"bitcast{f' {name!r}' if name else ''}: {what} dtype {d} is not supported "
                             f"(supported: {', '.join(t.value for t in _BITCASTABLE)}; bool only as the operand)")
    if x.dtype.itemsize != dt.itemsize:
        raise DTypeError(f"bitcast{f' {name!r}' if name else ''}: {x.dtype} and {dt} differ in width")
    return _unary(OpKind.CAST, x, CastAttrs(dt, True, bitcast=True), name)


# -- binary ---------------------------------------------------------------------------------

_COMPARE = {OpKind.EQUAL, OpKind.NOT_EQUAL, OpKind.LESS, OpKind.LESS_EQUAL, OpKind.GREATER,
            OpKind.GREATER_EQUAL}
_LOGICAL = {OpKind.LOGICAL_AND, OpKind.LOGICAL_OR}
_NO_BOOL = {OpKind.SUB, OpKind.DIV, OpKind.MOD, OpKind.FMOD}  # as in torch; bool add/mul/max/min are or/and


def _make_infer_binary(kind: OpKind):
    def infer(inputs, attrs):
        a, b = inputs
        if a.dtype != b.dtype:
            raise DTypeError(f"operand dtypes differ: {a.dtype} vs {b.dtype}")
        if kind in _LOGICAL and a.dtype != DType.bool:
            raise DTypeError(f"needs bool operands, got {a.dtype}")
        if kind in _NO_BOOL and a.dtype == DType.bool:  # numpy's bool subtract raises at run time
            raise DTypeError(f"needs numeric operands, got {a.dtype}")
        if kind == OpKind.POW and not a.dtype.is_float:
            raise DTypeError(f"needs float operands, got {a.dtype}")
        if kind in _INT_ONLY and not a.dtype.is_int:
            raise DTypeError(f"needs integer operands, got {a.dtype}")
        out_dtype = DType.bool if kind in _COMPARE else a.dtype
        return [(broadcast_shapes(a.shape, b.shape), out_dtype)]
    return infer


def _div(a, b):
    if a.dtype.kind in "iu":  # integer division truncates toward zero, as in C
        # From the floor quotient, not |a| // |b|: |INT_MIN| overflows (int8 -128 / 32 gave 4).
        safe = np.where(b == 0, 1, b).astype(a.dtype)
        q = np.floor_divide(a, safe)
        q = q + ((np.mod(a, safe) != 0) & ((a < 0) != (safe < 0))).astype(a.dtype)
        return np.where(b == 0, 0, q).astype(a.dtype)
    return a / b


def _mod(a, b):
    """Floor modulo (sign of the divisor); an integer modulo by 0 gives 0, as the kernels do."""
    if a.dtype.kind in "iu":
        return np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return np.mod(a, b)


def _fmod(a, b):
    """C fmod (sign of the dividend); an integer fmod by 0 gives 0."""
    if a.dtype.kind in "iu":
        return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return np.fmod(a, b)


def _shift(a, b, fn):
    """numpy's shift, with a shift by the width or more (or a negative one) defined as ONNX BitShift
    (opset 28) does: 0, or -1 for a negative operand shifted right (numpy leaves it to the CPU)."""
    bits = 8 * a.dtype.itemsize
    big = (b >= bits) | (b < 0)
    r = fn(a, np.where(big, 0, b).astype(a.dtype))
    over = np.where((a < 0) & (fn is np.right_shift), -1, 0).astype(a.dtype) if a.dtype.kind == "i" else 0
    return np.where(big, over, r).astype(a.dtype)


_BINARY = {
    OpKind.ADD: np.add, OpKind.SUB: np.subtract, OpKind.MUL: np.multiply, OpKind.DIV: _div,
    OpKind.POW: np.power, OpKind.MAXIMUM: np.maximum, OpKind.MINIMUM: np.minimum,
    OpKind.EQUAL: np.equal, OpKind.NOT_EQUAL: np.not_equal, OpKind.LESS: np.less,
    OpKind.LESS_EQUAL: np.less_equal, OpKind.GREATER: np.greater, OpKind.GREATER_EQUAL: np.greater_equal,
    OpKind.LOGICAL_AND: np.logical_and, OpKind.LOGICAL_OR: np.logical_or,
    OpKind.MOD: _mod, OpKind.FMOD: _fmod, OpKind.BITWISE_AND: np.bitwise_and,
    OpKind.BITWISE_OR: np.bitwise_or, OpKind.BITWISE_XOR: np.bitwise_xor,
    OpKind.SHIFT_LEFT: lambda a, b: _shift(a, b, np.left_shift), OpKind.SHIFT_RIGHT: lambda a, b: _shift(a, b, np.right_shift),
}

for _kind, _fn in _BINARY.items():
    register(_kind, Category.ELEMENTWISE, NoAttrs, _make_infer_binary(_kind),
             (lambda fn: lambda args, attrs, ctx: [np.asarray(fn(args[0], args[1]))])(_fn),
             num_inputs=(2, 2))


def _binary(kind: OpKind, a: Operand, b: Operand, name=None) -> Tensor:
    ta = a if isinstance(a, Tensor) else None
    tb = b if isinstance(b, Tensor) else None
    try:
        a_t = as_operand(a, tb if ta is None else ta)
        b_t = as_operand(b, a_t)
    except DTypeError as e:  # name the op, as inference errors do
        raise DTypeError(f"{kind.value}{f' {name!r}' if name else ''}: {e}") from None
    return make_op1(kind, [a_t, b_t], NoAttrs(), name)


def add(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.ADD, a, b, name)
def sub(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.SUB, a, b, name)
def mul(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.MUL, a, b, name)
def div(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.DIV, a, b, name)
def pow(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.POW, a, b, name)  # noqa: A001
def maximum(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.MAXIMUM, a, b, name)
def minimum(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.MINIMUM, a, b, name)
def equal(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.EQUAL, a, b, name)
def not_equal(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.NOT_EQUAL, a, b, name)
def less(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.LESS, a, b, name)
def less_equal(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.LESS_EQUAL, a, b, name)
def greater(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.GREATER, a, b, name)
def greater_equal(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.GREATER_EQUAL, a, b, name)
def logical_and(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.LOGICAL_AND, a, b, name)
def logical_or(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.LOGICAL_OR, a, b, name)
def mod(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.MOD, a, b, name)
def fmod(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.FMOD, a, b, name)
def bitwise_and(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.BITWISE_AND, a, b, name)
def bitwise_or(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.BITWISE_OR, a, b, name)
def bitwise_xor(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.BITWISE_XOR, a, b, name)
def shift_left(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.SHIFT_LEFT, a, b, name)
def shift_right(a: Operand, b: Operand, name=None) -> Tensor: return _binary(OpKind.SHIFT_RIGHT, a, b, name)


# -- where ----------------------------------------------------------------------------------

def _infer_where(inputs, attrs):
    c, a, b = inputs
    if c.dtype != DType.bool:
        raise DTypeError(f"condition must be bool, got {c.dtype}")
    if a.dtype != b.dtype:
        raise DTypeError(f"branch dtypes differ: {a.dtype} vs {b.dtype}")
    return [(broadcast_shapes(c.shape, a.shape, b.shape), a.dtype)]


register(OpKind.WHERE, Category.ELEMENTWISE, NoAttrs, _infer_where,
         lambda args, attrs, ctx: [np.where(args[0], args[1], args[2])], num_inputs=(3, 3))


def where(cond: Tensor, a: Operand, b: Operand, name=None) -> Tensor:
    ta = a if isinstance(a, Tensor) else (b if isinstance(b, Tensor) else None)
    if ta is None:
        raise DTypeError("where: at least one branch must be a Tensor")
    try:
        a_t, b_t = as_operand(a, ta), as_operand(b, ta)
    except DTypeError as e:
        raise DTypeError(f"where: {e}") from None
    return make_op1(OpKind.WHERE, [cond, a_t, b_t], NoAttrs(), name)
