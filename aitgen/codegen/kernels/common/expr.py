"""A fused expression DAG (ops/fused.py Expr) as C++: one inline function per node and the
statements that chain them, over operands of their compute type.

Rendered once for every backend: the CPU templates, the CUDA templates (qualifier AIT_HD, i.e.
__host__ __device__) and GEMM/conv epilogues and norm prologues all call the same functions, so
the CPU tier checks the math every backend runs. Only std:: functions and the ait:: math of
cpu_vmath.h / cuda_math.cuh appear, which both compile.
"""
from __future__ import annotations

import re

import numpy as np

from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ...cexpr import COMPUTE

_K0 = "0.7978845608028654f"  # sqrt(2/pi)

# C++ of each op over compute-type operands a0, a1, a2 (T: the compute type).
_EXPR = {
    OpKind.RELU: "(a0 > T(0) || a0 != a0 ? a0 : T(0))",  # NaN stays NaN (numpy's maximum)
    # Vectorisable forms from cpu_vmath.h: a libm call in the loop body keeps it scalar.
    OpKind.SILU: "a0 * ait::sigmoid_poly(a0)",
    OpKind.SIGMOID: "ait::sigmoid_poly(a0)",
    OpKind.TANH: "ait::tanh_poly(a0)",
    OpKind.HARDSWISH: "a0 * std::min(std::max(a0 + T(3), T(0)), T(6)) / T(6)",
    OpKind.EXP: "std::exp(a0)",
    OpKind.LOG: "std::log(a0)",
    OpKind.SQRT: "std::sqrt(a0)",
    OpKind.RSQRT: "1.0f / std::sqrt(a0)",
    OpKind.RECIPROCAL: "1.0f / a0",
    OpKind.ABS: "(a0 < T(0) ? -a0 : a0)",
    OpKind.NEG: "-a0",
    OpKind.ERF: "ait::erf_poly(a0)",
    OpKind.LOGICAL_NOT: "!a0",
    OpKind.CAST: "a0",
    OpKind.ADD: "a0 + a1",
    OpKind.SUB: "a0 - a1",
    OpKind.MUL: "a0 * a1",
    OpKind.POW: "std::pow(a0, a1)",
    OpKind.MAXIMUM: "(a0 > a1 || a0 != a0 ? a0 : a1)",  # numpy propagates NaN
    OpKind.MINIMUM: "(a0 < a1 || a0 != a0 ? a0 : a1)",
    OpKind.EQUAL: "a0 == a1",
    OpKind.NOT_EQUAL: "a0 != a1",
    OpKind.LESS: "a0 < a1",
    OpKind.LESS_EQUAL: "a0 <= a1",
    OpKind.GREATER: "a0 > a1",
    OpKind.GREATER_EQUAL: "a0 >= a1",
    OpKind.LOGICAL_AND: "a0 && a1",
    OpKind.LOGICAL_OR: "a0 || a1",
    OpKind.WHERE: "(a0 ? a1 : a2)",
    # Added for the ONNX importer: std:: functions only, so CUDA device code compiles them too.
    OpKind.SIN: "std::sin(a0)",
    OpKind.COS: "std::cos(a0)",
    OpKind.TAN: "std::tan(a0)",
    OpKind.ASIN: "std::asin(a0)",
    OpKind.ACOS: "std::acos(a0)",
    OpKind.ATAN: "std::atan(a0)",
    OpKind.SINH: "std::sinh(a0)",
    OpKind.COSH: "std::cosh(a0)",
    OpKind.ASINH: "std::asinh(a0)",
    OpKind.ACOSH: "std::acosh(a0)",
    OpKind.ATANH: "std::atanh(a0)",
    OpKind.EXPM1: "std::expm1(a0)",
    OpKind.LOG1P: "std::log1p(a0)",
    OpKind.FLOOR: "std::floor(a0)",
    OpKind.CEIL: "std::ceil(a0)",
    OpKind.ROUND: "std::nearbyint(a0)",  # the default rounding mode: half to even, as numpy
    OpKind.SIGN: "(a0 != a0 ? a0 : T((a0 > T(0)) - (a0 < T(0))))",  # NaN stays NaN
    OpKind.ISNAN: "(a0 != a0)",
    OpKind.ISINF: "(a0 == INFINITY || a0 == -INFINITY)",
    OpKind.BITWISE_NOT: "T(~a0)",
    OpKind.BITWISE_AND: "T(a0 & a1)",
    OpKind.BITWISE_OR: "T(a0 | a1)",
    OpKind.BITWISE_XOR: "T(a0 ^ a1)",
}

# Integer and float spellings of the two remainders; an integer remainder by 0 gives 0 (the
# oracle does the same) instead of a trap.
_MOD_FLOAT = ("(std::fmod(a0, a1) != T(0) && ((std::fmod(a0, a1) < T(0)) != (a1 < T(0)))"
              " ? std::fmod(a0, a1) + a1 : std::fmod(a0, a1))")
_MOD_INT = "(a1 == T(0) ? T(0) : (a0 % a1 != T(0) && ((a0 % a1 < T(0)) != (a1 < T(0))) ? T(a0 % a1 + a1) : T(a0 % a1)))"


def op_expr(op: Op) -> str:
    """The op's math as a C++ expression of a0.. in the operands' compute type."""
    return node_expr(op.kind, op.attrs, [t.dtype for t in op.inputs], op.outputs[0].dtype)


_FLOAT_LITERAL = re.compile(r"(\b\d+\.\d*(?:e[-+]?\d+)?)f\b")


def node_expr(kind: OpKind, a, operand_dtypes: list[DType], out_dtype: DType) -> str:
    """One element-wise op (of a graph or of a fused Expr) as C++ over a0.., type T."""
    e = _node_expr(kind, a, operand_dtypes, out_dtype)
    if node_compute_type(kind, operand_dtypes) == "double":
        # float64 computes in double: float32 literals would round its constants (sqrt(2/pi), ...)
        e = _FLOAT_LITERAL.sub(r"\1", e)
    return e


def _fp8_saturate(out_dtype: DType) -> str:
    """ONNX Cast's saturate=1 to a float8 type, as onnx's reference computes it: clip to the finite
    range (infinities too), NaN stays NaN; the store then rounds to nearest even."""
    m = _lit(float(np.finfo(out_dtype.np).max))
    return f"(a0 != a0 ? a0 : (a0 > T({m}) ? T({m}) : (a0 < -T({m}) ? -T({m}) : a0)))"


# Ops whose float form propagates NaN by `a0 != a0`: their form for integer operands.
_NAN_GUARDED = {OpKind.RELU: "(a0 > T(0) ? a0 : T(0))", OpKind.MAXIMUM: "(a0 > a1 ? a0 : a1)",
                OpKind.MINIMUM: "(a0 < a1 ? a0 : a1)", OpKind.SIGN: "T((a0 > T(0)) - (a0 < T(0)))"}


def _node_expr(kind: OpKind, a, operand_dtypes: list[DType], out_dtype: DType) -> str:
    k = kind
    if k is OpKind.GELU:
        if a.approximate == "tanh":
            return f"0.5f * a0 * (1.0f + ait::tanh_poly({_K0} * (a0 + 0.044715f * a0 * a0 * a0)))"
        return "ait::gelu_erf(a0)"
    if k is OpKind.CLAMP:
        lo = "a0" if a.min is None else f"std::max(a0, T({_lit(a.min)}))"
        return lo if a.max is None else f"std::min({lo}, T({_lit(a.max)}))"
    if k is OpKind.DIV:
        return "a0 / a1" if operand_dtypes[0].is_float else "(a1 == T(0) ? T(0) : T(a0 / a1))"
    if k is OpKind.CAST and a.bitcast:
        # same width (ops.bitcast checks); integers convert modulo 2^width on return and store,
        # which keeps their bits, so only a float on either side needs the reinterpretation
        if out_dtype.is_float or operand_dtypes[0].is_float:
            return f"__builtin_bit_cast({COMPUTE[out_dtype]}, a0)"
        return "a0"
    if k is OpKind.CAST and out_dtype is DType.float8_e8m0fnu:
        # mode codes of ait::e8m0_cast (e8m0.h), ops/elementwise.py E8M0_ROUND_MODES' order
        mode = ("up", "down", "nearest").index(a.round_mode)
        return (f"ait::e8m0_cast(static_cast<float>(a0), {mode}, "
                f"{'true' if a.saturate else 'false'})")
    if k is OpKind.CAST and out_dtype is DType.bool:
        return "a0 != T(0)"
    if k is OpKind.CAST and out_dtype.is_fp8 and a.saturate and operand_dtypes[0].is_float:
        return _fp8_saturate(out_dtype)
    if k is OpKind.CAST and out_dtype.is_subbyte_int and operand_dtypes[0].is_float:
        # ml_dtypes' rule (the oracle's): truncate toward zero; out of range or NaN gives 0
        lo, hi = out_dtype.int_range
        return f"(a0 > T({lo - 1}) && a0 < T({hi + 1}) ? a0 : T(0))"
    if k in (OpKind.SHIFT_LEFT, OpKind.SHIFT_RIGHT):
        # The stored width decides: a narrow type computes in 32 bits, so shift counts up to 31 wrap
        # correctly when stored; beyond the width C++ leaves it undefined and the oracle says 0 (-1
        # for a negative value shifted right).
        # A signed left shift goes through the unsigned type: bits past the sign bit are dropped
        # without signed-overflow UB.
        d = operand_dtypes[0]
        w = 8 * d.itemsize
        if k is OpKind.SHIFT_LEFT:
            u = "uint64_t" if COMPUTE[d] in ("int64_t", "uint64_t") else "uint32_t"
            return f"(a1 >= T({w}) || a1 < T(0) ? T(0) : T(static_cast<{u}>(a0) << a1))"
        over = "T(0)" if d.is_unsigned else "(a0 < T(0) ? T(-1) : T(0))"
        return f"(a1 >= T({w}) || a1 < T(0) ? {over} : T(a0 >> a1))"
    if k in _NAN_GUARDED and not operand_dtypes[0].is_float:
        # an integer is never NaN: the guard is a self-comparison g++ -Wall warns about
        return _NAN_GUARDED[k]
    if k is OpKind.MOD:
        return _MOD_FLOAT if operand_dtypes[0].is_float else _MOD_INT
    if k is OpKind.FMOD:
        return "std::fmod(a0, a1)" if operand_dtypes[0].is_float else "(a1 == T(0) ? T(0) : T(a0 % a1))"
    return _EXPR[k]


def node_compute_type(kind: OpKind, operand_dtypes: list[DType]) -> str:
    """T of a node: its operands' compute type (where: the branches')."""
    return COMPUTE[operand_dtypes[-1]] if kind is OpKind.WHERE else COMPUTE[operand_dtypes[0]]


def expr_cpp(expr, input_dtypes: list[DType], prefix: str = "n", qualifier: str = "inline") -> dict:
    """C++ for a fused Expr: one inline function per node and the statements that chain them.

    Slots are `s<i>` variables of their compute type; the caller loads s0..s{num_inputs-1} and
    stores the output slots. Returns {"functions": [...], "statements": [...], "slot_types": [...]}.
    `qualifier` declares each function: "inline" on the CPU, "AIT_HD" (__host__ __device__) on CUDA.
    """
    slot_dtypes = expr.slot_dtypes(input_dtypes)
    functions, statements = [], []
    for i, n in enumerate(expr.nodes):
        slot = expr.num_inputs + i
        operand_dtypes = [slot_dtypes[a] for a in n.args]
        t = node_compute_type(n.kind, operand_dtypes)
        params = ", ".join(f"{COMPUTE[d]} a{j}" for j, d in enumerate(operand_dtypes))
        body = node_expr(n.kind, n.attrs, operand_dtypes, n.dtype)
        # T only where the expression names it: an unused alias is a -Wall warning in every build log
        alias = f"using T = {t}; " if re.search(r"\bT\b", body) else ""
        functions.append(f"{qualifier} {COMPUTE[n.dtype]} {prefix}{slot}({params}) {{ {alias}return {body}; }}")
        args = ", ".join(f"s{a}" for a in n.args)
        statements.append(f"const {COMPUTE[n.dtype]} s{slot} = {prefix}{slot}({args});")
    return {"functions": functions, "statements": statements, "slot_types": [COMPUTE[d] for d in slot_dtypes]}


def _lit(v: float) -> str:
    return repr(float(v)) + "f" if abs(v) != float("inf") else ("INFINITY" if v > 0 else "-INFINITY")


def c_float(v: float) -> str:
    """A float32 C++ literal of v (eps values)."""
    return repr(float(v)) + "f"
