"""gemm / bmm / linear / matmul against np.einsum (float64) through the oracle, and against torch."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError
from aitgen.ops.registry import Category, get_opdef
from op_helpers import rand, run1  # noqa: E402

# float32 oracle vs a float64 einsum of the same inputs.
F32 = dict(rtol=1e-5, atol=1e-5)


def stored(arr, trans):
    """The array as the layout stores it: the logical matrix, transposed when 'c'."""
    return np.ascontiguousarray(np.swapaxes(arr, -1, -2)) if trans else arr


def test_registered():
    for kind in (ag.OpKind.GEMM, ag.OpKind.BMM):
        assert get_opdef(kind).category == Category.GEMM


@pytest.mark.parametrize("layout", ["rrr", "rcr", "crr", "ccr"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 7, 3), (16, 33, 9)])
def test_gemm_layouts(layout, with_bias, m, k, n):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a, b, bias = rand(rng, (m, k)), rand(rng, (k, n)), rand(rng, (n,))
    ta, tb = layout[0] == "c", layout[1] == "c"
    A = ag.Tensor(stored(a, ta).shape, name="a")
    B = ag.Tensor(stored(b, tb).shape, name="b")
    feeds = {"a": stored(a, ta), "b": stored(b, tb)}
    args = [A, B]
    if with_bias:
        args.append(ag.Tensor([n], name="bias"))
        feeds["bias"] = bias
    y = ops.gemm(*args, layout=layout)
    assert y.producer.kind == ag.OpKind.GEMM and y.producer.attrs.layout == layout
    assert [d.value for d in y.shape] == [m, n]
    want = np.einsum("mk,kn->mn", a.astype(np.float64), b.astype(np.float64))
    if with_bias:
        want = want + bias
    got = run1(y, feeds)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, **F32)


@settings(max_examples=15, deadline=None)
@given(lead=st.lists(st.integers(1, 3), min_size=1, max_size=2), m=st.integers(1, 6), k=st.integers(1, 8),
       n=st.integers(1, 6), trans_b=st.booleans())
def test_gemm_leading_dims(lead, m, k, n, trans_b):
    rng = np.random.default_rng(len(lead) + m + k + n)
    a, b, bias = rand(rng, (*lead, m, k)), rand(rng, (k, n)), rand(rng, (n,))
    y = ops.gemm(ag.Tensor(a.shape, name="a"), ag.Tensor(stored(b, trans_b).shape, name="b"),
                 ag.constant(bias), layout="rcr" if trans_b else "rrr")
    assert [d.value for d in y.shape] == [*lead, m, n]
    want = np.einsum("...mk,kn->...mn", a.astype(np.float64), b.astype(np.float64)) + bias
    np.testing.assert_allclose(run1(y, {"a": a, "b": stored(b, trans_b)}), want, **F32)


def test_gemm_dynamic_batch():
    batch = ag.IntVar("batch", 1, 64)
    rng = np.random.default_rng(1)
    w = rand(rng, (12, 20))
    x = ag.Tensor([batch, 3, 20], name="x")
    y = ops.linear(x, ag.constant(w))
    assert y.shape[0] is batch and [d.value for d in y.shape[1:]] == [3, 12]
    for size in (1, 7):
        xv = rand(rng, (size, 3, 20))
        want = np.einsum("bmk,nk->bmn", xv.astype(np.float64), w.astype(np.float64))
        np.testing.assert_allclose(run1(y, {"x": xv}), want, **F32)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("sa,sb", [((3, 4, 5), (3, 5, 2)),          # plain batch
                                   ((2, 1, 4, 5), (3, 5, 6)),       # broadcast both ways, rank differs
                                   ((4, 5), (2, 3, 5, 2)),          # 2-D a broadcast over b's batch
                                   ((1, 4, 1), (6, 1, 3))])         # K = 1, broadcast batch of 1
def test_bmm_broadcast(ta, tb, sa, sb):
    rng = np.random.default_rng(sum(sa) * 7 + sum(sb))
    a, b = rand(rng, sa), rand(rng, sb)
    A = ag.Tensor(stored(a, ta).shape, name="a")
    B = ag.Tensor(stored(b, tb).shape, name="b")
    y = ops.bmm(A, B, trans_a=ta, trans_b=tb)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    ab = np.broadcast_to(a, batch + sa[-2:]).astype(np.float64)
    bb = np.broadcast_to(b, batch + sb[-2:]).astype(np.float64)
    want = np.einsum("...mk,...kn->...mn", ab, bb)
    assert tuple(d.value for d in y.shape) == want.shape
    np.testing.assert_allclose(run1(y, {"a": stored(a, ta), "b": stored(b, tb)}), want, **F32)


def test_bmm_dynamic_batch():
    b_ = ag.IntVar("b", 1, 16)
    A = ag.Tensor([b_, 4, 8], name="a")
    B = ag.Tensor([b_, 6, 8], name="b")
    y = ops.bmm(A, B, trans_b=True)
    assert y.shape[0] is b_
    rng = np.random.default_rng(2)
    for size in (2, 5):
        a, b = rand(rng, (size, 4, 8)), rand(rng, (size, 6, 8))
        want = np.einsum("bmk,bnk->bmn", a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(run1(y, {"a": a, "b": b}), want, **F32)


@pytest.mark.parametrize("sa,sb,kind", [((3, 4), (4, 5), ag.OpKind.GEMM),
                                        ((2, 3, 4), (4, 5), ag.OpKind.GEMM),
                                        ((3, 4), (2, 4, 5), ag.OpKind.BMM),
                                        ((2, 1, 3, 4), (5, 4, 2), ag.OpKind.BMM)])
def test_matmul_semantics(sa, sb, kind):
    rng = np.random.default_rng(3)
    a, b = rand(rng, sa), rand(rng, sb)
    y = ag.Tensor(sa, name="a") @ ag.Tensor(sb, name="b")
    assert y.producer.kind == kind
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(run1(y, {"a": a, "b": b}), want, **F32)


@pytest.mark.parametrize("dtype,tol", [(np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2)])
def test_low_precision(dtype, tol):
    """16-bit storage, float32 math, one rounding at the end: within the storage type's epsilon."""
    rng = np.random.default_rng(4)
    name = "float16" if dtype == np.float16 else "bfloat16"
    a, w, bias = rand(rng, (6, 16), dtype), rand(rng, (5, 16), dtype), rand(rng, (5,), dtype)
    y = ops.linear(ag.Tensor(a.shape, name, name="a"), ag.constant(w, name), ag.constant(bias, name))
    z = ops.bmm(ag.Tensor([2, 3, 16], name, name="p"), ag.Tensor([2, 16, 4], name, name="q"))
    p, q = rand(rng, (2, 3, 16), dtype), rand(rng, (2, 16, 4), dtype)
    got = ag.reference.run({"y": y, "z": z}, {"a": a, "p": p, "q": q})
    assert got["y"].dtype == np.dtype(dtype) and got["z"].dtype == np.dtype(dtype)
    f = lambda v: v.astype(np.float64)  # noqa: E731
    want_y = np.einsum("mk,nk->mn", f(a), f(w)) + f(bias)
    want_z = np.einsum("bmk,bkn->bmn", f(p), f(q))
    # rtol = a few ulps of the storage type; atol covers outputs that cancel to near zero.
    np.testing.assert_allclose(f(got["y"]), want_y, rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(f(got["z"]), want_z, rtol=tol, atol=tol * 4)


# -- torch ----------------------------------------------------------------------------------

def test_linear_vs_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, w, b = rand(rng, (2, 3, 10)), rand(rng, (7, 10)), rand(rng, (7,))
    y = ops.linear(ag.Tensor(x.shape, name="x"), ag.constant(w), ag.constant(b))
    want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_bmm_vs_torch(ta, tb):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    a, b = rand(rng, (2, 1, 5, 6)), rand(rng, (3, 6, 4))
    y = ops.bmm(ag.Tensor(stored(a, ta).shape, name="a"), ag.Tensor(stored(b, tb).shape, name="b"),
                trans_a=ta, trans_b=tb)
    want = torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(run1(y, {"a": stored(a, ta), "b": stored(b, tb)}), want, **F32)


# -- bad inputs -----------------------------------------------------------------------------

def _raises(err, fn, *words):
    with pytest.raises(err) as info:
        fn()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    return msg


def T(*shape, dtype="float32", name=None):
    return ag.Tensor(shape, dtype, name=name)


def test_error_k_mismatch():
    _raises(ShapeError, lambda: ops.gemm(T(3, 4, name="a"), T(5, 6), layout="rrr"), "gemm", "K=4", "K=5", "[3, 4]")
    _raises(ShapeError, lambda: ops.linear(T(3, 4), T(6, 5)), "gemm", "[6, 5]")
    _raises(ShapeError, lambda: ops.bmm(T(2, 3, 4), T(2, 5, 6)), "bmm", "K=4")


def test_error_bias_shape():
    _raises(ShapeError, lambda: ops.gemm(T(3, 4), T(4, 6), T(4)), "gemm", "bias", "[4]")
    _raises(ShapeError, lambda: ops.gemm(T(3, 4), T(4, 6), T(1, 6)), "gemm", "bias")


def test_error_ranks():
    _raises(ShapeError, lambda: ops.gemm(T(2, 4, 3), T(4, 6), layout="crr"), "gemm", "2-D")
    _raises(ShapeError, lambda: ops.gemm(T(3, 4), T(1, 4, 6)), "gemm", "b must be 2-D")
    _raises(ShapeError, lambda: ops.gemm(T(4), T(4, 6)), "gemm", "rank")
    _raises(ShapeError, lambda: ops.bmm(T(4), T(4, 6)), "bmm", "rank")
    _raises(ShapeError, lambda: ops.matmul(T(4), T(4, 6)), "matmul", "rank")


def test_error_batch_broadcast():
    _raises(ShapeError, lambda: ops.bmm(T(2, 3, 4), T(3, 4, 5)), "bmm", "batch")


def test_error_dtypes():
    _raises(DTypeError, lambda: ops.gemm(T(3, 4), T(4, 6, dtype="float16")), "gemm", "float16")
    _raises(DTypeError, lambda: ops.gemm(T(3, 4), T(4, 6), T(6, dtype="bfloat16")), "gemm", "bfloat16")
    _raises(DTypeError, lambda: ops.bmm(T(3, 4, dtype="int32"), T(4, 6, dtype="int32")), "bmm", "float")


def test_error_layout():
    _raises(ValueError, lambda: ops.gemm(T(3, 4), T(4, 6), layout="rrc"), "gemm", "layout")
