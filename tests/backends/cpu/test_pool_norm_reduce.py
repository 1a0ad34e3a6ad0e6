"""CPU kernels of pooling, norms, softmax and reductions against the numpy oracle.

Each test batches many cases into one model (a compile costs seconds; equal kernels are shared,
since sizes are run-time dims). Tolerances:
- float32: |got - ref| <= 1e-5 * |ref| + 1e-5 * max|ref| (relative, plus 1e-5 of the output's
  magnitude for values that cancel towards 0: sums, means, normalised outputs near 0).
- float16 / bfloat16 storage (float32 compute, one rounding at the end of each op, as the oracle):
  one or two units in the last place of the storage type, rtol 2e-3 / 1.6e-2 with the same
  magnitude-relative atol.
- integers, max / min, max pooling and average pooling: exact (the kernels sum taps in the
  oracle's order).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import RuntimeInputError
from aitgen.runtime.model import ModelError

RTOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def close(got: np.ndarray, ref: np.ndarray, dtype: str = "float32", name: str = "") -> None:
    assert got.shape == ref.shape and got.dtype == ref.dtype, (name, got.shape, ref.shape, got.dtype, ref.dtype)
    if ref.dtype.kind in "iub":
        np.testing.assert_array_equal(got, ref, err_msg=name)
        return
    g, r = got.astype(np.float32), ref.astype(np.float32)
    rt = RTOL[dtype]
    scale = float(np.nanmax(np.abs(r[np.isfinite(r)]), initial=0.0))
    np.testing.assert_allclose(g, r, rtol=rt, atol=rt * scale, equal_nan=True, err_msg=name)


def check_all(model, outs: dict, feeds: dict, dtype: str = "float32", exact: tuple = ()) -> None:
    got = model.run(feeds)
    ref = ag.reference.run(outs, feeds)
    for k in outs:
        if k in exact:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
        else:
            close(got[k], ref[k], dtype, k)


def rand(rng, shape, dtype="float32", lo=-3.0, hi=3.0, offset=0.0):
    if np.dtype(ag.DType(dtype).np).kind in "iu":
        info = np.iinfo(ag.DType(dtype).np)
        return rng.integers(max(info.min, -100), min(info.max, 100) + 1, size=shape).astype(ag.DType(dtype).np)
    return (rng.uniform(lo, hi, size=shape) + offset).astype(np.float32).astype(ag.DType(dtype).np)


def unique_kernels(workdir) -> int:
    return json.loads((workdir / "report.json").read_text())["unique_kernels"]


# -- norms ------------------------------------------------------------------------------------

def test_norms_random_shapes_and_dynamic_rows(tmp_path):
    rng = np.random.default_rng(0)
    b = ag.IntVar("b", 1, 16)
    x3 = ag.Tensor([b, 7, 48], dtype="float32", name="x3")          # rows of 48
    x4 = ag.Tensor([b, 5, 6, 32], dtype="float32", name="x4")       # NHWC
    big = ag.Tensor([3, 4000], dtype="float32", name="big")         # long rows, large mean
    w48 = ag.Tensor([48], dtype="float32", name="w48")
    b48 = ag.Tensor([48], dtype="float32", name="b48")
    w32 = ag.Tensor([32], dtype="float32", name="w32")
    b32 = ag.Tensor([32], dtype="float32", name="b32")
    w2 = ag.Tensor([6, 32], dtype="float32", name="w2")
    bnp = [ag.Tensor([32], dtype="float32", name=f"bn{i}") for i in range(4)]
    outs = {
        "ln": ops.layernorm(x3, w48, b48, eps=1e-5),
        "ln_plain": ops.layernorm(x3, eps=1e-6),
        "ln_w": ops.layernorm(x3, w48),
        "ln_2axes": ops.layernorm(x4, w2, eps=1e-5, num_axes=2),
        "ln_3axes": ops.layernorm(x4, num_axes=3),
        "ln_long": ops.layernorm(big),
        "rms": ops.rmsnorm(x3, w48),
        "rms_plain": ops.rmsnorm(x4, num_axes=2),
        "gn": ops.groupnorm(x4, 4, w32, b32),
        "gn_plain": ops.groupnorm(x4, 1),
        "gn_3d": ops.groupnorm(x3, 8, w48, b48, eps=1e-3),
        "gn_long": ops.groupnorm(ops.reshape(ops.sub(big, ops.reduce_mean(big)), [3, 400, 10]), 5),
        "bn": ops.batchnorm(x4, bnp[0], bnp[1], bnp[2], bnp[3], eps=1e-3),
    }
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for batch in (3, 1):  # the same library at two sizes of the dynamic dim
        feeds = {"x3": rand(rng, (batch, 7, 48), offset=5.0), "x4": rand(rng, (batch, 5, 6, 32)),
                 "big": rand(rng, (3, 4000), offset=100.0), "w48": rand(rng, (48,)), "b48": rand(rng, (48,)),
                 "w32": rand(rng, (32,)), "b32": rand(rng, (32,)), "w2": rand(rng, (6, 32)),
                 "bn0": rand(rng, (32,)), "bn1": rand(rng, (32,)), "bn2": rand(rng, (32,)),
                 "bn3": rand(rng, (32,), lo=0.1, hi=2.0)}
        check_all(m, outs, feeds)


def test_one_layernorm_kernel_serves_every_shape(tmp_path):
    # Sizes are dims, so layernorms of different widths and row counts share one translation unit.
    xs = [ag.Tensor([r, c], dtype="float32", name=f"x{i}") for i, (r, c) in enumerate([(4, 768), (9, 64), (2, 1000)])]
    outs = {f"y{i}": ops.layernorm(x) for i, x in enumerate(xs)}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    assert unique_kernels(tmp_path / "m") == 1
    rng = np.random.default_rng(1)
    check_all(m, outs, {x.name: rand(rng, tuple(d.value for d in x.shape)) for x in xs})


# -- softmax ----------------------------------------------------------------------------------

def test_softmax_every_axis_masks_and_dynamic(tmp_path):
    rng = np.random.default_rng(2)
    s = ag.IntVar("s", 1, 300)
    x = ag.Tensor([2, 3, s, 20], dtype="float32", name="x")
    w = ag.Tensor([5000, 3], dtype="float32", name="w")
    outs = {f"ax{a}": ops.softmax(x, a) for a in range(4)}
    outs["neg"] = ops.softmax(x, -2)
    outs["long_rows"] = ops.softmax(ops.reshape(w, [3, 5000]), -1)  # longer than the kernel's row buffer
    outs["first_axis"] = ops.softmax(w, 0)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for n in (37, 300):
        xv = rand(rng, (2, 3, n, 20), lo=-30, hi=30)
        xv[0, 0, 0, :5] = -np.inf  # masked entries: exp gives exactly 0
        xv[1, 2, :, 3] = -np.inf   # along axis 2 at one column: masked too
        wv = rand(rng, (5000, 3), lo=-80, hi=80)
        check_all(m, outs, {"x": xv, "w": wv})


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_softmax_nan_and_all_masked_rows_are_nan_like_torch(tmp_path):
    x = ag.Tensor([4, 40], dtype="float32", name="x")
    outs = {"y": ops.softmax(x, -1), "z": ops.softmax(x, 0)}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    xv = np.random.default_rng(3).standard_normal((4, 40)).astype(np.float32)
    xv[1, :] = -np.inf
    xv[2, 7] = np.nan
    got = m.run({"x": xv})
    assert np.isnan(got["y"][1]).all() and np.isnan(got["y"][2]).all() and np.isnan(got["z"][:, 7]).all()
    assert got["z"][1, 0] == 0.0
    check_all(m, outs, {"x": xv})


# -- reductions -------------------------------------------------------------------------------

REDUCE_AXES = [None, 0, 1, 2, 3, (0, 2), (1, 3), (1, 2), (0, 1, 3), (2, 3), ()]


def test_reductions_over_axis_sets_float(tmp_path):
    rng = np.random.default_rng(4)
    n = ag.IntVar("n", 1, 40)
    x = ag.Tensor([3, n, 5, 33], dtype="float32", name="x")
    outs = {}
    for i, axes in enumerate(REDUCE_AXES):
        kd = i % 2 == 1
        outs[f"sum{i}"] = ops.reduce_sum(x, axes, keepdims=kd)
        outs[f"mean{i}"] = ops.reduce_mean(x, axes, keepdims=not kd)
        outs[f"max{i}"] = ops.reduce_max(x, axes, keepdims=kd)
        outs[f"min{i}"] = ops.reduce_min(x, axes)
        outs[f"var{i}"] = ops.reduce_var(x, axes, keepdims=kd, correction=i % 2)
    exact = tuple(k for k in outs if k.startswith(("max", "min")))
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for size in (1, 29):
        check_all(m, outs, {"x": rand(rng, (3, size, 5, 33), offset=2.0)}, exact=exact)


def test_long_axes_keep_float32_accuracy(tmp_path):
    # A long reduced run (row kernel) and a long reduced column (col kernel), large mean for var
    # and groupnorm. Against float64 truth: here the oracle's own float32 sums along strided axes
    # drift by ~4e-5 (groupnorm), more than the kernels do.
    x = ag.Tensor([6, 20000], dtype="float32", name="x")
    outs = {"sum_row": ops.reduce_sum(x, 1), "mean_col": ops.reduce_mean(x, 0), "var_row": ops.reduce_var(x, 1),
            "var_col": ops.reduce_var(ops.reshape(x, [20000, 6]), 0, correction=1),
            "gn": ops.groupnorm(ops.reshape(x, [6, 2000, 10]), 5)}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    # Mean 100: float32 holds the mean to ~4e-6, so the normalised output stays within 1e-5.
    xv = rand(np.random.default_rng(5), (6, 20000), offset=100.0)
    got = m.run({"x": xv})
    x64 = xv.astype(np.float64)
    # Against float64 truth: the oracle itself sums in float32, so compare with 1e-5 relative.
    np.testing.assert_allclose(got["sum_row"], x64.sum(1), rtol=1e-6)
    np.testing.assert_allclose(got["mean_col"], x64.mean(0), rtol=1e-6)
    np.testing.assert_allclose(got["var_row"], x64.var(1), rtol=1e-5)
    np.testing.assert_allclose(got["var_col"], x64.reshape(20000, 6).var(0, ddof=1), rtol=1e-5)
    g = x64.reshape(6, 2000, 5, 2)
    dev = g - g.mean(axis=(1, 3), keepdims=True)
    gn = (dev / np.sqrt((dev * dev).mean(axis=(1, 3), keepdims=True) + 1e-5)).reshape(6, 2000, 10)
    np.testing.assert_allclose(got["gn"], gn, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_reductions_keep_dtype_and_wrap(tmp_path, dtype):
    rng = np.random.default_rng(6)
    x = ag.Tensor([4, 70, 3], dtype=dtype, name="x")
    outs = {}
    for i, axes in enumerate([None, 1, (0, 2), 2, (0, 1)]):
        outs[f"sum{i}"] = ops.reduce_sum(x, axes)
        outs[f"max{i}"] = ops.reduce_max(x, axes, keepdims=True)
        outs[f"min{i}"] = ops.reduce_min(x, axes)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    xv = rand(rng, (4, 70, 3), dtype)
    if dtype == "int8":
        xv[:] = np.where(xv > 0, 120, -7).astype(np.int8)  # int8 sums overflow and wrap
    if dtype == "int32":
        xv[0, 0, 0] = np.int32(2 ** 31 - 1)  # and an int32 sum that wraps
    check_all(m, outs, {"x": xv})


def test_max_min_propagate_nan(tmp_path):
    x = ag.Tensor([5, 50], dtype="float32", name="x")
    outs = {"max_row": ops.reduce_max(x, 1), "min_col": ops.reduce_min(x, 0), "max_all": ops.reduce_max(x),
            "pool": ops.max_pool2d(ops.reshape(x, [1, 5, 25, 2]), 2)}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    xv = np.random.default_rng(7).standard_normal((5, 50)).astype(np.float32)
    xv[2, 17] = np.nan
    xv[4, 49] = np.nan
    check_all(m, outs, {"x": xv}, exact=tuple(outs))


def test_empty_reductions_and_the_model_survives(tmp_path):
    n = ag.IntVar("n", 0, 8)
    x = ag.Tensor([3, n], dtype="float32", name="x")
    sums = {"sum": ops.reduce_sum(x, 1), "ln_rows": ops.layernorm(ops.reshape(x, [n, 3]))}
    m = ag.compile_model(sums, target="cpu", workdir=tmp_path / "s")
    got = m.run({"x": np.zeros((3, 0), np.float32)})
    np.testing.assert_array_equal(got["sum"], np.zeros(3, np.float32))
    assert got["ln_rows"].shape == (0, 3)
    mx = ag.compile_model({"max": ops.reduce_max(x, 1)}, target="cpu", workdir=tmp_path / "mx")
    with pytest.raises(ModelError, match="empty"):
        mx.run({"x": np.zeros((3, 0), np.float32)})
    xv = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(mx.run({"x": xv})["max"], xv.max(1))


# -- pooling ----------------------------------------------------------------------------------

POOLS = [  # kernel, stride, padding, dilation (max only), ceil_mode, count_include_pad
    (3, 2, 1, 1, False, True), (3, 2, 1, 1, True, True), (3, 2, 1, 1, True, False), (2, 2, 0, 1, True, True),
    ((3, 2), (1, 2), (1, 0), 1, False, False), (3, 3, (1, 0, 1, 1), 1, True, True), (5, 2, 2, 1, True, False),
    (3, 2, 1, 2, True, True), (1, 1, 0, 1, False, True),
]


def test_pooling_torch_semantics_and_dynamic_size(tmp_path):
    rng = np.random.default_rng(8)
    h = ag.IntVar("h", 5, 40)
    w = ag.IntVar("w", 5, 40)
    x = ag.Tensor([2, h, w, 19], dtype="float32", name="x")
    xw = ag.Tensor([1, 9, 11, 70], dtype="float32", name="xw")  # channels past one vector block
    outs = {}
    for i, (k, s, p, d, ceil, cip) in enumerate(POOLS):
        outs[f"max{i}"] = ops.max_pool2d(x, k, s, p, dilation=d, ceil_mode=ceil)
        if d == 1:
            outs[f"avg{i}"] = ops.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip)
    outs["max_wide"] = ops.max_pool2d(xw, 3, 2, 1, ceil_mode=True)
    outs["avg_wide"] = ops.avg_pool2d(xw, 3, 2, 1, count_include_pad=False)
    outs["gap"] = ops.global_avg_pool(x)
    outs["gap_flat"] = ops.global_avg_pool(xw, keepdims=False)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    exact = tuple(k for k in outs if k.startswith(("max", "avg")))
    for hh, ww in ((13, 16), (7, 9)):
        check_all(m, outs, {"x": rand(rng, (2, hh, ww, 19)), "xw": rand(rng, (1, 9, 11, 70))}, exact=exact)


def test_int8_max_pool(tmp_path):
    x = ag.Tensor([1, 8, 8, 24], dtype="int8", name="x")
    outs = {"p": ops.max_pool2d(x, 3, 2, 1, ceil_mode=True)}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    check_all(m, outs, {"x": np.random.default_rng(9).integers(-128, 128, (1, 8, 8, 24)).astype(np.int8)})


# -- 16-bit storage ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_storage_family(tmp_path, dtype):
    rng = np.random.default_rng(10)
    x = ag.Tensor([3, 6, 10, 24], dtype=dtype, name="x")
    wt = ag.Tensor([24], dtype=dtype, name="wt")
    outs = {"ln": ops.layernorm(x, wt, wt), "rms": ops.rmsnorm(x, wt), "gn": ops.groupnorm(x, 3, wt),
            "bn": ops.batchnorm(x, wt, wt, wt, ops.abs(wt)), "sm": ops.softmax(x, -1), "sm1": ops.softmax(x, 1),
            "sum": ops.reduce_sum(x, (1, 2)), "mean": ops.reduce_mean(x, -1), "var": ops.reduce_var(x, 0),
            "max": ops.reduce_max(x, (0, 3)), "mp": ops.max_pool2d(x, 3, 2, 1), "ap": ops.avg_pool2d(x, 2),
            "gap": ops.global_avg_pool(x)}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = {"x": rand(rng, (3, 6, 10, 24), dtype), "wt": rand(rng, (24,), dtype, 0.5, 1.5)}
    check_all(m, outs, feeds, dtype, exact=("max", "mp"))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_max_pool_vector_blocks_nan_and_inf(tmp_path, dtype):
    """16-bit max pooling runs kLanes channels at a time through float32 vectors, the rest one by
    one: 37 and 70 channels leave a remainder at 4, 8 and 16 lanes. NaN propagates and +-inf and
    padding behave as the oracle's, bit for bit after the round trip."""
    rng = np.random.default_rng(11)
    outs = {}
    for c in (37, 70):
        x = ag.Tensor([2, 9, 11, c], dtype=dtype, name=f"x{c}")
        for i, (k, s, p, d, ceil, _) in enumerate(POOLS):
            outs[f"mp{c}_{i}"] = ops.max_pool2d(x, k, s, p, dilation=d, ceil_mode=ceil)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = {}
    for c in (37, 70):
        xv = rand(rng, (2, 9, 11, c), dtype)
        xv[0, 4:6, 5:7, :c // 2] = np.nan      # in vector lanes and in the remainder; 2x2, so every
                                                 # window pattern (stride, dilation) meets it
        xv[1, 0, 0, c - 1] = np.nan
        xv[1, 3:5, 3:5, :] = np.inf
        xv[0, 8, 10, 3:20] = -np.inf
        xv[1, 8, :, :] = -np.inf                 # whole windows of -inf in the last row
        feeds[f"x{c}"] = xv
    got = m.run(feeds)
    ref = ag.reference.run(outs, feeds)
    for k in outs:
        assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
        g, r = got[k].astype(np.float32), ref[k].astype(np.float32)
        assert np.isnan(r).any() and np.isinf(r).any(), k  # the specials reach every output
        np.testing.assert_array_equal(g, r, err_msg=k)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_storage_long_rows_and_vector_pools(tmp_path, dtype):
    """16-bit rows run through float32 blocks of 1024 (cpu_reduce.h narrow_blocks): rows of 2500
    cross two block edges and end in a remainder, rows of 37 fit in one; a softmax row holding -inf
    and one holding NaN keep the oracle's zeros and NaNs. Average pooling over 37 and 70 channels
    sums its taps in the oracle's order, so it is exact."""
    rng = np.random.default_rng(12)
    x = ag.Tensor([3, 2500], dtype=dtype, name="x")
    s = ag.Tensor([5, 37], dtype=dtype, name="s")
    wt = ag.Tensor([2500], dtype=dtype, name="wt")
    outs = {"sm": ops.softmax(x, -1), "sm_s": ops.softmax(s, -1), "ln": ops.layernorm(x, wt, wt),
            "ln_s": ops.layernorm(s), "rms": ops.rmsnorm(x, wt), "sum": ops.reduce_sum(x, -1),
            "mean_s": ops.reduce_mean(s, -1),
            # a batch norm over 2500 channels (512-element blocks) and a softmax whose row comes from
            # an element-wise prologue (a row buffer, stored in bulk)
            "bn": ops.batchnorm(x, wt, wt, wt, ops.abs(wt)), "sm_p": ops.softmax(ops.add(ops.mul(x, 0.5), wt), -1),
            # a group norm of 4 groups over 2500 channels: rows in 1024-element blocks (narrow_blocks)
            "gn": ops.groupnorm(ag.Tensor([2, 3, 5, 2500], dtype=dtype, name="g"), 4, wt, wt),
            # a softmax over the outer axis: 2500 columns in blocks of 128, the -inf and NaN columns too
            "sm_0": ops.softmax(x, 0)}
    pools = {}
    for c in (37, 70):
        p = ag.Tensor([2, 9, 11, c], dtype=dtype, name=f"p{c}")
        for i, (k, st, pad, d, ceil, cip) in enumerate(POOLS):
            if d == 1:
                pools[f"ap{c}_{i}"] = ops.avg_pool2d(p, k, st, pad, ceil_mode=ceil, count_include_pad=cip)
    m = ag.compile_model({**outs, **pools}, target="cpu", workdir=tmp_path / "m")
    xv = rand(rng, (3, 2500), dtype, offset=2.0)  # a mean away from 0: the two-pass variance
    xv[1, 1700] = -np.inf
    xv[2, 2499] = np.nan
    sv = rand(rng, (5, 37), dtype)  # one-block rows: -inf, a whole row of it (NaN out), NaN
    sv[1, 5] = -np.inf
    sv[3, :] = -np.inf
    sv[4, 36] = np.nan
    feeds = {"x": xv, "s": sv, "wt": rand(rng, (2500,), dtype, 0.5, 1.5), "g": (rand(rng, (2, 3, 5, 2500), dtype).astype(np.float32) + np.repeat([-3.0, 1.0, 4.0, -1.0], 625)).astype(ag.DType(dtype).np),
             **{f"p{c}": rand(rng, (2, 9, 11, c), dtype) for c in (37, 70)}}
    src = "\n".join(f.read_text() for f in (tmp_path / "m" / "obj" / "src").glob("k_*.cpp"))
    assert "ait::from_f32_block(static_cast<const float*>(buf), yr, len)" in src   # the prologue softmax
    assert "ait::to_f32_block(xr + j0, f, nb)" in src                              # the batch norm
    assert "ait::from_f32_block(static_cast<const float*>(yb), ys + c0, m)" in src   # the group norm
    assert "ait::from_f32_block(static_cast<const float*>(yf), yo + a * inner, nb)" in src  # softmax, axis 0
    got = m.run(feeds)
    ref = ag.reference.run({**outs, **pools}, feeds)
    assert np.isnan(ref["sm"][2]).all() and ref["sm"][1, 1700] == 0
    assert ref["sm_s"][1, 5] == 0 and np.isnan(ref["sm_s"][3]).all() and np.isnan(ref["sm_s"][4]).all()
    for k in outs:
        close(got[k], ref[k], dtype, k)
    for k in pools:
        np.testing.assert_array_equal(got[k].astype(np.float32), ref[k].astype(np.float32), err_msg=k)


# -- bad input --------------------------------------------------------------------------------

def test_bad_input_raises_and_model_still_works(tmp_path):
    b = ag.IntVar("b", 1, 8)
    x = ag.Tensor([b, 32], dtype="float32", name="x")
    outs = {"ln": ops.layernorm(x), "sm": ops.softmax(x), "r": ops.reduce_mean(x, 0)}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    with pytest.raises(RuntimeInputError):
        m.run({"x": np.zeros((2, 31), np.float32)})
    with pytest.raises(RuntimeInputError):
        m.run({"x": np.zeros((9, 32), np.float32)})
    check_all(m, outs, {"x": rand(np.random.default_rng(11), (5, 32))})
