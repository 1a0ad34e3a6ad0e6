"""argmax / argmin and reduce_prod: oracle against Python loops, and their typed errors.

Index results are exact; float32 products are compared with rtol 1e-5 against a float64 product
(at most 12 factors of magnitude <= 2, so float32 rounding stays far below that).
"""
import math

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError


def _loop_arg(x: np.ndarray, axis: int, want_max: bool, last: bool) -> np.ndarray:
    """The index rule written out: a NaN is the extreme; ties keep the first (or last) index."""
    xm = np.moveaxis(x, axis, -1)
    out = np.empty(xm.shape[:-1], np.int64)
    for idx in np.ndindex(*xm.shape[:-1]):
        row = xm[idx].tolist()
        best, arg = row[0], 0
        for k, v in enumerate(row[1:], start=1):
            if math.isnan(best) and not last:
                break
            if isinstance(v, float) and math.isnan(v):
                take = True
            elif isinstance(best, float) and math.isnan(best):
                take = False
            else:
                take = (v >= best if last else v > best) if want_max else (v <= best if last else v < best)
            if take:
                best, arg = v, k
        out[idx] = arg
    return out


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float16"])
def test_arg_reduce_matches_loops_with_ties_and_nans(kind, last, dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, size=(3, 5, 4)).astype(ag.DType(dtype).np)  # small range: many ties
    if dtype.startswith("float"):
        x[1, 2, 1] = np.nan
        x[2, :, 3] = np.nan
    for axis in range(3):
        for keep in (True, False):
            t = ag.Tensor(x.shape, dtype, name="x")
            y = getattr(ops, kind)(t, axis=axis - 3 if axis == 2 else axis, keepdims=keep, select_last_index=last)
            (got,) = ag.reference.run([y], {"x": x}).values()
            want = _loop_arg(x.astype(np.float64) if dtype.startswith("float") else x, axis, kind == "argmax", last)
            if keep:
                want = np.expand_dims(want, axis)
            assert got.dtype == np.int64 and tuple(y.shape) == want.shape
            np.testing.assert_array_equal(got, want)


def test_arg_reduce_errors():
    x = ag.Tensor([2, 3], "float32", name="x")
    with pytest.raises(ShapeError, match="out of range"):
        ops.argmax(x, axis=2)
    with pytest.raises(ShapeError, match="must be an int"):
        ops.argmin(x, axis=[0, 1])
    with pytest.raises(DTypeError, match="bool"):
        ops.argmax(ag.Tensor([2], "bool", name="m"))
    with pytest.raises(ShapeError, match="size 0"):
        ops.argmax(ag.Tensor([2, 0], "float32", name="e"), axis=1)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_reduce_prod_matches_float64_and_wraps_ints(dtype):
    rng = np.random.default_rng(5)
    if dtype == "float32":
        x = rng.uniform(-2, 2, size=(3, 4, 3)).astype(np.float32)
    else:  # large factors: an int product must wrap like the fixed-width type
        x = rng.integers(-100, 100, size=(3, 4, 3)).astype(ag.DType(dtype).np)
    for axes in (None, 1, (0, 2), ()):
        for keep in (False, True):
            y = ops.reduce_prod(ag.Tensor(x.shape, dtype, name="x"), axes, keepdims=keep)
            (got,) = ag.reference.run([y], {"x": x}).values()
            ax = tuple(range(3)) if axes is None else axes
            if dtype == "float32":
                want = np.prod(x.astype(np.float64), axis=ax, keepdims=keep)
                np.testing.assert_allclose(got, want, rtol=1e-5)
            else:
                # Python ints, reduced modulo 2**bits into the signed range.
                bits = 8 * x.dtype.itemsize
                wide = np.prod(x.astype(object), axis=ax, keepdims=keep)
                want = np.vectorize(lambda v: (int(v) + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1),
                                    otypes=[np.int64])(wide)
                assert got.dtype == x.dtype
                np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize("kind", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_scans_match_loops(kind, dtype):
    rng = np.random.default_rng(9)
    x = (rng.uniform(0.5, 1.5, size=(2, 5, 3)).astype(np.float32) if dtype == "float32"
         else rng.integers(-60, 60, size=(2, 5, 3)).astype(ag.DType(dtype).np))
    bits = 8 * x.dtype.itemsize
    for axis in range(3):
        for exclusive in (False, True):
            for reverse in (False, True):
                y = getattr(ops, kind)(ag.Tensor(x.shape, dtype, name="x"), axis - 3, exclusive, reverse)
                (got,) = ag.reference.run([y], {"x": x}).values()
                xm = np.moveaxis(x.astype(np.float64 if dtype == "float32" else object), axis, -1)
                want = np.empty(xm.shape, dtype=xm.dtype)
                for idx in np.ndindex(*xm.shape[:-1]):
                    row = list(xm[idx])[::-1] if reverse else list(xm[idx])
                    acc = 0 if kind == "cumsum" else 1
                    vals = []
                    for v in row:  # the running value before (exclusive) or after (inclusive) v
                        nxt = acc + v if kind == "cumsum" else acc * v
                        vals.append(acc if exclusive else nxt)
                        acc = nxt
                    want[idx] = vals[::-1] if reverse else vals
                want = np.moveaxis(want, -1, axis)
                assert got.dtype == x.dtype and got.shape == x.shape
                if dtype == "float32":
                    np.testing.assert_allclose(got, want, rtol=1e-5)
                else:
                    wrap = np.vectorize(lambda v: (int(v) + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1),
                                        otypes=[np.int64])
                    np.testing.assert_array_equal(got.astype(np.int64), wrap(want))
