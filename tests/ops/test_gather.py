"""gather / embedding through the oracle against explicit index loops and torch.

Gather only copies elements, so every comparison is exact (tolerance 0), float16/bfloat16 included.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, RuntimeInputError, ShapeError
from aitgen.ops.registry import Category, get_opdef


def run1(y, feeds):
    return ag.reference.run({"y": y}, feeds)["y"]


def arange(shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)


def take_ref(x, idx, axis):
    """out[a..., i..., b...] = x[a..., idx[i...] (wrapped if negative), b...], element by element."""
    axis %= x.ndim
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    out = np.empty(shape, x.dtype)
    for pos in np.ndindex(*shape):
        k = int(idx[pos[axis:axis + idx.ndim]])
        k = k + x.shape[axis] if k < 0 else k
        out[pos] = x[pos[:axis] + (k,) + pos[axis + idx.ndim:]]
    return out


def test_registered():
    assert get_opdef(ag.OpKind.GATHER).category == Category.GATHER


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_shape", [(), (3,), (2, 3)])
def test_gather(idx_shape, axis, idx_dtype):
    x = ag.Tensor([4, 5, 6], name="x")
    i = ag.Tensor(idx_shape, ag.ir.as_dtype(idx_dtype), name="i")
    xv = arange((4, 5, 6))
    n = xv.shape[axis]
    iv = np.random.default_rng(0).integers(-n, n, idx_shape).astype(idx_dtype)  # negatives wrap
    y = ops.gather(x, i, axis)
    want = take_ref(xv, iv, axis)
    assert tuple(d.value for d in y.shape) == want.shape
    np.testing.assert_array_equal(run1(y, {"x": xv, "i": iv}), want)
    ag.verify(ag.Graph.from_outputs([y]))


@settings(deadline=None, max_examples=20)
@given(st.data())
def test_gather_random(data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    idx_shape = data.draw(st.lists(st.integers(0, 3), max_size=2))
    n = shape[axis]
    iv = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(idx_shape)),
                                     max_size=int(np.prod(idx_shape)))), np.int64).reshape(idx_shape)
    x, i = ag.Tensor(shape, "bfloat16", name="x"), ag.Tensor(idx_shape, "int64", name="i")
    xv = arange(shape, ml_dtypes.bfloat16)
    got = run1(ops.gather(x, i, axis), {"x": xv, "i": iv})
    assert got.dtype == xv.dtype
    np.testing.assert_array_equal(got, take_ref(xv, iv, axis))


@pytest.mark.parametrize("b,s", [(1, 3), (4, 9)])
def test_embedding_dynamic_torch(b, s):
    batch, seq = ag.IntVar("batch", 1, 8), ag.IntVar("seq", 1, 16)
    weight_v = np.random.default_rng(1).standard_normal((11, 6)).astype(np.float16)
    ids = ag.Tensor([batch, seq], "int32", name="ids")
    y = ops.embedding(ids, ag.constant(weight_v, name="wte"))
    assert y.shape[0] is batch and y.shape[1] is seq and y.shape[2] == 6 and y.dtype == ag.DType.float16
    iv = np.random.default_rng(2).integers(0, 11, (b, s)).astype(np.int32)
    got = run1(y, {"ids": iv})
    for p in np.ndindex(b, s):  # row ids[p] of the table
        np.testing.assert_array_equal(got[p], weight_v[iv[p]])
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.embedding(torch.from_numpy(iv.astype(np.int64)), torch.from_numpy(weight_v))
    np.testing.assert_array_equal(got, want.numpy())


def test_gather_torch_index_select():
    torch = pytest.importorskip("torch")
    x, i = ag.Tensor([3, 7], name="x"), ag.Tensor([4], "int64", name="i")
    xv, iv = arange((3, 7)), np.array([6, 0, 6, 2])
    got = run1(ops.gather(x, i, axis=1), {"x": xv, "i": iv})
    np.testing.assert_array_equal(got, torch.index_select(torch.from_numpy(xv), 1, torch.from_numpy(iv)).numpy())


def test_gather_int_and_bool_data():
    x, i = ag.Tensor([5], "bool", name="x"), ag.Tensor([3], "int32", name="i")
    xv, iv = np.array([True, False, False, True, False]), np.array([3, -5, 1], np.int32)
    np.testing.assert_array_equal(run1(ops.gather(x, i), {"x": xv, "i": iv}), [True, True, False])


def test_errors():
    x = ag.Tensor([4, 5], name="x")
    with pytest.raises(DTypeError, match=r"^gather.*int32 or int64.*float32"):
        ops.gather(x, ag.Tensor([2], "float32"))
    with pytest.raises(DTypeError, match=r"^gather 'g'.*int8"):
        ops.gather(x, ag.Tensor([2], "int8"), name="g")
    with pytest.raises(ShapeError, match=r"^gather.*out of range"):
        ops.gather(x, ag.Tensor([2], "int64"), axis=2)
    with pytest.raises(ShapeError, match=r"^gather.*rank-0"):
        ops.gather(ag.Tensor([], name="s"), ag.Tensor([2], "int64"))
    with pytest.raises(ShapeError, match=r"^embedding.*2-D"):
        ops.embedding(ag.Tensor([2], "int64"), ag.Tensor([4], name="w"))
    with pytest.raises(DTypeError, match=r"^gather.*not a Tensor"):
        ops.gather(x, np.array([1]))
    i = ag.Tensor([2], "int64", name="i")
    y = ops.gather(x, i, axis=1)
    with pytest.raises(RuntimeInputError, match=r"^gather.*index 5.*size 5"):
        run1(y, {"x": arange((4, 5)), "i": np.array([0, 5])})
    with pytest.raises(RuntimeInputError, match=r"^gather.*index -6"):
        run1(y, {"x": arange((4, 5)), "i": np.array([-6, 0])})
