"""The CUDA backend's own kernels on a GPU against the oracle (skipped without one): element-wise
(every kind, fused groups, broadcasts, 16-bit pairs), memory ops, gather, reductions and
arg-reductions, softmax, norms with residual prologues, pooling, in float32, float16 and bfloat16.

Shapes are odd where a pack would not fit (a scalar fallback then runs) and dynamic where one
kernel serves several sizes: a row length bound to 100, 3000 and 12000 runs the warp, block and
two-pass row kernels of one build. Each model runs for two or three bindings of its dims.

Tolerances, against the float32 oracle on the same (rounded) inputs, as
|got - ref| <= rtol * |ref| + rtol * max|ref| (the second term for values that cancel to near 0):
- float32: 1e-5 (float32 accumulation in trees of partial sums; device libm within 4 ulp); scans
  (float32 only: the oracle scans 16-bit types in their own precision) likewise;
  every element-wise kind: 2e-5 (CUDA's tanf/powf/... are within a few ulp, sums of two such);
- float16: 2e-3 and bfloat16: 1.6e-2 (float32 compute, one rounding of the result, as the oracle);
- memory ops, gather, max/min, max pooling, arg-reductions and integer results: exact;
- NaN exactly where the oracle has NaN.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, RuntimeInputError, ShapeError
from aitgen.ir.op import OpKind
from aitgen.ops.elementwise import _unary
from aitgen.ops.registry import Category, get_opdef, make_op, registered_kinds

pytestmark = pytest.mark.gpu

RTOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
FLOATS = ("float32", "float16", "bfloat16")


class Cases:
    """Outputs of one build, the feeds of each binding, and which outputs compare exactly."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.outs: dict = {}
        self.exact: set[str] = set()
        self.inputs: list[tuple] = []  # (name, shape with IntVars, dtype, maker)

    def t(self, name, shape, dtype, lo=-3.0, hi=3.0, make=None):
        self.inputs.append((name, shape, dtype, make or (lambda s, d=dtype: self.rand(s, d, lo, hi))))
        return ag.Tensor(shape, dtype=dtype, name=name)

    def rand(self, shape, dtype, lo=-3.0, hi=3.0):
        npd = ag.DType(dtype).np
        if np.dtype(npd).kind in "iu":
            return self.rng.integers(-20, 21, size=shape).astype(npd)
        if dtype == "bool":
            return self.rng.integers(0, 2, size=shape).astype(bool)
        return self.rng.uniform(lo, hi, size=shape).astype(np.float32).astype(npd)

    def feeds(self, env: dict) -> dict:
        out = {}
        for name, shape, dtype, make in self.inputs:
            concrete = tuple(env[d.name] if isinstance(d, ag.IntVar) else int(d) for d in shape)
            out[name] = make(concrete)
        return out


def close(got, ref, rtol, name):
    assert got.shape == ref.shape and got.dtype == ref.dtype, (name, got.shape, ref.shape, got.dtype, ref.dtype)
    if ref.dtype.kind in "iub" or rtol == 0:
        np.testing.assert_array_equal(got, ref, err_msg=name)
        return
    g, r = got.astype(np.float64), ref.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg=f"{name}: NaN positions")
    fin = np.isfinite(r)
    scale = float(np.max(np.abs(r[fin]), initial=0.0))
    np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=name)


def compare(cases: Cases, dtype: str, run, envs: list[dict], rtol_of=None) -> None:
    """run(feeds) -> outputs, for each binding, against the oracle."""
    for env in envs:
        feeds = cases.feeds(env)
        got = run(feeds)
        with np.errstate(all="ignore"):  # NaN/inf of domains (log of a negative) are compared too
            ref = ag.reference.run(cases.outs, feeds)
        for k in cases.outs:
            rt = 0 if k in cases.exact else (rtol_of(k) if rtol_of else RTOL[dtype])
            close(np.asarray(got[k]), np.asarray(ref[k]), rt, f"{k} {dtype} {env}")


def check(case, dt, gpu_arch, tmp_path) -> None:
    """Build a case for the GPU present and compare every binding with the oracle."""
    cases, envs, rtol_of = case(dt)
    model = ag.compile_model(cases.outs, target="cuda", arch=gpu_arch, workdir=tmp_path / "m")
    compare(cases, dt, model.run, envs, rtol_of)


# -- element-wise --------------------------------------------------------------------------------

def case_elementwise(dt):
    c = Cases(1)
    b = ag.IntVar("b", 1, 64)
    x, r = c.t("x", [b, 7, 768], dt), c.t("r", [b, 7, 768], dt)
    w, v = c.t("w", [768], dt), c.t("v", [b, 7, 1], dt)
    xo, yo = c.t("xo", [b, 5, 13], dt), c.t("yo", [13], dt)
    h = ops.relu(xo * 3.0)
    c.outs.update({
        "fused": ops.gelu(x * w + 1.0), "pair_add": x + r, "pair_max": ops.maximum(x, r), "pair_neg": ops.neg(r),
        "bcast_col": ops.tanh(x) * v, "bcast_odd": ops.sigmoid(xo) - yo, "odd_scalar": xo * 0.5 + 1.0,
        "multi_a": h, "multi_b": h + yo, "cast": ops.cast(x, "float32") * 2.0,
    })
    # b = 3: 21 rows; b = 1: a different size through the same kernels
    return c, [{"b": 3}, {"b": 1}], None


def _float_kinds():
    for kind in registered_kinds():
        d = get_opdef(kind)
        if d.category is Category.ELEMENTWISE and kind not in (OpKind.FUSED_ELEMENTWISE, OpKind.CAST, OpKind.WHERE):
            yield kind, d


def case_every_elementwise_kind(dt):
    """Each kind alone (float32 operands; booleans from comparisons, ints where a kind needs them)."""
    c = Cases(2)
    n = ag.IntVar("n", 1, 1 << 16)
    x, y = c.t("x", [n], "float32", -2.5, 2.5), c.t("y", [n], "float32", 0.1, 2.5)
    xi, yi = c.t("xi", [n], "int32"), c.t("yi", [n], "int32")
    xb, yb = c.t("xb", [n], "bool"), c.t("yb", [n], "bool")
    for kind, d in _float_kinds():
        attrs = d.attrs_type()
        for a, b_, tag in ((x, y, "f"), (xi, yi, "i"), (xb, yb, "b")):
            try:
                out = _unary(kind, a, attrs) if d.num_inputs[0] == 1 else make_op(kind, [a, b_], attrs)[0]
            except (DTypeError, ShapeError):  # this kind does not take this dtype
                continue
            c.outs[f"{kind.value}_{tag}"] = out
            if not out.dtype.is_float:
                c.exact.add(f"{kind.value}_{tag}")
    c.outs["where"] = ops.where(xb, x, y)
    c.outs["cast_i"] = ops.cast(x, "int32")
    c.outs["cast_b"] = ops.cast(xi, "bool")
    c.exact |= {"cast_i", "cast_b"}
    return c, [{"n": 4099}, {"n": 8}], lambda k: 2e-5


# -- memory ops and gather --------------------------------------------------------------------------

def case_memory_and_gather(dt):
    c = Cases(3)
    b = ag.IntVar("b", 1, 16)
    x = c.t("x", [b, 12, 64], dt)
    xo = c.t("xo", [b, 5, 7], dt)
    img = c.t("img", [b, 6, 5, 3], dt)
    emb = c.t("emb", [50, 64], dt)
    emb_odd = c.t("emb_odd", [9, 3], dt)
    idx = c.t("idx", [4, 5], "int64", make=lambda s: c.rng.integers(-50, 50, size=s).astype(np.int64))
    idx3 = c.t("idx3", [b, 2], "int32", make=lambda s: c.rng.integers(-9, 9, size=s).astype(np.int32))
    parts = ops.split(x, [20, 44], axis=2)
    c.outs.update({
        "transpose": ops.permute(x, [0, 2, 1]), "perm_odd": ops.permute(xo, [2, 0, 1]),
        "perm4": ops.permute(img, [0, 3, 1, 2]),
        "slice": ops.slice(x, [1, 8], [11, 40], axes=[1, 2]), "slice_step": ops.slice(xo, [4, 6], [0, 0], axes=[1, 2], steps=[-2, -3]),
        "concat": ops.concat([x, ops.neg(x)], axis=1), "concat_last": ops.concat([xo, ops.neg(xo)], axis=2),
        "split0": parts[0], "split1": parts[1], "expand": ops.expand(c.t("e", [1, 64], dt), [5, 64]),
        "pad_const": ops.pad(img, [(0, 0), (1, 2), (2, 1), (0, 0)], value=1.5 if dt != "int32" else 3),
        "pad_edge": ops.pad(xo, [(0, 0), (2, 1), (1, 3)], mode="edge"),
        "pad_reflect": ops.pad(xo, [(0, 0), (2, 2), (1, 1)], mode="reflect"),
        "gather_rows": ops.gather(emb, idx, axis=0), "gather_odd": ops.gather(emb_odd, idx3, axis=0),
        "gather_mid": ops.gather(x, c.t("idx_mid", [3], "int64", make=lambda s: np.array([11, -1, 0], np.int64)), axis=1),
    })
    c.exact |= set(c.outs)
    return c, [{"b": 2}, {"b": 5}], None


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_gather_bad_index_fails_the_run(gpu_arch, tmp_path, cuda_graph):
    """An index out of range is reported by the run (RuntimeInputError naming the op, the index, its
    flat position and the size), never read; the record is zeroed, so the next run is clean. With
    CUDA graphs the first run of a binding is eager, the second captures, later ones replay: the
    record is read back after every one of them."""
    emb = ag.Tensor([10, 8], dtype="float16", name="emb")
    idx = ag.Tensor([4], dtype="int64", name="idx")
    work = ag.compile_model({"y": ops.gather(emb, idx, axis=0, name="lookup")}, target="cuda", arch=gpu_arch,
                            workdir=tmp_path / "m", load=False)
    model = ag.Model.load(work, cuda_graph=cuda_graph)
    e = np.arange(80, dtype=np.float16).reshape(10, 8)
    good = np.array([9, -10, 0, 1], np.int64)
    bad = [(np.array([0, 3, 10, 1], np.int64), 10, 2), (np.array([0, 1, 2, -11], np.int64), -11, 3)]
    for _ in range(2):
        for ids, value, pos in bad:
            msg = f"gather 'lookup': index {value} (at flat position {pos}) is out of range for size 10"
            with pytest.raises(RuntimeInputError, match="^" + re.escape(msg) + "$"):
                model.run({"emb": e, "idx": ids})
            np.testing.assert_array_equal(model.run({"emb": e, "idx": good})["y"], e[good])


# -- reductions -------------------------------------------------------------------------------------

def case_reductions(dt):
    c = Cases(4)
    b = ag.IntVar("b", 1, 16)
    s = ag.IntVar("s", 1, 20000)
    x = c.t("x", [b, 7, 768], dt)
    xs = c.t("xs", [3, s], dt)
    xo = c.t("xo", [b, 5, 13], dt, 0.5, 1.5)
    c.outs.update({
        "sum_last": ops.reduce_sum(x, axes=[2]), "mean_mid": ops.reduce_mean(x, axes=[1]),
        "var_02": ops.reduce_var(x, axes=[0, 2]), "var_c1": ops.reduce_var(xo, axes=[2], correction=1),
        "max_long": ops.reduce_max(xs, axes=[1]), "min_col": ops.reduce_min(x, axes=[0]),
        "sum_all": ops.reduce_sum(xs), "mean_odd": ops.reduce_mean(xo, axes=[1, 2], keepdims=True),
        "prod": ops.reduce_prod(xo, axes=[2]),
        "argmax": ops.argmax(x, axis=2), "argmin_mid": ops.argmin(x, axis=1, select_last_index=True),
        "argmax_long": ops.argmax(xs, axis=1),
    })
    if dt == "float32":  # the oracle scans 16-bit types in their own precision (numpy's dtype=)
        c.outs.update({"cumsum_last": ops.cumsum(xo, axis=2), "cumsum_rows": ops.cumsum(xs, axis=1, exclusive=True),
                       "cumprod_mid": ops.cumprod(xo, axis=1, reverse=True),
                       "cumsum_rev_excl": ops.cumsum(x, axis=2, exclusive=True, reverse=True)})
    c.exact |= {"max_long", "min_col", "argmax", "argmin_mid", "argmax_long"}
    return c, [{"b": 2, "s": 100}, {"b": 1, "s": 3001}, {"b": 3, "s": 12000}], None


def case_integer_reductions(dt):
    c = Cases(5)
    b = ag.IntVar("b", 1, 8)
    x = c.t("x", [b, 33, 40], "int32", make=lambda s: c.rng.integers(-3, 4, size=s).astype(np.int32))
    c.outs.update({"sum": ops.reduce_sum(x, axes=[1]), "max": ops.reduce_max(x, axes=[2]), "min": ops.reduce_min(x, axes=[0]),
                   "argmax_first": ops.argmax(x, axis=2), "argmax_last": ops.argmax(x, axis=2, select_last_index=True),
                   "argmin_col": ops.argmin(x, axis=1), "cumsum": ops.cumsum(x, axis=2),
                   "cumprod_excl": ops.cumprod(x, axis=1, exclusive=True)})
    c.exact |= set(c.outs)
    return c, [{"b": 3}, {"b": 8}], None


# -- softmax and norms --------------------------------------------------------------------------------

def case_softmax(dt):
    c = Cases(6)
    b = ag.IntVar("b", 1, 16)
    s = ag.IntVar("s", 1, 20000)
    x, r = c.t("x", [b, 7, 768], dt), c.t("r", [b, 7, 768], dt)
    mask = c.t("mask", [b, 1, 768], dt, make=lambda sh: np.where(c.rng.random(sh) < 0.2, -np.inf, 0.0).astype(
        ag.DType(dt).np))
    xs = c.t("xs", [3, s], dt, -30.0, 30.0)
    xo = c.t("xo", [b, 5, 13], dt)
    big = c.t("big", [b, 7, 768], dt, -60.0, 60.0)  # exp would overflow without the maximum
    scores = c.t("scores", [b, 3, 5, 128], dt, -8.0, 8.0)  # attention-like rows: 16 lanes of a warp each
    c.outs.update({
        # small factors only in a prologue: the oracle rounds x * k to the storage type (it runs
        # the op before fusion), the fused kernel does not
        "last_prologue": ops.softmax(x * 0.125 + mask, axis=-1), "last": ops.softmax(big, axis=-1),
        "rows_any": ops.softmax(xs, axis=-1), "odd": ops.softmax(xo, axis=-1), "mid_axis": ops.softmax(x + r, axis=1),
        "first_axis": ops.softmax(xo, axis=0), "short_rows": ops.softmax(scores, axis=-1),
    })
    return c, [{"b": 2, "s": 100}, {"b": 1, "s": 3001}, {"b": 3, "s": 12000}], None


def case_norms(dt):
    c = Cases(7)
    b = ag.IntVar("b", 1, 16)
    s = ag.IntVar("s", 1, 20000)
    x, r = c.t("x", [b, 7, 768], dt), c.t("r", [b, 7, 768], dt)
    v = c.t("v", [b, 7, 1], dt)
    w, bias = c.t("w", [768], dt), c.t("bias", [768], dt)
    xs = c.t("xs", [3, s], dt, 5.0, 9.0)  # a large mean: the variance must not cancel
    xo = c.t("xo", [b, 5, 13], dt)
    img = c.t("img", [b, 6, 5, 24], dt)
    img_odd = c.t("img_odd", [b, 3, 3, 6], dt)
    c.outs.update({
        "ln_residual": ops.layernorm(x + r * v, w, bias), "ln": ops.layernorm(x, eps=1e-6), "rms": ops.rmsnorm(x + r, w),
        "ln_rows_any": ops.layernorm(xs), "rms_rows_any": ops.rmsnorm(xs),
        "ln_odd": ops.layernorm(xo, c.t("w13", [13], dt), c.t("b13", [13], dt)), "ln_2axes": ops.layernorm(xo, num_axes=2),
        "bn": ops.batchnorm(img, c.t("sc", [24], dt), c.t("sh", [24], dt), c.t("mu", [24], dt),
                            c.t("var", [24], dt, 0.5, 2.0)),
        "bn_odd": ops.batchnorm(img_odd, *[c.t(f"bo{i}", [6], dt, 0.5, 2.0) for i in range(4)]),
        "gn": ops.groupnorm(img, 4, c.t("gw", [24], dt), c.t("gb", [24], dt)), "gn_odd": ops.groupnorm(img_odd, 3),
    })
    return c, [{"b": 2, "s": 100}, {"b": 1, "s": 3001}, {"b": 3, "s": 12000}], None


# -- pooling ----------------------------------------------------------------------------------------

def case_pooling(dt):
    c = Cases(8)
    b = ag.IntVar("b", 1, 8)
    img = c.t("img", [b, 9, 11, 24], dt)
    odd = c.t("odd", [b, 7, 7, 3], dt)
    c.outs.update({
        "max": ops.max_pool2d(img, 3, 2, 1), "max_dil": ops.max_pool2d(odd, 2, 1, 0, dilation=2),
        "max_ceil": ops.max_pool2d(odd, 3, 2, 0, ceil_mode=True),
        "avg": ops.avg_pool2d(img, 3, 2, 1), "avg_excl": ops.avg_pool2d(img, 3, 2, 1, count_include_pad=False),
        "avg_odd_ceil": ops.avg_pool2d(odd, 2, 2, 1, ceil_mode=True), "gap": ops.global_avg_pool(img),
        "gap_odd": ops.global_avg_pool(odd),
    })
    c.exact |= {"max", "max_dil", "max_ceil"}
    return c, [{"b": 2}, {"b": 1}], None


# -- the GPU tier: every case in every dtype it takes ------------------------------------------

CASES = [
    *[(case_elementwise, dt) for dt in FLOATS],
    *[(case_every_elementwise_kind, dt) for dt in ("float32",)],
    *[(case_memory_and_gather, dt) for dt in FLOATS + ("int32",)],
    *[(case_reductions, dt) for dt in FLOATS],
    *[(case_integer_reductions, dt) for dt in ("int32",)],
    *[(case_softmax, dt) for dt in FLOATS],
    *[(case_norms, dt) for dt in FLOATS],
    *[(case_pooling, dt) for dt in FLOATS],
]


@pytest.mark.parametrize("case,dt", CASES, ids=[f"{c.__name__[5:]}-{dt}" for c, dt in CASES])
def test_own_ops_against_the_oracle(gpu_arch, tmp_path, case, dt):
    check(case, dt, gpu_arch, tmp_path)


# -- misaligned operands: the scalar fallbacks -------------------------------------------------------

def test_misaligned_dlpack_operands_take_the_scalar_path(gpu_arch, tmp_path):
    """Views one element into torch CUDA tensors (2-byte aligned): packs are not allowed, the
    scalar variants must give the same numbers."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = ag.Tensor([64, 768], dtype="float16", name="x")
    r = ag.Tensor([64, 768], dtype="float16", name="r")
    w = ag.Tensor([768], dtype="float16", name="w")
    outs = {"ln": ops.layernorm(x + r, w), "sm": ops.softmax(x, axis=-1), "ew": ops.gelu(x * w),
            "red": ops.reduce_sum(x, axes=[1]), "perm": ops.permute(x, [1, 0])}
    model = ag.compile_model(outs, target="cuda", arch=gpu_arch, workdir=tmp_path / "m")
    g = torch.Generator(device="cuda").manual_seed(0)
    big = [torch.randn(64 * 768 + 1, device="cuda", dtype=torch.float16, generator=g) for _ in range(3)]
    feeds = {"x": big[0][1:].view(64, 768), "r": big[1][1:].view(64, 768), "w": big[2][1:769]}
    got = model.run(feeds)
    np_feeds = {k: v.cpu().numpy() for k, v in feeds.items()}
    ref = ag.reference.run(outs, np_feeds)
    for k in outs:
        out = got[k]
        out = out.cpu().numpy() if hasattr(out, "cpu") else np.asarray(out)
        close(out, ref[k], 0 if k == "perm" else RTOL["float16"], k)
