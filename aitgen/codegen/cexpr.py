"""C++ spellings of dims and dtypes for generated code."""
from __future__ import annotations

from typing import Mapping, Union

from ..errors import LimitError
from ..ir.dims import MAX_SIZE, Dim, DimExpr, FloorDiv, IntImm, IntVar, as_dim
from ..ir.dtype import DType

# Storage type in memory, the type kernels compute in, and the C API's dtype code.
STORAGE = {DType.float32: "float", DType.float16: "ait::half", DType.bfloat16: "ait::bf16",
           DType.int8: "int8_t", DType.int32: "int32_t", DType.int64: "int64_t", DType.bool: "uint8_t",
           DType.float64: "double", DType.int16: "int16_t", DType.uint8: "uint8_t", DType.uint16: "uint16_t",
           DType.uint32: "uint32_t", DType.uint64: "uint64_t", DType.float8_e4m3fn: "ait::fp8_e4m3fn",
           DType.float8_e5m2: "ait::fp8_e5m2", DType.float8_e4m3fnuz: "ait::fp8_e4m3fnuz",
           DType.float8_e5m2fnuz: "ait::fp8_e5m2fnuz", DType.int4: "uint8_t", DType.uint4: "uint8_t",
           DType.int2: "uint8_t", DType.uint2: "uint8_t", DType.float4_e2m1fn: "ait::fp4_e2m1",
           DType.float8_e8m0fnu: "ait::fp8_e8m0"}
# Narrow integers compute in 32 bits (C's promotion) and wrap when stored, as numpy's fixed-width
# arithmetic does; unsigned ones compute unsigned, so products and differences wrap with defined
# behaviour (uint16 * uint16 overflows an int32).
COMPUTE = {DType.float32: "float", DType.float16: "float", DType.bfloat16: "float",
           DType.int8: "int32_t", DType.int32: "int32_t", DType.int64: "int64_t", DType.bool: "bool",
           DType.float64: "double", DType.int16: "int32_t", DType.uint8: "uint32_t", DType.uint16: "uint32_t",
           DType.uint32: "uint32_t", DType.uint64: "uint64_t", DType.float8_e4m3fn: "float",
           DType.float8_e5m2: "float", DType.float8_e4m3fnuz: "float", DType.float8_e5m2fnuz: "float",
           DType.int4: "int32_t", DType.uint4: "uint32_t", DType.int2: "int32_t", DType.uint2: "uint32_t",
           DType.float4_e2m1fn: "float", DType.float8_e8m0fnu: "float"}
CODE = {DType.float32: 0, DType.float16: 1, DType.bfloat16: 2, DType.int8: 3, DType.int32: 4,
        DType.int64: 5, DType.bool: 6, DType.float64: 7, DType.int16: 8, DType.uint8: 9, DType.uint16: 10,
        DType.uint32: 11, DType.uint64: 12, DType.float8_e4m3fn: 13, DType.float8_e5m2: 14,
        DType.float8_e4m3fnuz: 15, DType.float8_e5m2fnuz: 16, DType.int4: 17, DType.uint4: 18, DType.int2: 19,
        DType.uint2: 20, DType.float4_e2m1fn: 21, DType.float8_e8m0fnu: 22}


def _subbyte_bits(dtype: DType) -> int:
    return 4 if dtype in (DType.int4, DType.uint4) else 2


def load(dtype: DType, ptr: str, idx: str) -> str:
    """An element read as its compute type."""
    if dtype is DType.float64:
        return f"{ptr}[{idx}]"
    if dtype.is_float:
        return f"ait::to_f32({ptr}[{idx}])"
    if dtype == DType.bool:
        return f"({ptr}[{idx}] != 0)"
    if dtype.is_subbyte_int:  # the value sits in the low bits of its byte; signed ones sign-extend
        m, h = (1 << _subbyte_bits(dtype)) - 1, 1 << (_subbyte_bits(dtype) - 1)
        if dtype.is_unsigned:
            return f"static_cast<uint32_t>({ptr}[{idx}] & {m}u)"
        return f"((static_cast<int32_t>({ptr}[{idx}] & {m}) ^ {h}) - {h})"
    return f"static_cast<{COMPUTE[dtype]}>({ptr}[{idx}])"


def store(dtype: DType, value: str) -> str:
    """A compute-type value converted for storing."""
    if dtype is DType.float64:
        return f"static_cast<double>({value})"
    if dtype.is_float:
        return f"ait::from_f32<{STORAGE[dtype]}>({value})"
    if dtype == DType.bool:
        return f"static_cast<uint8_t>(({value}) ? 1 : 0)"
    if dtype.is_subbyte_int:  # wraps to the type's width (two's complement), as ml_dtypes' astype
        return f"static_cast<uint8_t>(static_cast<uint32_t>({value}) & {(1 << _subbyte_bits(dtype)) - 1}u)"
    return f"static_cast<{STORAGE[dtype]}>({value})"


def dim_expr(d: Union[Dim, int], var_index: Mapping[IntVar, int], what: str = "a size", vars_name: str = "v") -> str:
    """A Dim as an int64 C++ expression over the bound IntVars (all sizes are non-negative, so C
    division is floor division). LimitError (naming `what`) when the value, or any partial sum or
    product on the way to it, could pass MAX_SIZE over the IntVars' bounds: C++ would wrap it."""
    d = as_dim(d)
    worst = magnitude(d)
    if worst > MAX_SIZE:
        raise LimitError(f"{what} ({d}) can reach {worst} while it is computed, past the {MAX_SIZE} "
                         "(2**62 - 1) that generated code holds in an int64")
    return _render(d, var_index, vars_name)


def magnitude(d: Dim) -> int:
    """A bound on |x| for the value of d and every partial result of the expression dim_expr
    writes for it, over the IntVars' ranges."""
    if isinstance(d, IntImm):
        return abs(d.value)
    if isinstance(d, IntVar):
        return d.ub
    if isinstance(d, FloorDiv):
        return magnitude(d.num)  # the numerator is computed whole before the division
    total = 0
    for mono, c in DimExpr._poly(d).items():  # noqa: SLF001 - the polynomial is the expression
        m = abs(c)
        for a in mono:
            m *= max(1, magnitude(a))  # max(1, .): a factor 0 comes after the others are multiplied
        total += m
    return total


def _render(d: Dim, var_index: Mapping[IntVar, int], vars_name: str) -> str:
    if isinstance(d, IntImm):
        return f"INT64_C({d.value})"
    if isinstance(d, IntVar):
        if d not in var_index:
            raise KeyError(f"IntVar '{d.name}' is not bound by any input")
        return f"{vars_name}[{var_index[d]}]"
    if isinstance(d, FloorDiv):
        return f"({_render(d.num, var_index, vars_name)} / INT64_C({d.den}))"
    terms = []
    for mono, c in DimExpr._poly(d).items():  # noqa: SLF001 - the polynomial is the expression
        factors = [_render(a, var_index, vars_name) for a in mono]
        if c != 1 or not factors:
            factors.insert(0, f"INT64_C({c})")
        terms.append("*".join(factors))
    return "(" + " + ".join(terms) + ")"
