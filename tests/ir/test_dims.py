"""Symbolic dims: the arithmetic reshape, flatten and concat rely on, bounds, evaluation."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitgen.errors import ShapeError
from aitgen.ir.dims import FloorDiv, IntImm, IntVar, as_dim, prod


def test_intimm_equals_int_and_simplifies():
    assert IntImm(3) == 3 and IntImm(3) == IntImm(3) and IntImm(3) != 4
    assert as_dim(2) + 3 == 5 and isinstance(as_dim(2) * 3, IntImm)


def test_same_intvar_object_means_equal_sizes():
    a, b = IntVar("n", 1, 8), IntVar("n", 1, 8)
    assert a == a and a != b  # identity, not name
    assert a + 0 is a and a * 1 is a


def test_products_and_exact_division():
    b, s = IntVar("batch", 1, 64), IntVar("seq", 1, 512)
    flat = b * s * 768
    assert flat.exact_div(768) == b * s
    assert flat.exact_div(b * s) == 768
    assert flat // (b * s * 12) == 64
    assert flat.exact_div(IntVar("other", 1, 2)) is None
    assert (b * s).exact_div(7) is None
    assert str(flat) == "768*batch*seq"


def test_sums_for_concat():
    n = IntVar("n", 1, 10)
    total = n + n + 3
    assert total == 2 * n + 3 and str(total) == "2*n + 3"
    assert total.evaluate({n: 4}) == 11
    assert total - n - n == 3


def test_bounds_and_floor_division():
    h = IntVar("h", 7, 31)
    out = (h + 2 - 3) // 2 + 1  # a stride-2 conv with k=3, pad=1
    assert isinstance(out.vars()[0], IntVar) and out.vars() == [h]
    assert out.lower == (7 - 1) // 2 + 1 and out.upper == (31 - 1) // 2 + 1
    for v in (7, 8, 30, 31):
        assert out.evaluate({h: v}) == (v - 1) // 2 + 1
    assert isinstance((h - 1) // 2, FloorDiv)
    assert (h - 1) // 2 == (h - 1) // 2  # structural equality of the same expression


def test_errors():
    with pytest.raises(ShapeError, match="bounds"):
        IntVar("bad", 5, 2)
    with pytest.raises(ShapeError, match="symbolic"):
        _ = IntVar("n", 1, 2).value
    with pytest.raises(ShapeError, match="no value bound for dimension 'q'"):
        IntVar("q", 1, 2).evaluate({})
    with pytest.raises(ShapeError):
        as_dim(True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 9), st.integers(1, 9))
def test_polynomials_evaluate_like_integers(coeffs, va, vb):
    a, b = IntVar("a", 1, 9), IntVar("b", 1, 9)
    d = prod([a, b]) * coeffs[0]
    expect = va * vb * coeffs[0]
    for c in coeffs[1:]:
        d = d + a * c
        expect += va * c
    env = {a: va, b: vb}
    assert d.evaluate(env) == expect
    assert d.lower <= expect <= d.upper
    assert (d * 2).exact_div(2) == d
