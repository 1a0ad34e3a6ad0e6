"""max_pool2d / avg_pool2d / global_avg_pool against naive loops (torch's own rules written out),
through the oracle, and against torch."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError
from aitgen.ops.registry import Category, get_opdef
from op_helpers import rand, run1, pad4  # noqa: E402

# float32 oracle vs float64 loops; sums of at most 9 values.
F32 = dict(rtol=1e-5, atol=1e-6)


def out_size(size, lo, hi, k, s, d, ceil):
    """torch's pooling_output_shape, with the left/right padding kept apart."""
    num = size + lo + hi - d * (k - 1) - 1
    o = (-(-num // s) if ceil else num // s) + 1
    if ceil and (o - 1) * s >= size + lo:
        o -= 1
    return o


def naive_max(x, k, s, pad, d, ceil):
    n, h, w, c = x.shape
    pt, pb, pl, pr = pad
    ho, wo = out_size(h, pt, pb, k, s, d, ceil), out_size(w, pl, pr, k, s, d, ceil)
    out = np.full((n, ho, wo, c), -np.inf)
    for oh in range(ho):
        for ow in range(wo):
            for i in range(k):
                for j in range(k):
                    ih, iw = oh * s - pt + i * d, ow * s - pl + j * d
                    if 0 <= ih < h and 0 <= iw < w:
                        out[:, oh, ow] = np.maximum(out[:, oh, ow], x[:, ih, iw])
    return out


def naive_avg(x, k, s, pad, ceil, include_pad):
    """torch's avg_pool2d loop: the divisor counts padding (if asked) but not the ceil overhang."""
    n, h, w, c = x.shape
    pt, pb, pl, pr = pad
    ho, wo = out_size(h, pt, pb, k, s, 1, ceil), out_size(w, pl, pr, k, s, 1, ceil)
    out = np.zeros((n, ho, wo, c))
    xd = x.astype(np.float64)
    for oh in range(ho):
        for ow in range(wo):
            hs, ws = oh * s - pt, ow * s - pl
            he, we = min(hs + k, h + pb), min(ws + k, w + pr)
            pool = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            div = pool if include_pad else (he - hs) * (we - ws)
            out[:, oh, ow] = xd[:, hs:he, ws:we].sum(axis=(1, 2)) / div
    return out


def test_registered():
    for kind in (ag.OpKind.MAX_POOL2D, ag.OpKind.AVG_POOL2D, ag.OpKind.GLOBAL_AVG_POOL):
        assert get_opdef(kind).category == Category.POOL


MAX_CASES = [
    # h, w, kernel, stride, padding, dilation, ceil_mode
    (7, 7, 3, 2, 1, 1, False),             # ResNet stem
    (8, 9, 2, 2, 1, 1, True),              # ceil mode drops the window that starts in the padding
    (9, 8, 3, 2, (1, 0, 0, 1), 1, True),   # asymmetric padding
    (10, 10, 3, 3, 1, 2, True),            # dilation
    (10, 10, 3, 3, (2, 2), 2, True),       # padding up to half the dilated kernel (torch allows k//2)
    (5, 6, 3, 1, 0, 1, False),
]


@pytest.mark.parametrize("case", MAX_CASES)
def test_max_pool(case):
    h, w, k, s, p, d, ceil = case
    rng = np.random.default_rng(h * 10 + w)
    x = rand(rng, (2, h, w, 3))
    y = ops.max_pool2d(ag.Tensor(x.shape, name="x"), k, s, p, d, ceil)
    want = naive_max(x, k, s, pad4(p), d, ceil)
    assert tuple(dim.value for dim in y.shape) == want.shape
    np.testing.assert_array_equal(run1(y, {"x": x}), want.astype(np.float32))  # max is exact


AVG_CASES = [
    # h, w, kernel, stride, padding, ceil_mode, count_include_pad
    (7, 7, 3, 2, 1, False, True),
    (7, 7, 3, 2, 1, False, False),
    (6, 6, 3, 2, 1, True, True),           # ceil window hangs past the padding: torch clips the divisor
    (6, 6, 3, 2, 1, True, False),
    (8, 9, 2, 2, 1, True, True),
    (9, 8, 3, 2, (0, 1, 1, 0), True, True),   # asymmetric padding
    (9, 8, 3, 2, (1, 0, 0, 1), False, False),
]


@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool(case):
    h, w, k, s, p, ceil, cip = case
    rng = np.random.default_rng(h * 10 + w + cip)
    x = rand(rng, (2, h, w, 3))
    y = ops.avg_pool2d(ag.Tensor(x.shape, name="x"), k, s, p, ceil, cip)
    want = naive_avg(x, k, s, pad4(p), ceil, cip)
    assert tuple(dim.value for dim in y.shape) == want.shape
    np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 9), w=st.integers(1, 9), k=st.integers(1, 4), s=st.integers(1, 3),
       pads=st.tuples(*[st.integers(0, 2)] * 4), ceil=st.booleans(), cip=st.booleans())
def test_pools_random(h, w, k, s, pads, ceil, cip):
    assume(max(pads) <= k // 2 and h + pads[0] + pads[1] >= k and w + pads[2] + pads[3] >= k)
    rng = np.random.default_rng(h * 10 + w)
    x = rand(rng, (1, h, w, 2))
    X = ag.Tensor(x.shape, name="x")
    got = ag.reference.run({"m": ops.max_pool2d(X, k, s, pads, 1, ceil),
                            "a": ops.avg_pool2d(X, k, s, pads, ceil, cip)}, {"x": x})
    np.testing.assert_array_equal(got["m"], naive_max(x, k, s, pads, 1, ceil).astype(np.float32))
    np.testing.assert_allclose(got["a"], naive_avg(x, k, s, pads, ceil, cip), **F32)


@pytest.mark.parametrize("k,s,p", [(2, 2, 1), (3, 2, 1), (3, 3, (0, 1)), (2, 3, 0)])
def test_dynamic_hw_ceil(k, s, p):
    """Symbolic output size matches torch's ceil-mode rule at every size, and numerics at two."""
    H, W = ag.IntVar("h", 2, 40), ag.IntVar("w", 2, 40)
    N = ag.IntVar("n", 1, 4)
    X = ag.Tensor([N, H, W, 2], name="x")
    pt, pb, pl, pr = pad4(p)
    for ceil in (False, True):
        y = ops.max_pool2d(X, k, s, p, 1, ceil)
        a = ops.avg_pool2d(X, k, s, p, ceil, False)
        for size in range(max(2, k), 20):
            env = {N: 1, H: size, W: size + 1}
            want = (out_size(size, pt, pb, k, s, 1, ceil), out_size(size + 1, pl, pr, k, s, 1, ceil))
            assert (y.shape[1].evaluate(env), y.shape[2].evaluate(env)) == want, (size, ceil)
        rng = np.random.default_rng(k * 10 + s)
        for n, h, w in ((1, 7, 6), (3, 12, 13)):
            x = rand(rng, (n, h, w, 2))
            got = ag.reference.run({"m": y, "a": a}, {"x": x})
            np.testing.assert_array_equal(got["m"], naive_max(x, k, s, pad4(p), 1, ceil).astype(np.float32))
            np.testing.assert_allclose(got["a"], naive_avg(x, k, s, pad4(p), ceil, False), **F32)


def test_max_pool_int():
    rng = np.random.default_rng(11)
    x = rng.integers(-100, 100, (1, 6, 6, 2)).astype(np.int32)
    y = ops.max_pool2d(ag.Tensor(x.shape, "int32", name="x"), 3, 2, 1, ceil_mode=True)
    got = run1(y, {"x": x})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, naive_max(x.astype(np.float64), 3, 2, (1,) * 4, 1, True).astype(np.int32))


@pytest.mark.parametrize("keepdims", [True, False])
def test_global_avg_pool(keepdims):
    N, H = ag.IntVar("n", 1, 4), ag.IntVar("h", 1, 16)
    y = ops.global_avg_pool(ag.Tensor([N, H, 5, 3], name="x"), keepdims)
    assert len(y.shape) == (4 if keepdims else 2) and y.shape[0] is N
    rng = np.random.default_rng(12)
    for n, h in ((1, 1), (3, 7)):
        x = rand(rng, (n, h, 5, 3))
        want = x.astype(np.float64).sum(axis=(1, 2)) / (h * 5)
        got = run1(y, {"x": x})
        np.testing.assert_allclose(got.reshape(n, 3), want, **F32)
        assert got.shape == ((n, 1, 1, 3) if keepdims else (n, 3))


@pytest.mark.parametrize("dtype,tol", [(np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2)])
def test_low_precision(dtype, tol):
    """Max is exact in any dtype; averages round once to the storage type (tol = a few ulps)."""
    name = "float16" if dtype == np.float16 else "bfloat16"
    x = rand(np.random.default_rng(13), (1, 7, 7, 4), dtype)
    X = ag.Tensor(x.shape, name, name="x")
    got = ag.reference.run({"m": ops.max_pool2d(X, 3, 2, 1), "a": ops.avg_pool2d(X, 3, 2, 1, True, False),
                            "g": ops.global_avg_pool(X)}, {"x": x})
    assert all(v.dtype == np.dtype(dtype) for v in got.values())
    np.testing.assert_array_equal(got["m"].astype(np.float64), naive_max(x.astype(np.float64), 3, 2, (1,) * 4, 1, False))
    np.testing.assert_allclose(got["a"].astype(np.float64), naive_avg(x, 3, 2, (1,) * 4, True, False),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(got["g"].astype(np.float64).ravel(), x.astype(np.float64).mean(axis=(0, 1, 2)),
                               rtol=tol, atol=tol)


# -- torch ----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", [c for c in MAX_CASES if isinstance(c[4], int)])
def test_max_pool_vs_torch(case):
    torch = pytest.importorskip("torch")
    h, w, k, s, p, d, ceil = case
    x = rand(np.random.default_rng(14), (2, h, w, 3))
    y = ops.max_pool2d(ag.Tensor(x.shape, name="x"), k, s, p, d, ceil)
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x).permute(0, 3, 1, 2), k, s, p, d, ceil)
    np.testing.assert_array_equal(run1(y, {"x": x}), want.permute(0, 2, 3, 1).numpy())


@pytest.mark.parametrize("case", [c for c in AVG_CASES if isinstance(c[4], int)])
def test_avg_pool_vs_torch(case):
    torch = pytest.importorskip("torch")
    h, w, k, s, p, ceil, cip = case
    x = rand(np.random.default_rng(15), (2, h, w, 3))
    y = ops.avg_pool2d(ag.Tensor(x.shape, name="x"), k, s, p, ceil, cip)
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(x).permute(0, 3, 1, 2), k, s, p, ceil, cip)
    np.testing.assert_allclose(run1(y, {"x": x}), want.permute(0, 2, 3, 1).numpy(), **F32)


def test_global_avg_pool_vs_torch():
    torch = pytest.importorskip("torch")
    x = rand(np.random.default_rng(16), (2, 5, 6, 3))
    y = ops.global_avg_pool(ag.Tensor(x.shape, name="x"), keepdims=False)
    want = torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x).permute(0, 3, 1, 2), 1).flatten(1)
    np.testing.assert_allclose(run1(y, {"x": x}), want.numpy(), **F32)


# -- bad inputs -----------------------------------------------------------------------------

def T(*shape, dtype="float32"):
    return ag.Tensor(shape, dtype)


def _raises(err, fn, *words):
    with pytest.raises(err) as info:
        fn()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {str(info.value)!r}"


def test_error_rank():
    _raises(ShapeError, lambda: ops.max_pool2d(T(5, 5, 3), 2), "max_pool2d", "4-D NHWC")
    _raises(ShapeError, lambda: ops.avg_pool2d(T(1, 5, 5, 3, 1), 2), "avg_pool2d", "4-D NHWC")
    _raises(ShapeError, lambda: ops.global_avg_pool(T(5, 3)), "global_avg_pool", "4-D NHWC")


def test_error_padding_too_large():
    _raises(ShapeError, lambda: ops.max_pool2d(T(1, 5, 5, 3), 3, 1, 2), "max_pool2d", "half")
    _raises(ShapeError, lambda: ops.avg_pool2d(T(1, 5, 5, 3), 2, 1, (0, 0, 0, 2)), "avg_pool2d", "half")


def test_error_kernel_too_large():
    _raises(ShapeError, lambda: ops.max_pool2d(T(1, 2, 5, 3), 3), "max_pool2d", "larger than the padded input")


def test_error_dtype():
    _raises(DTypeError, lambda: ops.max_pool2d(T(1, 5, 5, 3, dtype="bool"), 2), "max_pool2d", "bool")
    _raises(DTypeError, lambda: ops.avg_pool2d(T(1, 5, 5, 3, dtype="int32"), 2), "avg_pool2d", "float")
    _raises(DTypeError, lambda: ops.global_avg_pool(T(1, 5, 5, 3, dtype="int8")), "global_avg_pool", "float")


def test_error_attrs():
    _raises(ShapeError, lambda: ops.max_pool2d(T(1, 5, 5, 3), 2, 0), "max_pool2d", "stride")
    _raises(ShapeError, lambda: ops.avg_pool2d(T(1, 5, 5, 3), (2, 2, 2)), "avg_pool2d", "kernel_size")
    _raises(ShapeError, lambda: ops.max_pool2d(T(1, 5, 5, 3), 0), "max_pool2d", "kernel")
