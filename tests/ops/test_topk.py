"""top_k: the oracle against a Python loop (the order rule written out), and its typed errors.

Values and indices are exact (top_k only moves elements).
"""
import functools
import math

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError


def _loop_top_k(x: np.ndarray, k: int, axis: int, largest: bool):
    """Sort each row's (value, index) pairs: better value first, a NaN beyond every number, ties
    by the lower index."""
    def cmp(a, b):
        (va, ia), (vb, ib) = a, b
        na, nb = isinstance(va, float) and math.isnan(va), isinstance(vb, float) and math.isnan(vb)
        if na != nb:
            a_first = na if largest else nb
            return -1 if a_first else 1
        if not na and va != vb:
            return -1 if (va > vb) == largest else 1
        return -1 if ia < ib else 1
    xm = np.moveaxis(x, axis, -1)
    vals, idx = np.empty(xm.shape[:-1] + (k,), x.dtype), np.empty(xm.shape[:-1] + (k,), np.int64)
    for pos in np.ndindex(*xm.shape[:-1]):
        best = sorted(zip(xm[pos].tolist(), range(xm.shape[-1])), key=functools.cmp_to_key(cmp))[:k]
        vals[pos] = [v for v, _ in best]
        idx[pos] = [i for _, i in best]
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_top_k_matches_the_rule(largest, dtype):
    rng = np.random.default_rng(3)
    xv = rng.integers(-3, 4, size=(4, 9, 3)).astype(dtype)  # ties everywhere
    if dtype != "int32":
        xv[1, 2, 0] = xv[1, 5, 0] = xv[3, 0, 2] = np.nan
    x = ag.Tensor(list(xv.shape), dtype, name="x")
    for axis, k in ((1, 4), (-1, 2), (0, 4), (1, 0)):
        v, i = ops.top_k(x, k, axis=axis, largest=largest)
        assert v.dtype == x.dtype and i.dtype == ag.DType.int64
        got = ag.reference.run({"v": v, "i": i}, {"x": xv})
        want_v, want_i = _loop_top_k(xv, k, axis % 3, largest)
        np.testing.assert_array_equal(got["i"], want_i, err_msg=f"axis {axis} k {k}")
        np.testing.assert_array_equal(got["v"], want_v, err_msg=f"axis {axis} k {k}")


def test_top_k_dynamic_dims_and_errors():
    b = ag.IntVar("b", 1, 8)
    s = ag.IntVar("s", 3, 10)
    v, _ = ops.top_k(ag.Tensor([b, s], "float32", name="x"), 3)
    assert v.shape[0] is b and v.shape[1].value == 3
    with pytest.raises(ShapeError, match="k=4"):  # s may be 3: k = 4 would not fit every size
        ops.top_k(ag.Tensor([b, s], "float32"), 4)
    with pytest.raises(ShapeError, match="k=6"):
        ops.top_k(ag.Tensor([2, 5], "float32"), 6)
    with pytest.raises(ShapeError, match="k must be an int"):
        ops.top_k(ag.Tensor([2, 5], "float32"), 2.0)
    with pytest.raises(ShapeError):
        ops.top_k(ag.Tensor([2, 5], "float32"), 2, axis=2)
    with pytest.raises(DTypeError, match="bool"):
        ops.top_k(ag.Tensor([2, 5], "bool"), 2)
