"""Softmax against an independent float64 exp(x - logsumexp(x)) and against torch.

Tolerances (output vs float64 truth): float32 rtol=1e-5, atol=1e-6 (outputs lie in [0, 1]);
float16 rtol=atol=2e-3; bfloat16 rtol=atol=2e-2. Low-precision truth uses the rounded inputs.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError

TOL = {"float32": (1e-5, 1e-6), "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2)}


def _truth(x, axis):
    x = x.astype(np.float64)
    return np.exp(x - logsumexp(x, axis=axis, keepdims=True))


def _close(got, want, dtype="float32"):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def _run(y, x):
    return ag.reference.run(y, {"x": x})["output_0"]


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 3, 4, 5)])
def test_softmax_every_axis(shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    xt = ag.Tensor(shape, name="x")
    for axis in range(-len(shape), len(shape)):
        y = ops.softmax(xt, axis)
        assert y.producer.attrs.axis == axis % len(shape) and y.shape == xt.shape
        _close(_run(y, x), _truth(x, axis))


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_softmax_random_shapes(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    _close(_run(ops.softmax(ag.Tensor(shape, name="x"), axis), x), _truth(x, axis))


def test_softmax_large_logits_stay_finite():
    x = np.array([[1000.0, 999.0, -1000.0], [-5e4, -5e4 + 1, -5e4 + 2]], np.float32)
    got = _run(ops.softmax(ag.Tensor(x.shape, name="x")), x)
    assert np.isfinite(got).all()
    _close(got, _truth(x, -1))


def test_softmax_partial_neg_inf_row():
    x = np.array([[0.0, -np.inf, 1.0]], np.float32)
    _close(_run(ops.softmax(ag.Tensor(x.shape, name="x")), x), _truth(x, -1))


def test_softmax_dynamic_dims():
    batch, seq = ag.IntVar("batch", 1, 4), ag.IntVar("seq", 1, 64)
    xt = ag.Tensor([batch, 2, seq, seq], name="x")
    y_last, y_dyn = ops.softmax(xt, -1), ops.softmax(xt, 0)
    assert y_last.shape[0] is batch and y_last.shape[3] is seq
    rng = np.random.default_rng(1)
    for b, s in [(1, 3), (3, 10)]:
        x = rng.standard_normal((b, 2, s, s)).astype(np.float32)
        res = ag.reference.run({"a": y_last, "b": y_dyn}, {"x": x})
        _close(res["a"], _truth(x, -1))
        _close(res["b"], _truth(x, 0))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("axis", [0, 1])
def test_softmax_low_precision(dtype, axis):
    x = (np.random.default_rng(2).standard_normal((6, 33)) * 4).astype(ag.DType[dtype].np)
    got = _run(ops.softmax(ag.Tensor(x.shape, dtype, name="x"), axis), x)
    assert got.dtype == ag.DType[dtype].np
    _close(got, _truth(x, axis), dtype)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_matches_torch(axis):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    got = _run(ops.softmax(ag.Tensor(x.shape, name="x"), axis), x)
    np.testing.assert_allclose(got, torch.softmax(torch.from_numpy(x), dim=axis).numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_axis_out_of_range():
    with pytest.raises(ShapeError, match=r"softmax 'sm': axis 3 is out of range for rank 3"):
        ops.softmax(ag.Tensor([2, 3, 4], name="x"), 3, name="sm")
    with pytest.raises(ShapeError, match=r"softmax.*axis -4"):
        ops.softmax(ag.Tensor([2, 3, 4], name="x"), -4)


def test_softmax_int_operand():
    with pytest.raises(DTypeError, match=r"softmax.*needs a float operand"):
        ops.softmax(ag.Tensor([2, 3], "int32", name="x"))


def test_softmax_unnormalised_attrs_rejected():
    # Passes build ops from attrs directly; inference must still reject a negative axis.
    from aitgen.ops.registry import make_op1
    from aitgen.ops.softmax import SoftmaxAttrs
    with pytest.raises(ShapeError, match=r"softmax.*normalised"):
        make_op1(ag.OpKind.SOFTMAX, [ag.Tensor([2, 3], name="x")], SoftmaxAttrs(-1))
