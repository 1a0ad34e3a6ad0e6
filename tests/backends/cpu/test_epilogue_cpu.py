"""Fused epilogues on the CPU's oneDNN kernels (gemm, bmm, conv2d) against the oracle of the unfused
graph: the post-op path (checked to be the one oneDNN runs, with ONEDNN_VERBOSE in a child process)
and the loop path (expressions post-ops cannot say, and broadcasts oneDNN takes only in its
reference kernel), 16-bit types, dynamic dims, an empty reduction, and set_constants.

Many cases share one build per test. Tolerances as in test_gemm_conv.py.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops

F32 = dict(rtol=1e-5, atol=1e-5)
TOL = {"float32": F32, "float16": dict(rtol=2e-3, atol=2e-3), "bfloat16": dict(rtol=1.6e-2, atol=1.6e-2)}

_rng = np.random.default_rng(7)


def const(shape, dtype="float32", scale=0.3, low=None, name=None):
    v = _rng.uniform(low, 1.0, shape) if low is not None else _rng.standard_normal(shape) * scale
    return ag.constant(np.asarray(v).astype(ag.DType[dtype].np), name=name)


def rand(shape, dtype="float32"):
    return _rng.standard_normal(shape).astype(ag.DType[dtype].np)


def check(got, want, tol=F32):
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        g, w = got[k].astype(np.float32), want[k].astype(np.float32)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=k)


def test_gemm_bmm_epilogues_dynamic(tmp_path):
    m = ag.IntVar("m", 1, 48)
    x = ag.Tensor([m, 3, 16], name="x")       # leading dims fold into M
    r = ag.Tensor([m, 3, 24], name="r")       # a residual
    row = ag.Tensor([m, 3, 1], name="row")    # one value per row: oneDNN's reference kernel only -> loop
    pos = ag.Tensor([3, 24], name="pos")      # broadcast over m: the folded [M, N] cannot say it -> loop
    q, k = ag.Tensor([m, 2, 5, 8], name="q"), ag.Tensor([m, 2, 5, 8], name="k")
    mask = ag.Tensor([m, 1, 1, 5], name="mask")
    col = const(24, low=0.5)

    def lin(bias=True):
        return ops.linear(x, const((24, 16)), const(24) if bias else None)

    outs = {
        # post-op chains (relu, clamp, max/min, erf GELU, exp, log, rsqrt: the loop, for NaN and inf)
        "gelu_res": ops.gelu(lin()) + r,
        "gelu_tanh_scale": ops.gelu(lin(), approximate="tanh") * 0.5,
        "bias_from_add_relu6": ops.relu6(lin(False) + const(24)),
        "hardswish_silu": ops.silu(ops.hardswish(lin())),
        "tanh_sigmoid_abs": ops.abs(ops.sigmoid(ops.tanh(lin()))) - r,
        "swapped_sub_div": (r - lin()) / col,
        "max_min": ops.minimum(ops.maximum(lin(), col * 0.1), r),
        "clamp_exp_neg": -ops.exp(ops.clamp(lin(), -2.0, 1.0)),
        "sqrt_log": ops.log(ops.sqrt(ops.abs(lin()) + 1.0)),
        "rsqrt_recip": ops.reciprocal(ops.rsqrt(ops.abs(lin()) + 0.5)),
        "scores": ops.bmm(q, k, trans_b=True) * 0.35 + mask,                  # batched descriptor
        "bmm_fold": ops.relu(ops.bmm(x, const((1, 16, 24)))) + r,             # one b: folds into M
        # loop path
        "per_row": ops.relu(lin()) * row,
        "pos_emb": lin() + pos,
        "dag_where": ops.where(ops.greater(lin(), 0.0), lin(), lin() * 0.1),
        "dag_twice": ops.erf(lin()) * ops.tanh(lin()),
        "silu_dag": (lambda y: y * ops.sigmoid(y))(lin()),
    }
    workdir = tmp_path / "m"
    model = ag.compile_model(outs, target="cpu", workdir=workdir)
    templates = [k["template"] for k in json.loads((workdir / "report.json").read_text())["kernels"]]
    # Every element-wise op went into a GEMM (dag_where's compare and select into the first one's).
    assert all("gemm" in t for t in templates), templates
    for size in (1, 5, 48):
        feeds = {"x": rand((size, 3, 16)), "r": rand((size, 3, 24)), "row": rand((size, 3, 1)),
                 "pos": rand((3, 24)), "q": rand((size, 2, 5, 8)), "k": rand((size, 2, 5, 8)),
                 "mask": rand((size, 1, 1, 5))}
        check(model.run(feeds), ag.reference.run(outs, feeds))

    # The post-op chains are the ones oneDNN runs: its verbose log names them.
    log = _onednn_verbose(workdir, {"x": (5, 3, 16), "r": (5, 3, 24), "row": (5, 3, 1), "pos": (3, 24),
                                    "q": (5, 2, 5, 8), "k": (5, 2, 5, 8), "mask": (5, 1, 1, 5)})
    chains = ["eltwise_gelu_tanh+binary_mul:f32:0 ",     # 0: a scalar
              "eltwise_hardswish:0.166667:0.5+eltwise_swish:1 ",
              "eltwise_tanh+eltwise_logistic+eltwise_abs+binary_sub:f32:3:ab ",  # mask 3: a full [M, N] operand
              "eltwise_linear:-1+binary_add:f32:3:ab+binary_div:f32:2 ",  # 2: per column
              "binary_mul:f32:0+binary_add:f32:9:abcd "]  # the [m, 1, 1, S] mask of a batched matmul
    for chain in chains:
        assert "attr-post-ops:" + chain in log, chain
    # Post-ops that get NaN or +-inf wrong are never asked for: their epilogues run in the loop
    # (tests/security/test_nan_semantics.py); relu, erf GELU and clip only under the kernel's guard
    # (tests/backends/cpu/test_guarded_postops.py), in chains of what it bounds.
    used = {p for chain in re.findall(r"attr-post-ops:(\S+)", log) for p in chain.split("+")}
    assert not {p.split(":")[0] for p in used} & {"binary_max", "binary_min", "eltwise_exp", "eltwise_log"}, used
    assert "attr-post-ops:eltwise_relu+binary_add:f32:" in log  # bmm_fold: relu(x b) + r, guarded
    assert "eltwise_pow:1:-0.5" not in used, used
    # per_row and pos_emb run plain (their loop does the epilogue), as do the DAGs.
    assert "binary_mul:f32:1" not in log and "binary_add:f32:2:ab" not in log


def _onednn_verbose(workdir, shapes) -> str:
    code = textwrap.dedent(f"""
        import numpy as np, aitgen as ag
        m = ag.Model.load({str(workdir)!r})
        rng = np.random.default_rng(0)
        m.run({{k: rng.standard_normal(s).astype(np.float32) for k, s in {shapes!r}.items()}})
    """)
    # AITGEN_PACKED_SGEMM=0: on a CPU without AVX-512 the linear layers would otherwise run oneDNN's
    # packed sgemm (no post-ops, no verbose lines; tests/backends/cpu/test_packed_sgemm.py), and
    # this test is about the post-op chains the matmul primitive is given.
    env = dict(os.environ, ONEDNN_VERBOSE="1", AITGEN_PACKED_SGEMM="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return "\n".join(ln for ln in out.stdout.splitlines() if ",exec," in ln)


def test_conv_epilogues_dynamic(tmp_path):
    n, h, w = ag.IntVar("n", 1, 3), ag.IntVar("h", 4, 12), ag.IntVar("w", 4, 12)
    x = ag.Tensor([n, h, w, 8], name="x")
    se = ag.Tensor([n, 1, 1, 8], name="se")   # squeeze-excite style [N, 1, 1, C]
    bn = [const(8, low=0.5), const(8), const(8), const(8, low=0.5)]
    block = ops.batchnorm(ops.conv2d(x, const((8, 3, 3, 8)), padding=1), *bn, eps=1e-5)
    outs = {
        "bn_relu_residual": ops.relu(block + x),
        "dw_relu6": ops.relu6(ops.conv2d(x, const((8, 3, 3, 1)), const(8), padding=1, groups=8)),
        "per_channel_scale": ops.conv2d(x, const((8, 1, 1, 8))) * const(8, low=0.5) + const(8),
        "se_mul": ops.sigmoid(ops.conv2d(x, const((8, 1, 1, 8)), const(8))) * se,
        "strided_dag": (lambda y: ops.where(ops.less(y, 0.0), y * y, y))(
            ops.conv2d(x, const((6, 3, 3, 8)), const(6), stride=2, padding=1)),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    assert json.loads((tmp_path / "m" / "report.json").read_text())["num_kernels"] == len(outs)
    for sn, sh, sw in ((1, 5, 7), (3, 12, 4)):
        feeds = {"x": rand((sn, sh, sw, 8)), "se": rand((sn, 1, 1, 8))}
        check(model.run(feeds), ag.reference.run(outs, feeds))


def test_conv_transpose_epilogues(tmp_path):
    # A decoder's upsampling layer: bias + activation + residual in the deconvolution's kernel
    # (post-ops, or the loop for what they cannot say), dynamic batch, grouped, output_padding.
    n = ag.IntVar("n", 1, 3)
    x = ag.Tensor([n, 5, 5, 6], name="x")
    res = ag.Tensor([n, 10, 10, 4], name="res")
    up = lambda b=True: ops.conv_transpose2d(x, const((6, 3, 3, 4)), const(4) if b else None,  # noqa: E731
                                             stride=2, padding=1, output_padding=1)
    bn = [const(4, low=0.5), const(4), const(4), const(4, low=0.5)]
    outs = {
        "bias_relu_residual": ops.relu(up()) + res,
        "bias_from_add_gelu": ops.gelu(up(False) + const(4)),
        "bn_silu": ops.silu(ops.batchnorm(up(False), *bn, eps=1e-5)),
        "grouped_dag": (lambda y: ops.where(ops.less(y, 0.0), y * 0.2, y))(
            ops.conv_transpose2d(x, const((6, 2, 2, 2)), const(6), stride=2, groups=3)),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    assert json.loads((tmp_path / "m" / "report.json").read_text())["num_kernels"] == len(outs)
    for size in (1, 3):
        feeds = {"x": rand((size, 5, 5, 6)), "res": rand((size, 10, 10, 4))}
        check(model.run(feeds), ag.reference.run(outs, feeds))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit(tmp_path, dtype):
    m = ag.IntVar("m", 1, 16)
    x = ag.Tensor([m, 24], dtype, name="x")
    r = ag.Tensor([m, 10], dtype, name="r")
    img = ag.Tensor([m, 5, 5, 4], dtype, name="img")
    res = ag.Tensor([m, 5, 5, 6], dtype, name="res")
    lin = ops.linear(x, const((10, 24), dtype), const(10, dtype))
    outs = {
        "gelu_res": ops.gelu(lin) + r,                      # float16: eltwise post-ops, the add in the loop
        "relu_scale": ops.relu(ops.linear(x, const((10, 24), dtype))) * 0.25,
        "dag": ops.where(ops.greater(ops.linear(x, const((10, 24), dtype)), 0.0), r, -r),
        "conv": ops.relu(ops.conv2d(img, const((6, 3, 3, 4), dtype), const(6, dtype), padding=1) + res),
        "bmm": ops.tanh(ops.bmm(ops.reshape(x, [m, 4, 6]), const((1, 6, 10), dtype))) + ops.reshape(r, [m, 1, 10]),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for size in (3, 16):
        feeds = {"x": rand((size, 24), dtype), "r": rand((size, 10), dtype), "img": rand((size, 5, 5, 4), dtype),
                 "res": rand((size, 5, 5, 6), dtype)}
        check(model.run(feeds), ag.reference.run(outs, feeds), TOL[dtype])


def test_empty_reduction_runs_the_epilogue(tmp_path):
    k = ag.IntVar("k", 0, 8)
    x, wt = ag.Tensor([4, k], name="x"), ag.Tensor([k, 6], name="wt")
    r = ag.Tensor([4, 6], name="r")
    outs = {"y": ops.sigmoid(ops.gemm(x, wt, const(6))) + r}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for kk in (0, 3):
        feeds = {"x": rand((4, kk)), "wt": rand((kk, 6)), "r": rand((4, 6))}
        check(model.run(feeds), ag.reference.run(outs, feeds))


def test_set_constants_reach_weights_bias_and_epilogue_operands(tmp_path):
    n = ag.IntVar("n", 1, 4)
    x = ag.Tensor([n, 6, 6, 4], name="x")
    cw, cb, scale = const((8, 3, 3, 4), name="conv_w"), const(8, name="conv_b"), const(8, name="ch_scale")
    fw, fb, colv = const((5, 8), name="fc_w"), const(5, name="fc_b"), const(5, name="col")
    h = ops.relu(ops.conv2d(x, cw, cb, padding=1) * scale)
    outs = {"conv": h, "fc": ops.gelu(ops.linear(ops.reshape(h, [n * 36, 8]), fw, fb)) * colv}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = {"x": rand((2, 6, 6, 4))}
    before = model.run(feeds)
    check(before, ag.reference.run(outs, feeds))
    new = {"conv_w": rand((8, 3, 3, 4)), "conv_b": rand(8), "ch_scale": rand(8), "fc_w": rand((5, 8)),
           "fc_b": rand(5), "col": rand(5)}
    model.set_constants(new)
    for t, name in ((cw, "conv_w"), (cb, "conv_b"), (scale, "ch_scale"), (fw, "fc_w"), (fb, "fc_b"), (colv, "col")):
        t.value = new[name]
    for size in (2, 3):  # a cached shape and a new one both see the new values
        feeds = {"x": rand((size, 6, 6, 4))}
        check(model.run(feeds), ag.reference.run(outs, feeds))
    model.close()


def test_fused_and_unfused_builds_agree_with_fewer_kernels(tmp_path):
    inputs, outputs = ag.models.get("resnet50", layers=(1, 1, 1, 1), width=8, image_size=32)
    feeds = {k: rand([d.value for d in t.shape]) for k, t in inputs.items()}
    got, kernels = {}, {}
    for fusion in (True, False):
        wd = tmp_path / str(fusion)
        got[fusion] = ag.compile_model(outputs, target="cpu", workdir=wd, fusion=fusion).run(feeds)
        kernels[fusion] = json.loads((wd / "report.json").read_text())["num_kernels"]
    check(got[True], got[False])
    check(got[True], ag.reference.run(outputs, feeds))
    assert kernels[True] < kernels[False]


def test_float16_epilogue_loop_converts_rows_in_bulk(tmp_path):
    """A float16 GEMM's and conv's loop epilogue (GELU erf, left to the loop; a residual; a value per
    row, which oneDNN's fast kernels lack) reads and writes the output 512 elements at a time through
    F16C: 1100 columns cross two block edges. Against the oracle, float16's tolerance."""
    m = ag.IntVar("m", 1, 7)
    x = ag.Tensor([m, 64], "float16", name="x")
    r = ag.Tensor([m, 1100], "float16", name="r")
    row = ag.Tensor([m, 1], "float16", name="row")
    img = ag.Tensor([1, 5, 6, 16], "float16", name="img")
    w, b = const((64, 1100), "float16", 0.1), const((1100,), "float16")
    outs = {"gelu": ops.gelu(ops.gemm(x, w, b)), "res": ops.add(ops.gemm(x, w), r) * row,
            "conv": ops.gelu(ops.conv2d(img, const((1100, 3, 3, 16), "float16", 0.1), padding=1))}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    src = "\n".join(f.read_text() for f in (tmp_path / "m" / "obj" / "src").glob("k_*.cpp"))
    assert src.count("ait::to_f32_block(orow + c0, f, nb)") >= 3, "every float16 epilogue loop converts in bulk"
    for n in (1, 7):
        feeds = {"x": rand((n, 64), "float16"), "r": rand((n, 1100), "float16"), "row": rand((n, 1), "float16"),
                 "img": rand((1, 5, 6, 16), "float16")}
        check(model.run(feeds), ag.reference.run(outs, feeds), TOL["float16"])
