"""relu and erf GELU as oneDNN post-ops under a guard (kernels/cpu/epilogue.py GUARDED,
backends/cpu/include/aitgen/onednn_guard.h).

oneDNN's relu turns NaN into 0 and its gelu_erf turns +inf into NaN, where the op keeps them. A
kernel with these post-ops bounds the values they read from its operands' magnitudes and runs
them only where that proves every value finite; otherwise the plain primitive and the loop, which
keep NaN and +-inf as the op defines them. Checked here through oneDNN's verbose log (which
primitive each call executed) and against the oracle, NaN-aware, for float32 and bfloat16 builds:
finite inputs take the post-ops; a NaN, an infinity, or finite values large enough to overflow
the sum take the plain path; and the next finite call takes the post-ops again.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops


NAN, INF = np.float32(np.nan), np.float32(np.inf)


def _model():
    rng = np.random.default_rng(0)
    x, wide = ag.Tensor([6, 32], name="x"), ag.Tensor([6, 48], name="wide")
    img, r = ag.Tensor([1, 6, 6, 8], name="img"), ag.Tensor([1, 6, 6, 8], name="r")
    w1 = ag.constant((rng.standard_normal((48, 32)) * 0.3).astype(np.float32))
    b1 = ag.constant(rng.standard_normal(48).astype(np.float32))
    wc = ag.constant((rng.standard_normal((8, 3, 3, 8)) * 0.3).astype(np.float32))
    bc = ag.constant(rng.standard_normal(8).astype(np.float32))
    return {"ffn": ops.gelu(ops.linear(x, w1, b1)),
            # a strided view as the GEMM's source: the guard reads the view, not its whole tensor
            "ffn_view": ops.gelu(ops.linear(ops.slice(wide, [0, 8], [6, 40]), w1 * 0.5, b1)),
            "res": ops.relu(ops.conv2d(img, wc, bc, padding=1) + r),
            "relu6": ops.relu6(ops.conv2d(img, wc * 2.0, bc)),          # oneDNN's clip
            "clamp_low": ops.clamp(ops.conv2d(img, wc * 0.5, bc), -1.5)}  # open above: clip to FLT_MAX


def _feeds():
    rng = np.random.default_rng(1)

    def finite():
        wide = rng.standard_normal((6, 48)).astype(np.float32)
        wide[:, 0] = wide[:, 47] = NAN   # outside the view: no value of ffn_view reads them
        return {"x": rng.standard_normal((6, 32)).astype(np.float32), "wide": wide,
                "img": rng.standard_normal((1, 6, 6, 8)).astype(np.float32),
                "r": rng.standard_normal((1, 6, 6, 8)).astype(np.float32)}

    nan = finite()
    nan["x"][0, 3] = NAN
    nan["img"][0, 2, 2, 1] = NAN
    inf = finite()
    inf["x"][1, 5], inf["x"][2, 7] = INF, -INF
    inf["r"][0, 4, 4, :] = -INF      # relu(-inf) = 0, relu(+inf) = +inf either way; -inf + inf = NaN
    inf["img"][0, 0, 0, 0] = INF
    huge = finite()                  # finite, but the sums overflow to +-inf
    huge["x"][3] = np.float32(3e38)
    huge["img"][0, 3] = np.float32(3e38)
    last = finite()                  # the last element of each (the view's last row ends at column 39)
    last["img"][0, 5, 5, 7] = NAN
    last["wide"][5, 39] = NAN
    # (name, feed, the outputs whose kernels take their post-ops)
    return [("finite", finite(), {"ffn", "ffn_view", "res"}), ("nan", nan, {"ffn_view"}),
            ("inf", inf, {"ffn_view"}), ("huge", huge, {"ffn_view"}), ("last", last, {"ffn"}),
            ("finite_again", finite(), {"ffn", "ffn_view", "res"})]


def _run_logged(workdir, feeds, out_npz):
    """Run each feed in a fresh process with ONEDNN_VERBOSE; the exec lines of each call."""
    np.savez(out_npz.with_name("feeds.npz"), **{f"{i}/{k}": v for i, (_, f, _) in enumerate(feeds) for k, v in f.items()})
    code = textwrap.dedent(f"""
        import numpy as np, aitgen as ag
        z = np.load({str(out_npz.with_name('feeds.npz'))!r})
        m = ag.Model.load({str(workdir)!r})
        outs = {{}}
        for i in range({len(feeds)}):
            feed = {{k.split('/')[1]: z[k] for k in z.files if k.split('/')[0] == str(i)}}
            print('=== call', i, flush=True)
            for k, v in m.run(feed).items():
                outs[f'{{i}}/{{k}}'] = v
        np.savez({str(out_npz)!r}, **outs)
    """)
    env = dict(os.environ, ONEDNN_VERBOSE="1", AITGEN_PACKED_SGEMM="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    calls, cur = [], None
    for ln in out.stdout.splitlines():
        if ln.startswith("=== call"):
            cur = []
            calls.append(cur)
        elif cur is not None and ",exec," in ln and (",matmul," in ln or ",convolution," in ln):
            cur.append(ln)
    z = np.load(out_npz)
    return calls, [{k.split("/")[1]: z[k] for k in z.files if k.split("/")[0] == str(i)} for i in range(len(feeds))]


def _nan_aware(got, want, tol):
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), (np.argwhere(np.isnan(g) != np.isnan(w))[:4])
    assert np.array_equal(np.isposinf(g), np.isposinf(w)) and np.array_equal(np.isneginf(g), np.isneginf(w))
    fin = np.isfinite(w)
    scale = max(1.0, float(np.abs(w[fin]).max(initial=0.0)))
    np.testing.assert_allclose(g[fin], w[fin], rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_guarded_post_ops_run_only_on_values_proved_finite(tmp_path, precision):
    outs = _model()
    work = tmp_path / precision
    prec = None if precision == "float32" else precision
    ag.compile_model(outs, target="cpu", workdir=str(work), precision=prec)
    # Sums that overflow come out +-inf or NaN by the order of their terms, which the oracle (float64)
    # does not share: there the reference is the unfused build (oneDNN's sum, then the op's kernel).
    unfused = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "unfused"), precision=prec, fusion=False)
    feeds = _feeds()
    calls, results = _run_logged(work, feeds, tmp_path / "outs.npz")
    assert len(calls) == len(feeds)
    for (kind, feed, fused), lines, got in zip(feeds, calls, results):
        log = "\n".join(lines)
        assert len(lines) == 5, log
        # inputs proved finite: the post-op chain; else the plain primitive (its loop does the epilogue)
        gelus = sum("eltwise_gelu_erf" in ln for ln in lines)
        assert gelus == len(fused & {"ffn", "ffn_view"}), (precision, kind, log)
        assert ("eltwise_relu" in log) == ("res" in fused), (precision, kind, log)
        # relu6 and clamp_low read img as res does: post-ops exactly where res takes them
        assert sum("eltwise_clip" in ln for ln in lines) == (2 if "res" in fused else 0), (precision, kind, log)
        want = unfused.run(feed) if kind == "huge" else ag.reference.run(outs, feed)
        # float32: sums of 32 and 72 terms; bfloat16: operands rounded to 8 bits
        tol = 1e-4 if precision == "float32" else 3e-2
        for name in outs:
            _nan_aware(got[name], want[name], tol)
    # the planted specials reached the outputs the way the op defines them
    assert np.isnan(results[1]["ffn"][0]).all() and np.isnan(results[1]["res"]).any()
    assert np.isnan(results[4]["ffn_view"][5]).all() and np.isnan(results[4]["res"][0, 5, 5]).all()
    assert np.isposinf(results[3]["ffn"]).any() and np.isposinf(results[3]["res"]).any()
    unfused.close()
