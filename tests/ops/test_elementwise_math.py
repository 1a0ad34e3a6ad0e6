"""The element-wise kinds added for the importers (trigonometry, rounding, sign, isnan/isinf,
remainders, bitwise) through the oracle against independent float64 `math` / Python integers.

Tolerances: float32 vs float64 maths of the same float32 inputs rtol 1e-5, atol 1e-6; float16 and
bfloat16 one storage ulp (rtol/atol 1e-3 and 8e-3). Rounding, sign, predicates, remainders of
integers and bitwise results are compared exactly.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from op_helpers import run1

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError

TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float16": dict(rtol=1e-3, atol=1e-3),
       "bfloat16": dict(rtol=8e-3, atol=8e-3)}
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _v(fn):
    return np.vectorize(fn, otypes=[np.float64])


def _round_half_even(v: float) -> float:
    return float(round(v))  # Python's round() is half to even


UNARY = {  # name -> (float64 maths, input range)
    "sin": (_v(math.sin), (-6, 6)), "cos": (_v(math.cos), (-6, 6)), "tan": (_v(math.tan), (-1.4, 1.4)),
    "asin": (_v(math.asin), (-0.99, 0.99)), "acos": (_v(math.acos), (-0.99, 0.99)), "atan": (_v(math.atan), (-5, 5)),
    "sinh": (_v(math.sinh), (-4, 4)), "cosh": (_v(math.cosh), (-4, 4)), "asinh": (_v(math.asinh), (-5, 5)),
    "acosh": (_v(math.acosh), (1.0, 6)), "atanh": (_v(math.atanh), (-0.95, 0.95)),
    "expm1": (_v(math.expm1), (-3, 3)), "log1p": (_v(math.log1p), (-0.9, 5)),
    "floor": (_v(math.floor), (-5, 5)), "ceil": (_v(math.ceil), (-5, 5)),
    "round": (_v(_round_half_even), (-5, 5)), "sign": (_v(lambda v: (v > 0) - (v < 0)), (-3, 3)),
}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math(name, dtype):
    maths, (lo, hi) = UNARY[name]
    x = ag.Tensor([4, 33], dtype, name="x")
    xv = np.random.default_rng(0).uniform(lo, hi, (4, 33)).astype(NP[dtype])
    if name in ("round", "floor", "ceil", "sign"):
        xv.flat[:6] = np.array([-2.5, -0.5, 0.5, 1.5, 2.5, 0.0]).astype(NP[dtype])  # ties and zero
    y = getattr(ops, name)(x)
    assert y.dtype == x.dtype
    got = run1(y, {"x": xv})
    want = maths(xv.astype(np.float64)).astype(NP[dtype])
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOL[dtype])


def test_round_is_half_to_even_exactly():
    x = ag.Tensor([8], name="x")
    xv = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997], np.float32)
    np.testing.assert_array_equal(run1(ops.round(x), {"x": xv}), [-2, -2, -0, 0, 2, 2, 4, 0])


def test_predicates():
    x = ag.Tensor([6], name="x")
    xv = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 3.0], np.float32)
    outs = ag.reference.run({"nan": ops.isnan(x), "inf": ops.isinf(x), "sign": ops.sign(x)}, {"x": xv})
    np.testing.assert_array_equal(outs["nan"], [True, False, False, False, False, False])
    np.testing.assert_array_equal(outs["inf"], [False, True, True, False, False, False])
    assert np.isnan(outs["sign"][0]) and list(outs["sign"][1:]) == [1, -1, 0, -1, 1]
    assert outs["nan"].dtype == np.bool_


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_int_remainders_and_bitwise(dtype):
    a, b = ag.Tensor([10], dtype, name="a"), ag.Tensor([10], dtype, name="b")
    av = np.array([7, -7, 7, -7, 0, 5, 100, -100, 9, 3], dtype)
    bv = np.array([2, 2, -2, -2, 3, 5, 7, 7, 0, -4], dtype)
    outs = ag.reference.run({"mod": ops.mod(a, b), "fmod": ops.fmod(a, b), "and": ops.bitwise_and(a, b),
                             "or": ops.bitwise_or(a, b), "xor": ops.bitwise_xor(a, b), "not": ops.bitwise_not(a),
                             "sign": ops.sign(a)}, {"a": av, "b": bv})
    pa, pb = av.tolist(), bv.tolist()
    want = {
        "mod": [x % y if y else 0 for x, y in zip(pa, pb)],                       # Python: sign of the divisor
        "fmod": [int(math.fmod(x, y)) if y else 0 for x, y in zip(pa, pb)],      # C: sign of the dividend
        "and": [x & y for x, y in zip(pa, pb)], "or": [x | y for x, y in zip(pa, pb)],
        "xor": [x ^ y for x, y in zip(pa, pb)], "not": [~x for x in pa], "sign": [(x > 0) - (x < 0) for x in pa],
    }
    for k, w in want.items():
        assert outs[k].dtype == np.dtype(dtype), k
        np.testing.assert_array_equal(outs[k], np.array(w).astype(dtype), err_msg=k)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_int_division_truncates_at_the_type_minimum(dtype):
    """C division toward zero, also for INT_MIN (whose |x| overflows); by 0 gives 0, as the kernels do."""
    a, b = ag.Tensor([8], dtype, name="a"), ag.Tensor([8], dtype, name="b")
    lo = int(np.iinfo(dtype).min)
    av = np.array([lo, lo + 1, 7, -7, 7, -7, lo, 5], dtype)
    bv = np.array([32, 32, 2, 2, -2, -2, 3, 0], dtype)
    got = ag.reference.run(ops.div(a, b), {"a": av, "b": bv})
    want = [(abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1) if y else 0 for x, y in zip(av.tolist(), bv.tolist())]
    np.testing.assert_array_equal(next(iter(got.values())), np.array(want).astype(dtype))


def test_float_remainders():
    a, b = ag.Tensor([6], name="a"), ag.Tensor([6], name="b")
    av = np.array([5.5, -5.5, 5.5, -5.5, 1.0, 0.0], np.float32)
    bv = np.array([2.0, 2.0, -2.0, -2.0, 0.3, 1.5], np.float32)
    outs = ag.reference.run({"mod": ops.mod(a, b), "fmod": ops.fmod(a, b)}, {"a": av, "b": bv})
    pa, pb = av.astype(np.float64).tolist(), bv.astype(np.float64).tolist()
    np.testing.assert_allclose(outs["fmod"], [math.fmod(x, y) for x, y in zip(pa, pb)], rtol=1e-6)
    np.testing.assert_allclose(outs["mod"], [x - math.floor(x / y) * y for x, y in zip(pa, pb)], rtol=1e-6, atol=1e-7)


def test_dtype_errors():
    f, i, bl = ag.Tensor([3], name="f"), ag.Tensor([3], "int32", name="i"), ag.Tensor([3], "bool", name="c")
    with pytest.raises(DTypeError, match="bitwise_and.*integer"):
        ops.bitwise_and(f, f)
    with pytest.raises(DTypeError, match="bitwise_not.*integer"):
        ops.bitwise_not(f)
    with pytest.raises(DTypeError, match="sin.*float"):
        ops.sin(i)
    with pytest.raises(DTypeError, match="mod.*bool"):
        ops.mod(bl, bl)
