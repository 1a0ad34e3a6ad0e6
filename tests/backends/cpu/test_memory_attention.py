"""CPU memory-op kernels (permute, slice, concat, split, pad, expand, gather) and the fused attention
kernel against the oracle: random shapes, every dtype, dynamic dims, bad indices.

Memory ops move bytes, so they must match the oracle bit for bit (compared as raw bytes). Attention
computes in float32 like the oracle, in a different order (blocked online softmax, its own dot
products): float32 within rtol 1e-5 / atol 1e-5, float16 within 2e-3, bfloat16 within 1.6e-2 (the
oracle and the kernel each round the float32 result once; tolerances cover one ulp and the order).
Many cases go into one model per test, since each build costs a compiler run per unique kernel.
"""
import json

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import RuntimeInputError

ALL_DTYPES = ["float32", "float16", "bfloat16", "int8", "int32", "int64", "bool"]


def _data(rng, shape, dtype):
    dt = ag.DType[dtype].np
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-100, 100, shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def _check_bytes(got, want, names):
    for k in names:
        assert got[k].shape == want[k].shape, (k, got[k].shape, want[k].shape)
        assert got[k].dtype == want[k].dtype, k
        assert np.array_equal(np.ascontiguousarray(got[k]).view(np.uint8),
                              np.ascontiguousarray(want[k]).view(np.uint8)), k


class _Cases:
    """Graph inputs with random data, and the outputs to compare."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.feeds, self.outs = {}, {}

    def input(self, shape, dtype="float32", data=None):
        name = f"in{len(self.feeds)}"
        self.feeds[name] = _data(self.rng, shape, dtype) if data is None else data
        return ag.Tensor(list(shape), dtype, name=name)

    def shape(self, rank, lo=1, hi=7):
        return [int(v) for v in self.rng.integers(lo, hi + 1, rank)]


def _random_memory_ops(c: _Cases, dtype="float32"):
    rng = c.rng
    for i in range(3):
        shape = c.shape(int(rng.integers(1, 6)))
        c.outs[f"permute{i}"] = ops.permute(c.input(shape, dtype), [int(p) for p in rng.permutation(len(shape))])
    # BERT's head split and merge, and transposes that move the contiguous dim (tiled, ragged tiles)
    c.outs["heads"] = ops.permute(c.input([2, 37, 3, 16], dtype), [0, 2, 1, 3])
    c.outs["keys_t"] = ops.permute(c.input([2, 37, 3, 16], dtype), [0, 2, 3, 1])
    c.outs["transpose"] = ops.transpose(c.input([45, 70], dtype), 0, 1)
    for i in range(3):
        shape = c.shape(int(rng.integers(1, 5)), 2, 9)
        idx = []
        for n in shape:
            step = int(rng.choice([1, 2, -1, -3]))
            a, b = sorted(int(v) for v in rng.integers(-n, n + 1, 2))
            idx.append(slice(a, b, step) if step > 0 else slice(b, a, step))
        c.outs[f"slice{i}"] = c.input(shape, dtype)[tuple(idx)]
    c.outs["slice_onnx"] = ops.slice(c.input([6, 9], dtype), [5, -2], [0, 1], axes=[0, 1], steps=[-2, -3])
    for i, axis in enumerate([0, 1, -1]):
        shape = c.shape(3)
        parts = []
        for _ in range(3):
            s = list(shape)
            s[axis] = int(rng.integers(1, 5))
            parts.append(c.input(s, dtype))
        c.outs[f"concat{i}"] = ops.concat(parts, axis=axis)
    for i, axis in enumerate([0, 2]):
        shape = c.shape(3, 3, 7)
        k = shape[axis]
        cut = sorted(int(v) for v in rng.integers(0, k + 1, 2))
        sizes = [cut[0], cut[1] - cut[0], k - cut[1]]
        for j, p in enumerate(ops.split(c.input(shape, dtype), sizes, axis=axis)):
            c.outs[f"split{i}_{j}"] = p
    c.outs["split_equal_0"], c.outs["split_equal_1"] = ops.split(c.input([4, 6], dtype), 2, axis=1)
    for mode in ("constant", "reflect", "edge"):
        shape = c.shape(3, 3, 6)
        pads = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in shape]
        c.outs[f"pad_{mode}"] = ops.pad(c.input(shape, dtype), pads, mode=mode, value=2.5)
    c.outs["pad_nhwc"] = ops.pad(c.input([2, 5, 6, 3], dtype), [0, 0, 1, 1, 2, 0])  # torch order: W, then H
    c.outs["expand_lead"] = ops.expand(c.input([3, 1, 4], dtype), [2, 3, 5, 4])
    c.outs["expand_inner"] = ops.expand(c.input([3, 4, 1], dtype), [3, 4, 7])
    c.outs["expand_scalar"] = ops.expand(c.input([1], dtype), [2, 3])
    for i, (axis, itype, ishape) in enumerate([(0, "int64", [2, 3]), (1, "int32", [5]), (2, "int64", []),
                                               (-1, "int32", [2, 2])]):
        x = c.input(c.shape(3, 2, 6), dtype)
        n = x.shape[axis].value
        ids = c.input(ishape, itype, data=rng.integers(-n, n, ishape).astype(itype))
        c.outs[f"gather{i}"] = ops.gather(x, ids, axis=axis)


@pytest.mark.parametrize("seed", [0, 1])
def test_memory_ops_random_shapes(tmp_path, seed):
    c = _Cases(seed)
    _random_memory_ops(c)
    model = ag.compile_model(c.outs, target="cpu", workdir=tmp_path / "m")
    _check_bytes(model.run(c.feeds), ag.reference.run(c.outs, c.feeds), c.outs)


def test_memory_ops_every_dtype_byte_exact(tmp_path):
    # Kernels move elements as unsigned integers of the dtype's size; one op per kernel mode.
    c = _Cases(7)
    outs = {}
    for dt in ALL_DTYPES:
        c.outs = {}
        x = c.input([3, 4, 5], dt)
        c.outs["perm"] = ops.permute(x, [2, 0, 1])            # tiled transpose
        c.outs["slice"] = x[::-1, 1:, ::2]                     # strided, reversed
        c.outs["concat"] = ops.concat([x, c.input([3, 2, 5], dt)], axis=1)  # contiguous rows
        c.outs["pad"] = ops.pad(x, [1, 2, 0, 1], value=2.5)   # 2.5 as the dtype stores it
        # a value whose float16 differs when rounded directly or through float32 (the oracle's way)
        c.outs["pad_rounding"] = ops.pad(x, [0, 1], value=-1.9565429576271605)
        c.outs["expand"] = ops.expand(ops.reshape(x[:, :, 0], [3, 4, 1]), [2, 3, 4, 3])  # broadcast fill
        c.outs["gather"] = ops.gather(x, c.input([2], "int64", data=np.array([-1, 1])), axis=1)
        outs.update({f"{dt}_{k}": v for k, v in c.outs.items()})
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    _check_bytes(model.run(c.feeds), ag.reference.run(outs, c.feeds), outs)


def test_memory_ops_dynamic_dims(tmp_path):
    n, s = ag.IntVar("n", 1, 64), ag.IntVar("s", 2, 40)
    x = ag.Tensor([n, s, 6], name="x")
    x2 = ag.Tensor([n, 3, 6], name="x2")
    y = ag.Tensor([1, s, 1], name="y")
    pos = ag.Tensor([50, 6], name="pos")
    ids = ag.Tensor([n, s], "int64", name="ids")
    table = ag.Tensor([20, 6], name="table")
    outs = {
        "perm": ops.permute(x, [1, 0, 2]),
        "perm_inner": ops.permute(x, [2, 1, 0]),
        "tail": x[:, 1:, :],
        "last2": x[:, -2:],             # negative start on a dynamic dim, counted at run time
        "reversed": x[:, ::-1, ::-1],   # negative steps with stop None
        "every_other_back": x[:, ::-2],
        "positions": ops.slice(pos, [0], [s], axes=[0]),  # a symbolic stop
        "concat": ops.concat([x, x2], axis=1),
        "split_a": ops.split(x, [2, 4], axis=2)[0],
        "split_b": ops.split(x, [2, 4], axis=2)[1],
        "pad": ops.pad(x, ((0, 0), (1, 2), (0, 1))),
        "pad_reflect": ops.pad(x, ((0, 0), (1, 1), (2, 0)), mode="reflect"),
        "pad_edge": ops.pad(x, ((1, 0), (0, 3), (0, 0)), mode="edge"),
        "expand": ops.expand(y, [n, s, 4]),
        "embedding": ops.embedding(ids, table),
        "gather_dyn_axis": ops.gather(x, ag.Tensor([3], "int32", name="pick"), axis=1),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    rng = np.random.default_rng(3)
    for nn, ss in ((3, 5), (2, 33)):  # one build, two run-time sizes
        feeds = {"x": _data(rng, (nn, ss, 6), "float32"), "x2": _data(rng, (nn, 3, 6), "float32"),
                 "y": _data(rng, (1, ss, 1), "float32"), "pos": _data(rng, (50, 6), "float32"),
                 "ids": rng.integers(-20, 20, (nn, ss)).astype(np.int64), "table": _data(rng, (20, 6), "float32"),
                 "pick": np.array([0, -1, ss - 1], np.int32)}
        _check_bytes(model.run(feeds), ag.reference.run(outs, feeds), outs)


def test_gather_bad_index_is_an_error_and_model_stays_usable(tmp_path):
    ids = ag.Tensor([4], "int32", name="ids")
    table = ag.Tensor([5, 3], name="table")
    out = {"e": ops.embedding(ids, table, name="emb")}
    model = ag.compile_model(out, target="cpu", workdir=tmp_path / "m")
    tv = np.arange(15, dtype=np.float32).reshape(5, 3)
    for bad in (5, -6):
        with pytest.raises(RuntimeInputError, match=f"gather 'emb'.*index {bad} .*out of range for axis 0 of size 5"):
            model.run({"ids": np.array([0, bad, 1, 2], np.int32), "table": tv})
    good = np.array([4, -5, 0, -1], np.int32)
    np.testing.assert_array_equal(model.run({"ids": good, "table": tv})["e"], tv[good])


def _attention_cases(c: _Cases, dtype, full=True):
    """Attention outputs covering the kernel's paths (float16/bfloat16 take the first few: only
    their loads and stores differ)."""
    sdpa = ops.scaled_dot_product_attention
    t = lambda shape: c.input(shape, dtype)  # noqa: E731

    def mask(shape, kind):
        if kind == "bool":
            return c.input(shape, "bool", data=c.rng.random(shape) < 0.7)
        m = np.where(c.rng.random(shape) < 0.2, -10000.0, c.rng.standard_normal(shape)).astype(ag.DType[dtype].np)
        return c.input(shape, dtype, data=m)

    # BERT: [B, H, S, D] with a [B, 1, 1, S] additive mask; 70 > one query block and one key block
    c.outs["bert"] = sdpa(t([2, 3, 70, 16]), t([2, 3, 70, 16]), t([2, 3, 70, 16]), mask([2, 1, 1, 70], "add"))
    c.outs["long_keys"] = sdpa(t([2, 5, 8]), t([2, 130, 8]), t([2, 130, 24]))  # Dv != D, three key blocks
    c.outs["bool_keys_causal"] = sdpa(t([2, 2, 9, 16]), t([2, 2, 20, 16]), t([2, 2, 20, 16]),
                                      mask([2, 1, 1, 20], "bool"), causal=True)
    if not full:
        return
    c.outs["causal_full_mask"] = sdpa(t([1, 2, 100, 8]), t([1, 2, 100, 8]), t([1, 2, 100, 8]),
                                      mask([100, 100], "add"), causal=True)
    c.outs["causal_sq_gt_sk"] = sdpa(t([2, 80, 5]), t([2, 33, 5]), t([2, 33, 3]), causal=True)
    c.outs["bool_full"] = sdpa(t([2, 2, 9, 16]), t([2, 2, 20, 16]), t([2, 2, 20, 16]), mask([2, 2, 9, 20], "bool"))
    # batch dims broadcast (k/v shared by the batch, fewer dims), a mask broadcast along the keys
    c.outs["broadcast"] = sdpa(t([2, 4, 9, 16]), t([4, 20, 16]), t([1, 4, 20, 16]), mask([9, 1], "add"))
    c.outs["no_batch_scale"] = sdpa(t([12, 8]), t([7, 8]), t([7, 3]), scale=0.3)
    # fully masked rows give zeros: a bool row of False, an additive row of -inf
    keep = c.rng.random((1, 6, 11)) < 0.6
    keep[0, 2] = False
    c.outs["masked_rows_bool"] = sdpa(t([1, 6, 8]), t([1, 11, 8]), t([1, 11, 8]),
                                      c.input([1, 6, 11], "bool", data=keep))
    neg = np.zeros((6, 11), ag.DType[dtype].np)
    neg[[1, 4]] = -np.inf
    c.outs["masked_rows_inf"] = sdpa(t([3, 6, 8]), t([3, 11, 8]), t([3, 11, 8]), c.input([6, 11], dtype, data=neg))


def _check_close(got, want, names, **tol):
    for k in names:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        assert np.isfinite(got[k].astype(np.float32)).all(), k
        np.testing.assert_allclose(got[k].astype(np.float32), want[k].astype(np.float32), err_msg=k, **tol)


@pytest.mark.parametrize("dtype,tol", [("float32", dict(rtol=1e-5, atol=1e-5)),
                                       ("float16", dict(rtol=2e-3, atol=2e-3)),
                                       ("bfloat16", dict(rtol=1.6e-2, atol=1.6e-2))])
def test_attention_against_oracle(tmp_path, dtype, tol):
    c = _Cases(11)
    _attention_cases(c, dtype, full=dtype == "float32")
    model = ag.compile_model(c.outs, target="cpu", workdir=tmp_path / "m")
    got, want = model.run(c.feeds), ag.reference.run(c.outs, c.feeds)
    _check_close(got, want, c.outs, **tol)
    if dtype == "float32":
        assert not got["masked_rows_bool"][0, 2].any() and not got["masked_rows_inf"][:, [1, 4]].any()


def test_attention_dynamic_seq_and_kernel_sharing(tmp_path):
    b, s = ag.IntVar("b", 1, 4), ag.IntVar("s", 1, 128)
    x = ag.Tensor([b, s, 2, 16], name="x")
    m = ag.Tensor([b, 1, 1, s], name="m")
    y = ag.Tensor([b, 2 * s, 2, 16], name="y")  # a second "layer" of another length

    def layer(t, mask):
        h = ops.permute(t, [0, 2, 1, 3])  # [B, S, H, D] -> [B, H, S, D]
        return ops.permute(ops.scaled_dot_product_attention(h, h * 0.5, h, mask), [0, 2, 1, 3])

    outs = {"a": layer(x, m), "b": layer(y, None), "c": layer(ops.concat([y, y], axis=1), None)}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    # Sizes, strides and the scale are run-time arguments: the three attentions share two kernels
    # (with and without a mask), whatever the lengths. The six transposes are strided reads (of the
    # attentions, and of the h * 0.5 group), and the concat's two copies of y share one kernel.
    sources = [p.read_text() for p in (tmp_path / "m" / "obj" / "src").glob("k_*.cpp")]
    assert sum("Fused scaled-dot-product attention" in t for t in sources) == 2
    assert sum("Strided copy" in t for t in sources) == 1
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert sum("strided_copy" in k["template"] for k in report["kernels"]) == 2
    rng = np.random.default_rng(5)
    for bb, ss in ((2, 7), (1, 64)):
        feeds = {"x": _data(rng, (bb, ss, 2, 16), "float32"), "y": _data(rng, (bb, 2 * ss, 2, 16), "float32"),
                 "m": np.where(rng.random((bb, 1, 1, ss)) < 0.3, -1e4, 0).astype(np.float32)}
        _check_close(model.run(feeds), ag.reference.run(outs, feeds), outs, rtol=1e-5, atol=1e-5)
