"""Reductions against independent float64 loops / one-pass formulas, and against torch.

Tolerances (vs float64 truth): float32 rtol=atol=1e-5 (inputs O(1), at most a few hundred terms);
float16 rtol=atol=2e-3 (the oracle rounds once, after a float32 reduction); bfloat16 rtol=atol=2e-2.
max/min and int reductions are exact.
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, RuntimeInputError, ShapeError

TOL = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2)}
KINDS = ["sum", "mean", "max", "min", "var"]


def _builder(kind):
    return getattr(ops, f"reduce_{kind}")


def _truth(x, kind, axes, keepdims, correction=0):
    """Move the reduced axes last, flatten them, and reduce each row in a Python loop."""
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim)) if axes is None else tuple(sorted(a % x.ndim for a in np.atleast_1d(axes)))
    kept = [a for a in range(x.ndim) if a not in axes]
    rows = np.transpose(x, kept + list(axes)).reshape(-1, int(np.prod([x.shape[a] for a in axes])))
    out = []
    for r in rows:
        n = r.size
        if kind == "sum":
            out.append(sum(r.tolist()))
        elif kind == "mean":
            out.append(sum(r.tolist()) / n)
        elif kind == "max":
            out.append(max(r.tolist()))
        elif kind == "min":
            out.append(min(r.tolist()))
        else:  # one-pass moments in float64 (the oracle uses two-pass in float32)
            s, s2 = sum(r.tolist()), sum((r * r).tolist())
            out.append((s2 - s * s / n) / (n - correction))
    shape = [1 if a in axes else d for a, d in enumerate(x.shape)] if keepdims else \
        [x.shape[a] for a in kept]
    return np.array(out).reshape(shape)


def _close(got, want, dtype="float32"):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def _run(y, x):
    return ag.reference.run(y, {"x": x})["output_0"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_every_axis(kind, keepdims):
    shape = (2, 3, 4, 5)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    xt = ag.Tensor(shape, name="x")
    for axis in range(-4, 4):
        y = _builder(kind)(xt, axis, keepdims=keepdims)
        want = _truth(x, kind, axis, keepdims)
        assert tuple(d.value for d in y.shape) == want.shape
        _close(_run(y, x), want)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_reduce_random_axes(shape, data):
    nd = len(shape)
    kind = data.draw(st.sampled_from(KINDS))
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True)))
    if axes is not None:  # spell some axes negatively; the op must normalise them
        axes = [a - nd if data.draw(st.booleans()) else a for a in axes]
    keepdims = data.draw(st.booleans())
    correction = data.draw(st.sampled_from([0, 1])) if kind == "var" else 0
    n = int(np.prod(shape if axes is None else [shape[a] for a in axes]))
    if kind == "var" and n <= correction:
        correction = 0
    x = np.random.default_rng(nd).standard_normal(shape).astype(np.float32)
    kw = {"correction": correction} if kind == "var" else {}
    y = _builder(kind)(ag.Tensor(shape, name="x"), axes, keepdims=keepdims, **kw)
    _close(_run(y, x), _truth(x, kind, axes, keepdims, correction))


@pytest.mark.parametrize("correction", [0, 1, 2])
def test_reduce_var_correction_and_large_mean(correction):
    # A mean far from 0 breaks a float32 one-pass variance; the oracle must stay accurate.
    x = (np.random.default_rng(1).standard_normal((4, 50)) + 1000).astype(np.float32)
    y = ops.reduce_var(ag.Tensor(x.shape, name="x"), 1, correction=correction)
    np.testing.assert_allclose(_run(y, x), np.var(x.astype(np.float64), axis=1, ddof=correction), rtol=1e-3)


def test_reduce_all_and_empty_axes():
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    xt = ag.Tensor(x.shape, name="x")
    y_all = ops.reduce_sum(xt)
    assert y_all.shape == () and y_all.producer.attrs.axes == (0, 1)
    _close(_run(y_all, x), _truth(x, "sum", None, False))
    y_all_k = ops.reduce_max(xt, keepdims=True)
    assert tuple(d.value for d in y_all_k.shape) == (1, 1)
    _close(_run(y_all_k, x), _truth(x, "max", None, True))
    y_none = ops.reduce_sum(xt, [])  # numpy's axis=(): reduce nothing
    assert y_none.shape == xt.shape
    _close(_run(y_none, x), x.astype(np.float64))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_reduce_ints_keep_dtype(dtype, kind):
    x = np.random.default_rng(3).integers(-20, 20, (4, 6)).astype(dtype)
    y = _builder(kind)(ag.Tensor(x.shape, dtype, name="x"), 1)
    assert y.dtype == ag.DType[dtype]
    got = _run(y, x)
    assert got.dtype == np.dtype(dtype)
    want = [{"sum": sum, "max": max, "min": min}[kind](int(v) for v in row) for row in x]
    if dtype == "int8":  # int sums wrap in the operand's type, like the kernels
        want = [((w + 128) % 256) - 128 for w in want]
    np.testing.assert_array_equal(got, np.array(want))


def test_reduce_dynamic_dims():
    batch, seq = ag.IntVar("batch", 1, 8), ag.IntVar("seq", 1, 64)
    xt = ag.Tensor([batch, seq, 6], name="x")
    outs = {"mean_seq": ops.reduce_mean(xt, 1), "sum_k": ops.reduce_sum(xt, [0, 2], keepdims=True),
            "var_last": ops.reduce_var(xt, -1, correction=1), "max_all": ops.reduce_max(xt)}
    assert outs["mean_seq"].shape[0] is batch and outs["sum_k"].shape[1] is seq
    assert outs["sum_k"].shape[0] == 1 and outs["var_last"].shape[:2] == (batch, seq)
    rng = np.random.default_rng(4)
    for b, s in [(1, 3), (5, 20)]:
        x = rng.standard_normal((b, s, 6)).astype(np.float32)
        res = ag.reference.run(outs, {"x": x})
        _close(res["mean_seq"], _truth(x, "mean", 1, False))
        _close(res["sum_k"], _truth(x, "sum", [0, 2], True))
        _close(res["var_last"], _truth(x, "var", -1, False, 1))
        _close(res["max_all"], _truth(x, "max", None, False))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", KINDS)
def test_reduce_low_precision(dtype, kind):
    x = np.random.default_rng(5).standard_normal((5, 16)).astype(ag.DType[dtype].np)
    y = _builder(kind)(ag.Tensor(x.shape, dtype, name="x"), -1)
    got = _run(y, x)
    assert got.dtype == ag.DType[dtype].np
    _close(got, _truth(x, kind, -1, False), dtype)


@pytest.mark.parametrize("axes,keepdims", [(None, False), ((0, 2), True), (1, False), ((-1, 0), False)])
def test_reduce_matches_torch(axes, keepdims):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)
    t = torch.from_numpy(x)
    dim = tuple(range(3)) if axes is None else axes
    want = {"sum": torch.sum(t, dim=dim, keepdim=keepdims), "mean": torch.mean(t, dim=dim, keepdim=keepdims),
            "max": torch.amax(t, dim=dim, keepdim=keepdims), "min": torch.amin(t, dim=dim, keepdim=keepdims),
            "var": torch.var(t, dim=dim, keepdim=keepdims, correction=1)}
    xt = ag.Tensor(x.shape, name="x")
    for kind in KINDS:
        kw = {"correction": 1} if kind == "var" else {}
        got = _run(_builder(kind)(xt, axes, keepdims=keepdims, **kw), x)
        np.testing.assert_allclose(got, want[kind].numpy(), rtol=1e-5, atol=1e-5, err_msg=kind)


# -- bad inputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("axes", [[0, 0], [1, -2]])
def test_reduce_duplicate_axes(axes):
    with pytest.raises(ShapeError, match=r"reduce_sum 'r': axis .* given twice"):
        ops.reduce_sum(ag.Tensor([2, 3, 4], name="x"), axes, name="r")


def test_reduce_axis_out_of_range():
    with pytest.raises(ShapeError, match=r"reduce_max: axis 3 is out of range for rank 3"):
        ops.reduce_max(ag.Tensor([2, 3, 4], name="x"), 3)


def test_reduce_axis_not_int():
    with pytest.raises(ShapeError, match=r"reduce_min: axis 1.5 is not an int"):
        ops.reduce_min(ag.Tensor([2, 3], name="x"), [1.5])


@pytest.mark.parametrize("kind", ["mean", "var"])
def test_reduce_float_only_on_int(kind):
    with pytest.raises(DTypeError, match=rf"reduce_{kind}.*needs a float operand"):
        _builder(kind)(ag.Tensor([2, 3], "int32", name="x"))


def test_reduce_bool_rejected():
    with pytest.raises(DTypeError, match=r"reduce_sum.*bool"):
        ops.reduce_sum(ag.Tensor([2, 3], "bool", name="x"))


def test_reduce_negative_correction():
    with pytest.raises(ShapeError, match=r"reduce_var.*correction"):
        ops.reduce_var(ag.Tensor([2, 3], name="x"), correction=-1)


def test_reduce_graph_verifies():
    xt = ag.Tensor([ag.IntVar("b", 1, 4), 3, 2], name="x")
    outs = {f"{k}{i}": _builder(k)(xt, ax, keepdims=kd)
            for i, (k, (ax, kd)) in enumerate(itertools.product(KINDS, [(None, False), ((0, -1), True)]))}
    ag.verify(ag.Graph.from_outputs(outs))


def test_reduce_empty_axis():
    n = ag.IntVar("n", 0, 4)
    xt = ag.Tensor([n, 3], name="x")
    x = np.zeros((0, 3), np.float32)
    res = ag.reference.run({"sum": ops.reduce_sum(xt, 0), "max_rows": ops.reduce_max(xt, 1)}, {"x": x})
    np.testing.assert_array_equal(res["sum"], np.zeros(3, np.float32))
    assert res["max_rows"].shape == (0,)
    with pytest.raises(RuntimeInputError, match=r"reduce_max: reduced axes \[0\].*empty"):
        ag.reference.run(ops.reduce_max(xt, 0), {"x": x})
