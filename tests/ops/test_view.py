"""View and memory ops (reshape family, permute, concat, split, slice, getitem, pad, expand) through
the oracle against independent index arithmetic, numpy indexing and torch.

These ops only move data, so every comparison is exact (tolerance 0), float16 and bfloat16 included;
a pad value is compared after rounding it to the tensor's dtype.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError, UnsupportedOpError
from aitgen.ir import FloorDiv, OpKind

BIG = 2 ** 31 - 1  # ONNX's "to the end"


def run1(y, feeds):
    return ag.reference.run({"y": y}, feeds)["y"]


def arange(shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)


def static(shape):
    return tuple(d.value for d in shape)


def check_graph(*ys):
    ag.verify(ag.Graph.from_outputs(list(ys)))  # inference re-run from the attrs agrees


# -- reshape family -------------------------------------------------------------------------
def test_reshape_static():
    x = ag.Tensor([2, 3, 4], name="x")
    xv = arange((2, 3, 4))
    cases = {"a": (ops.reshape(x, [6, 4]), (6, 4)), "b": (ops.reshape(x, [-1]), (24,)),
             "c": (x.reshape(4, -1, 2), (4, 3, 2)), "d": (x.reshape((3, 8)), (3, 8)),
             "e": (ops.reshape(x, [1, 24, 1]), (1, 24, 1))}
    outs = ag.reference.run({k: y for k, (y, _) in cases.items()}, {"x": xv})
    for k, (y, shape) in cases.items():
        assert y.producer.kind == OpKind.RESHAPE and static(y.shape) == shape
        # row-major order: element i of the flat input stays element i of the flat output
        np.testing.assert_array_equal(outs[k].ravel(), np.arange(24))
        assert outs[k].shape == shape
    check_graph(*(y for y, _ in cases.values()))


@pytest.mark.parametrize("b,s", [(1, 3), (4, 7)])
def test_reshape_dynamic(b, s):
    batch, seq = ag.IntVar("batch", 1, 8), ag.IntVar("seq", 1, 16)
    x = ag.Tensor([batch, seq, 768], name="x")
    flat = ops.reshape(x, [batch * seq, 768])
    flat2 = ops.reshape(x, [-1, 768])
    heads = ops.reshape(flat, [batch, seq, 12, 64])
    heads2 = ops.reshape(flat2, [batch, -1, 12, 64])
    assert flat.shape[0] == batch * seq and flat2.shape[0] == batch * seq
    assert heads.shape[0] is batch and heads.shape[1] is seq and heads2.shape[1] is seq
    xv = arange((b, s, 768))
    outs = ag.reference.run({"f": flat, "h": heads, "h2": heads2}, {"x": xv})
    assert outs["f"].shape == (b * s, 768)
    for i in range(b):
        for j in range(s):
            np.testing.assert_array_equal(outs["f"][i * s + j], xv[i, j])
            np.testing.assert_array_equal(outs["h"][i, j, 5], xv[i, j, 5 * 64:6 * 64])
    np.testing.assert_array_equal(outs["h2"], outs["h"])
    check_graph(heads, heads2)


def test_flatten_squeeze_unsqueeze():
    batch = ag.IntVar("batch", 1, 8)
    x = ag.Tensor([batch, 1, 3, 1, 4], name="x")
    cases = {
        "f0": (ops.flatten(x), lambda v: v.reshape(-1)),
        "f1": (ops.flatten(x, 1), lambda v: v.reshape(v.shape[0], -1)),
        "f2": (ops.flatten(x, 2, 3), lambda v: v.reshape(v.shape[0], 1, 3, 4)),
        "s": (ops.squeeze(x), lambda v: v.reshape(v.shape[0], 3, 4)),
        "s1": (ops.squeeze(x, 1), lambda v: v.reshape(v.shape[0], 3, 1, 4)),
        "s2": (ops.squeeze(x, [-2, 1]), lambda v: v.reshape(v.shape[0], 3, 4)),
        "u": (ops.unsqueeze(x, 0), lambda v: v.reshape(1, *v.shape)),
        "u2": (ops.unsqueeze(x, [1, -1]), lambda v: v.reshape(v.shape[0], 1, 1, 3, 1, 4, 1)),
    }
    assert cases["s"][0].shape[0] is batch and cases["f0"][0].shape[0] == 12 * batch
    for y, _ in cases.values():
        assert y.producer.kind == OpKind.RESHAPE
    xv = arange((2, 1, 3, 1, 4))
    outs = ag.reference.run({k: y for k, (y, _) in cases.items()}, {"x": xv})
    for k, (_, want) in cases.items():
        np.testing.assert_array_equal(outs[k], want(xv), err_msg=k)
    assert static(ops.flatten(ag.Tensor([], name="s")).shape) == (1,)
    # squeeze() without axes keeps a dynamic dim even if it may be 1 at run time
    assert ops.squeeze(ag.Tensor([batch, 1])).shape == (batch,)


def test_reshape_errors():
    batch, seq = ag.IntVar("batch", 1, 8), ag.IntVar("seq", 1, 8)
    x = ag.Tensor([2, 3, 4], name="x")
    with pytest.raises(ShapeError, match=r"^reshape.*\[2, 3, 4\].*\[5, 5\]"):
        ops.reshape(x, [5, 5])
    with pytest.raises(ShapeError, match=r"^reshape 'r'.*one -1"):
        ops.reshape(x, [-1, -1], name="r")
    with pytest.raises(ShapeError, match=r"^reshape.*-1"):
        ops.reshape(x, [5, -1])
    with pytest.raises(ShapeError, match=r"^reshape.*negative"):
        ops.reshape(x, [-2, -12])
    with pytest.raises(ShapeError, match=r"^reshape.*\[batch, seq\].*\[seq, 2\]"):  # not provably equal
        ops.reshape(ag.Tensor([batch, seq]), [seq, 2])
    with pytest.raises(ShapeError, match=r"^reshape.*-1"):
        ops.reshape(ag.Tensor([batch, 6]), [4, -1])
    with pytest.raises(ShapeError, match=r"^reshape.*squeeze dim 0"):
        ops.squeeze(x, 0)
    with pytest.raises(ShapeError, match=r"^reshape.*squeeze dim 0"):  # dynamic: not provably 1
        ops.squeeze(ag.Tensor([batch, 3]), 0)
    with pytest.raises(ShapeError, match=r"^reshape.*repeated"):
        ops.unsqueeze(x, [0, 0])
    with pytest.raises(ShapeError, match=r"^reshape.*out of range"):
        ops.unsqueeze(x, 5)
    with pytest.raises(ShapeError, match=r"^reshape.*flatten"):
        ops.flatten(x, 2, 1)
    with pytest.raises(DTypeError, match=r"^reshape"):
        ops.reshape(np.zeros(3), [3])


# -- permute --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.bool_])
def test_permute(dtype):
    x = ag.Tensor([2, 3, 4], ag.ir.as_dtype(dtype), name="x")
    xv = arange((2, 3, 4), dtype) if dtype != np.bool_ else arange((2, 3, 4)) % 3 == 0
    y1, y2, y3 = ops.permute(x, [2, 0, 1]), x.transpose(0, -1), x.permute(1, 0, 2)
    assert static(y1.shape) == (4, 2, 3) and y2.producer.kind == OpKind.PERMUTE
    outs = ag.reference.run([y1, y2, y3], {"x": xv})
    o1, o2, o3 = outs.values()
    for i in range(2):
        for j in range(3):
            for k in range(4):
                assert o1[k, i, j] == xv[i, j, k] and o2[k, j, i] == xv[i, j, k] and o3[j, i, k] == xv[i, j, k]
    assert o1.dtype == np.dtype(dtype)
    check_graph(y1, y2, y3)


def test_permute_dynamic_torch():
    torch = pytest.importorskip("torch")
    batch = ag.IntVar("batch", 1, 8)
    x = ag.Tensor([batch, 5, 6, 7], name="x")
    y = ops.permute(x, [0, 2, 3, 1])
    assert y.shape[0] is batch
    for n in (1, 3):
        xv = arange((n, 5, 6, 7))
        np.testing.assert_array_equal(run1(y, {"x": xv}), torch.from_numpy(xv).permute(0, 2, 3, 1).numpy())


def test_permute_errors():
    x = ag.Tensor([2, 3, 4], name="x")
    with pytest.raises(ShapeError, match=r"^permute.*entries"):
        ops.permute(x, [0, 1])
    with pytest.raises(ShapeError, match=r"^permute 'p'.*repeated"):
        ops.permute(x, [0, 1, 1], name="p")
    with pytest.raises(ShapeError, match=r"^permute.*out of range"):
        ops.transpose(x, 0, 3)


# -- concat / split -------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_static(axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(n + i if d == axis % 3 else n for d, n in enumerate(s)) for i, s in enumerate(shapes)]
    xs = [ag.Tensor(s, name=f"x{i}") for i, s in enumerate(shapes)]
    vals = [arange(s) + 1000 * i for i, s in enumerate(shapes)]
    y = ops.concat(xs, axis)
    got = run1(y, {f"x{i}": v for i, v in enumerate(vals)})
    ax = axis % 3
    offset = 0
    for v in vals:  # each input occupies the next block along the axis
        idx = [slice(None)] * 3
        idx[ax] = slice(offset, offset + v.shape[ax])
        np.testing.assert_array_equal(got[tuple(idx)], v)
        offset += v.shape[ax]
    assert got.shape[ax] == offset


def test_concat_split_dynamic():
    batch, s1, s2 = ag.IntVar("batch", 1, 4), ag.IntVar("s1", 1, 8), ag.IntVar("s2", 1, 8)
    a, b = ag.Tensor([batch, s1, 2], "float16", name="a"), ag.Tensor([batch, s2, 2], "float16", name="b")
    y = ops.concat([a, b], 1)
    assert y.shape[1] == s1 + s2
    pa, pb = ops.split(y, [s1, s2], 1)
    assert pa.producer is pb.producer and pa.producer.kind == OpKind.SPLIT
    assert pa.shape[1] is s1 and pb.shape[1] is s2
    for n, m, k in [(1, 1, 8), (3, 5, 2)]:
        av, bv = arange((n, m, 2), np.float16), -arange((n, k, 2), np.float16)
        outs = ag.reference.run({"y": y, "pa": pa, "pb": pb}, {"a": av, "b": bv})
        assert outs["y"].shape == (n, m + k, 2) and outs["y"].dtype == np.float16
        np.testing.assert_array_equal(outs["y"][:, :m], av)
        np.testing.assert_array_equal(outs["y"][:, m:], bv)
        np.testing.assert_array_equal(outs["pa"], av)
        np.testing.assert_array_equal(outs["pb"], bv)
    check_graph(pa, pb)


def test_split_static_torch():
    x = ag.Tensor([4, 6, 3], name="x")
    xv = arange((4, 6, 3))
    parts = ops.split(x, 3, axis=1)
    assert [static(p.shape) for p in parts] == [(4, 2, 3)] * 3
    uneven = ops.split(x, [1, 0, 5], axis=-2)
    outs = ag.reference.run(parts + uneven, {"x": xv})
    got = list(outs.values())
    for i in range(3):
        np.testing.assert_array_equal(got[i], xv[:, 2 * i:2 * i + 2])
    np.testing.assert_array_equal(got[3], xv[:, :1])
    assert got[4].shape == (4, 0, 3)
    np.testing.assert_array_equal(got[5], xv[:, 1:])
    torch = pytest.importorskip("torch")
    for g, t in zip(got[3:], torch.split(torch.from_numpy(xv), [1, 0, 5], dim=1)):
        np.testing.assert_array_equal(g, t.numpy())


def test_concat_split_errors():
    batch = ag.IntVar("batch", 1, 8)
    a, b = ag.Tensor([2, 3], name="a"), ag.Tensor([2, 4], name="b")
    with pytest.raises(ShapeError, match=r"^concat.*dim 1 differs"):
        ops.concat([a, b], 0)
    with pytest.raises(DTypeError, match=r"^concat.*float16"):
        ops.concat([a, ag.Tensor([2, 3], "float16")], 0)
    with pytest.raises(ShapeError, match=r"^concat.*rank"):
        ops.concat([a, ag.Tensor([2, 3, 1])], 0)
    with pytest.raises(ShapeError, match=r"^concat.*at least one"):
        ops.concat([], 0)
    with pytest.raises(ShapeError, match=r"^concat.*out of range"):
        ops.concat([a, a], 2)
    with pytest.raises(ShapeError, match=r"^split.*equal parts"):
        ops.split(b, 3, axis=1)
    with pytest.raises(ShapeError, match=r"^split.*equal parts"):  # batch may be odd
        ops.split(ag.Tensor([batch, 2]), 2, axis=0)
    with pytest.raises(ShapeError, match=r"^split 'sp'.*sum to 5"):
        ops.split(b, [2, 3], axis=1, name="sp")
    with pytest.raises(ShapeError, match=r"^split.*negative"):
        ops.split(b, [5, -1], axis=1)


# -- slice (ONNX) ---------------------------------------------------------------------------
def onnx_slice(x, starts, ends, axes, steps):
    """The ONNX Slice spec written out: clamp per direction, then list the indices one by one."""
    idx = [list(range(n)) for n in x.shape]
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[a]
        s, e = s + n if s < 0 else s, e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
        picked, i = [], s
        while (st > 0 and i < e) or (st < 0 and i > e):
            picked.append(i)
            i += st
        idx[a] = picked
    out = np.empty([len(i) for i in idx], x.dtype)
    for pos in np.ndindex(*out.shape):
        out[pos] = x[tuple(idx[d][p] for d, p in enumerate(pos))]
    return out


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [0], [1]), ([-3], [BIG], [1], [1]), ([0, 1], [BIG, -1], [1, 2], [2, 1]),
    ([-1], [-BIG], [2], [-1]), ([4], [0], [1], [-2]), ([10], [20], [0], [1]), ([3], [1], [0], [1]),
    ([-10], [-20], [2], [-1]), ([2, 0, 0], [0, 5, 5], None, [-1, 1, -3]), ([-100], [100], [-1], [3]),
])
def test_slice_static(starts, ends, axes, steps):
    x = ag.Tensor([4, 5, 6], name="x")
    xv = arange((4, 5, 6))
    y = ops.slice(x, starts, ends, axes, steps)
    want = onnx_slice(xv, starts, ends, axes if axes is not None else list(range(len(starts))), steps)
    assert static(y.shape) == want.shape
    np.testing.assert_array_equal(run1(y, {"x": xv}), want)
    check_graph(y)


@settings(deadline=None, max_examples=40)
@given(st.data())
def test_slice_random(data):
    shape = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1))
    bound = st.one_of(st.integers(-8, 8), st.sampled_from([BIG, -BIG]))
    starts = [data.draw(bound) for _ in axes]
    ends = [data.draw(bound) for _ in axes]
    steps = [data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3])) for _ in axes]
    x = ag.Tensor(shape, "bfloat16", name="x")
    xv = arange(shape, ml_dtypes.bfloat16)
    y = ops.slice(x, starts, ends, axes, steps)
    want = onnx_slice(xv, starts, ends, axes, steps)
    got = run1(y, {"x": xv})
    assert static(y.shape) == want.shape == got.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [4, 9])
def test_slice_dynamic(n):
    seq = ag.IntVar("seq", 3, 12)
    x = ag.Tensor([2, seq], name="x")
    full = ops.slice(x, [0], [BIG], [1])
    to_dim = ops.slice(x, [0], [seq], [1])
    tail = ops.slice(x, [1], [BIG], [1])
    last2 = ops.slice(x, [-2], [BIG], [1])
    head = ops.slice(x, [0], [3], [1])
    inner = ops.slice(x, [1], [-1], [1])
    strided = ops.slice(x, [0], [BIG], [1], [2])
    rev = ops.slice(x, [-1], [-BIG], [1], [-1])
    rev2 = ops.slice(x, [-2], [0], [1], [-2])
    rev3 = ops.slice(x, [2], [-BIG], [1], [-1])  # a start below the lower bound, backwards
    from_big = ops.slice(x, [-BIG], [-1], [1], [1])  # a start that always clamps to 0
    assert full.shape[1] is seq and to_dim.shape[1] is seq
    assert tail.shape[1] == seq - 1 and inner.shape[1] == seq - 2 and rev.shape[1] is seq
    assert last2.shape[1] == 2 and head.shape[1] == 3 and isinstance(strided.shape[1], FloorDiv)
    assert rev3.shape[1] == 3 and from_big.shape[1] == seq - 1
    ys = [full, to_dim, tail, last2, head, inner, strided, rev, rev2, rev3, from_big]
    xv = arange((2, n))
    outs = list(ag.reference.run(ys, {"x": xv}).values())
    for got, y, (s, e, st_) in zip(outs, ys, [(0, BIG, 1), (0, n, 1), (1, BIG, 1), (-2, BIG, 1), (0, 3, 1),
                                             (1, -1, 1), (0, BIG, 2), (-1, -BIG, -1), (-2, 0, -2),
                                             (2, -BIG, -1), (-BIG, -1, 1)]):
        want = onnx_slice(xv, [s], [e], [1], [st_])
        np.testing.assert_array_equal(got, want)
        assert got.shape[1] == y.shape[1].evaluate({seq: n})
    check_graph(*ys)


def test_slice_errors():
    seq = ag.IntVar("seq", 2, 12)
    x, d = ag.Tensor([4, 5], name="x"), ag.Tensor([seq], name="d")
    with pytest.raises(ShapeError, match=r"^slice.*step cannot be 0"):
        ops.slice(x, [0], [2], [0], [0])
    with pytest.raises(ShapeError, match=r"^slice.*differ in length"):
        ops.slice(x, [0, 1], [2], [0])
    with pytest.raises(ShapeError, match=r"^slice.*repeated"):
        ops.slice(x, [0, 1], [2, 3], [0, 0])
    with pytest.raises(ShapeError, match=r"^slice.*out of range"):
        ops.slice(x, [0], [2], [2])
    # on a dynamic dim, an end inside [lb, ub] or a start deeper than lb needs run-time clamping
    with pytest.raises(ShapeError, match=r"^slice 's'.*clamping.*seq"):
        ops.slice(d, [0], [5], name="s")
    with pytest.raises(ShapeError, match=r"^slice.*clamping"):
        ops.slice(d, [-3], [BIG])
    with pytest.raises(ShapeError, match=r"^slice.*not expressible"):
        ops.slice(d, [0], [seq - 1 + seq])


# -- getitem --------------------------------------------------------------------------------
INDEXES = [
    1, -1, (slice(1, 3),), (slice(None), 2), (slice(None, None, -1),), (Ellipsis, None),
    (None, Ellipsis, 0), (1, slice(None, None, 2), None, -1), (slice(-10, None, -1),), (Ellipsis,),
    (slice(None), slice(None)), (slice(3, 1, -1), Ellipsis, slice(1, None, 3)), (slice(5, 1),),
    (None, None), (0, 0, 0), (slice(-2, 100),),
]


@pytest.mark.parametrize("idx", INDEXES, ids=[repr(i) for i in INDEXES])
def test_getitem(idx):
    x = ag.Tensor([4, 5, 6], "float16", name="x")
    xv = arange((4, 5, 6), np.float16)
    y = x[idx]
    want = xv[idx]  # numpy's basic indexing is the spec
    assert static(y.shape) == want.shape
    got = run1(y, {"x": xv})
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float16


@pytest.mark.parametrize("n", [2, 7])
def test_getitem_dynamic_torch(n):
    torch = pytest.importorskip("torch")
    batch, seq = ag.IntVar("batch", 1, 4), ag.IntVar("seq", 2, 16)
    x = ag.Tensor([batch, seq, 8], name="x")
    last, first, shifted = x[:, -1], x[:, 0], x[:, 1:, None, ::2]
    assert x[:, :seq] is x and x[:, :seq, :4].shape[1] is seq  # the dim itself as a stop
    assert last.shape[0] is batch and static(last.shape[1:]) == (8,)
    assert shifted.shape[1] == seq - 1 and static(shifted.shape[2:]) == (1, 4)
    xv = arange((3, n, 8))
    t = torch.from_numpy(xv)
    outs = ag.reference.run({"l": last, "f": first, "s": shifted}, {"x": xv})
    np.testing.assert_array_equal(outs["l"], t[:, -1].numpy())
    np.testing.assert_array_equal(outs["f"], t[:, 0].numpy())
    np.testing.assert_array_equal(outs["s"], t[:, 1:, None, ::2].numpy())
    check_graph(last, first, shifted)


def test_getitem_errors():
    x = ag.Tensor([4, 5], name="x")
    with pytest.raises(ShapeError, match=r"^getitem.*too many"):
        x[0, 0, 0]
    with pytest.raises(ShapeError, match=r"^getitem.*out of range"):
        x[4]
    with pytest.raises(ShapeError, match=r"^getitem.*single ellipsis"):
        x[..., ...]
    with pytest.raises(ShapeError, match=r"^getitem.*step cannot be 0"):
        x[::0]
    with pytest.raises(UnsupportedOpError, match=r"^getitem.*gather"):
        x[ag.Tensor([2], "int64")]
    with pytest.raises(ShapeError, match=r"^slice.*clamping"):  # x[:, 3] needs seq > 3 always
        ag.Tensor([1, ag.IntVar("seq", 2, 8)])[:, 3]


# -- pad ------------------------------------------------------------------------------------
def pad_ref(x, pairs, mode, value):
    """Padding by index arithmetic: each output index maps to a source index or to the value."""
    def source(i, n, lo):
        i -= lo
        if 0 <= i < n:
            return i
        if mode == "constant":
            return None
        if mode == "edge":
            return 0 if i < 0 else n - 1
        return -i if i < 0 else 2 * (n - 1) - i  # reflect, without repeating the edge
    shape = [n + lo + hi for n, (lo, hi) in zip(x.shape, pairs)]
    out = np.empty(shape, x.dtype)
    for pos in np.ndindex(*shape):
        src = [source(p, n, lo) for p, n, (lo, _) in zip(pos, x.shape, pairs)]
        out[pos] = value if None in src else x[tuple(src)]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int32])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode, dtype):
    x = ag.Tensor([3, 4, 5], ag.ir.as_dtype(dtype), name="x")
    xv = arange((3, 4, 5), dtype)
    pairs = [(0, 0), (2, 1), (3, 4)]
    y_pairs = ops.pad(x, pairs, mode, value=2.25)
    y_flat = ops.pad(x, [3, 4, 2, 1], mode, value=2.25)  # torch order: last dim first
    stored = np.array(2.25).astype(dtype).item()  # the value, rounded into the tensor's dtype
    want = pad_ref(xv, pairs, mode, stored)
    outs = ag.reference.run([y_pairs, y_flat], {"x": xv})
    for got in outs.values():
        assert got.shape == want.shape and got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)
    check_graph(y_pairs)


def test_pad_torch_and_dynamic():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    seq = ag.IntVar("seq", 3, 10)
    x = ag.Tensor([2, seq, 4], name="x")
    ys = {m: ops.pad(x, [1, 2, 2, 0], mode=m) for m in ("constant", "reflect", "replicate")}
    assert ys["reflect"].shape[1] == seq + 2
    for n in (3, 6):
        xv = arange((2, n, 4))
        outs = ag.reference.run(ys, {"x": xv})
        for m, got in outs.items():
            np.testing.assert_array_equal(got, F.pad(torch.from_numpy(xv), [1, 2, 2, 0], mode=m).numpy())


def test_pad_errors():
    seq = ag.IntVar("seq", 2, 8)
    x = ag.Tensor([3, 4], name="x")
    with pytest.raises(ShapeError, match=r"^pad.*negative"):
        ops.pad(x, [(0, 0), (-1, 0)])
    with pytest.raises(ShapeError, match=r"^pad.*reflect.*smaller"):
        ops.pad(x, [4, 0], mode="reflect")
    with pytest.raises(ShapeError, match=r"^pad.*reflect.*smaller"):  # seq may be 2
        ops.pad(ag.Tensor([seq]), [2, 2], mode="reflect")
    with pytest.raises(ShapeError, match=r"^pad.*edge.*non-empty"):
        ops.pad(ag.Tensor([0, 2]), [(1, 0), (0, 0)], mode="edge")
    with pytest.raises(ShapeError, match=r"^pad.*pair per dim"):
        ops.pad(x, [1, 2, 3])
    with pytest.raises(ShapeError, match=r"^pad 'p'.*mode"):
        ops.pad(x, [1, 1], mode="circular", name="p")


# -- expand ---------------------------------------------------------------------------------
@pytest.mark.parametrize("src,target", [
    ((3, 1), (3, 4)), ((1,), (2, 3, 5)), ((2, 1, 4), (3, 2, 6, 4)), ((), (2, 2)), ((3, 1), (-1, 5)),
    ((1, 4), (2, -1, -1)), ((3, 4), (3, 4)), ((1, 1), (0, 3)),
])
def test_expand(src, target):
    x = ag.Tensor(src, "bfloat16", name="x")
    xv = arange(src, ml_dtypes.bfloat16)
    y = ops.expand(x, target)
    lead = len(target) - len(src)
    shape = tuple(src[i - lead] if t == -1 else t for i, t in enumerate(target))
    assert static(y.shape) == shape
    got = run1(y, {"x": xv})
    for pos in np.ndindex(*shape):  # aligned from the right; size-1 source dims read index 0
        srcpos = tuple(0 if n == 1 else p for p, n in zip(pos[lead:], src))
        assert got[pos] == xv[srcpos]


def test_expand_dynamic_torch():
    torch = pytest.importorskip("torch")
    batch, seq = ag.IntVar("batch", 1, 4), ag.IntVar("seq", 1, 8)
    x = ag.Tensor([batch, 1, 1, seq], name="mask")
    y = ops.expand(x, [batch, 2, seq, -1])
    assert y.shape[0] is batch and y.shape[2] is seq and y.shape[3] is seq
    for b, s in [(1, 1), (3, 5)]:
        xv = arange((b, 1, 1, s))
        np.testing.assert_array_equal(run1(y, {"mask": xv}), torch.from_numpy(xv).expand(b, 2, s, s).numpy())
    check_graph(y)


def test_expand_errors():
    batch = ag.IntVar("batch", 1, 4)
    x = ag.Tensor([3, 1], name="x")
    with pytest.raises(ShapeError, match=r"^expand.*size 3 cannot expand to 4"):
        ops.expand(x, [4, 5])
    with pytest.raises(ShapeError, match=r"^expand.*fewer dims"):
        ops.expand(x, [3])
    with pytest.raises(ShapeError, match=r"^expand.*-1 at a new leading"):
        ops.expand(x, [-1, 3, 1])
    with pytest.raises(ShapeError, match=r"^expand 'e'.*batch cannot expand to 4"):
        ops.expand(ag.Tensor([batch]), [4], name="e")


def test_slice_static_table_to_symbolic_length():
    # positions[:seq]: a constant table cut to a dynamic length (position embeddings)
    seq = ag.IntVar("seq", 1, 16)
    table = np.arange(20 * 3, dtype=np.float32).reshape(20, 3)
    y = ops.slice(ag.constant(table, name="pos"), [0], [seq], axes=[0], name="rows")
    assert y.shape == (seq, ag.IntImm(3))
    x = ag.Tensor([seq, 3], name="x")
    for n in (1, 7, 16):
        got = ag.reference.run(x + y, {"x": np.zeros((n, 3), np.float32)})["output_0"]
        np.testing.assert_array_equal(got, table[:n])  # exact: a copy
    with pytest.raises(ShapeError, match="slice 'bad'.*upper bound"):
        ops.slice(ag.constant(table[:8]), [0], [seq], axes=[0], name="bad")
