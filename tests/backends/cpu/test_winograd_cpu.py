"""CPU float32 3x3 stride-1 convs as Winograd F(4x4, 3x3) (backends/cpu/include/aitgen/cpu_winograd.h)
against the oracle, and the direct form where Winograd does not apply or does not pay.

Tolerance: rtol 1e-4 with atol 1e-4 x max|reference|. The transforms' coefficients (up to 8 in the
output transform, 25 in the input's) round at about 1e-5 of the output's magnitude (measured: 2e-6
to 1.2e-5 of max|y| on the shapes below and ResNet-50's); the direct form keeps the 1e-5 of the
other conv tests, checked here with winograd=False.
"""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.ops.conv import conv2d_nhwc
from cpu_cases import Seeded, check

WINO = 1e-4
DIRECT = 1e-5


def _graph(s: Seeded):
    """Convs that take Winograd (a, b, c at every batch) and ones that stay direct (d: too few
    tiles; e: too few channels; f: stride 2), with bias, asymmetric padding and epilogues."""
    n = ag.IntVar("n", 1, 3)
    xa = ag.Tensor([n, 20, 20, 32], name="xa")
    xb = ag.Tensor([n, 15, 17, 37], name="xb")
    res = ag.Tensor([n, 20, 20, 48], name="res")
    xd = ag.Tensor([n, 6, 6, 32], name="xd")
    xe = ag.Tensor([n, 20, 20, 16], name="xe")
    outs = {
        "a": ops.relu(ops.conv2d(xa, s.const([48, 3, 3, 32]), s.const([48]), padding=1, name="conv_a")),
        # 15x17 -> 15x16 outputs: tail tiles in both directions; 37 and 45 channels leave partial blocks
        "b": ops.conv2d(xb, s.const([45, 3, 3, 37]), padding=(0, 2, 1, 0), name="conv_b"),
        "c": ops.relu(ops.conv2d(xa, s.const([48, 3, 3, 32]), s.const([48]), padding=1, name="conv_c") + res),
        "d": ops.conv2d(xd, s.const([32, 3, 3, 32]), padding=1, name="conv_d"),
        "e": ops.conv2d(xe, s.const([16, 3, 3, 16]), padding=1, name="conv_e"),
        "f": ops.conv2d(xa, s.const([48, 3, 3, 32]), stride=2, padding=1, name="conv_f"),
    }
    shapes = {"xa": (20, 20, 32), "xb": (15, 17, 37), "res": (20, 20, 48), "xd": (6, 6, 32), "xe": (20, 20, 16)}
    return outs, shapes


def _impls(model) -> dict:
    """op name -> the implementations its kernel got."""
    got: dict[str, set] = {}
    for r in model.kernel_report()["onednn_primitives"]:
        for op in r["ops"]:
            got.setdefault(op, set()).add(r["impl"])
    return got


def _wino_ops(model) -> set:
    return {op for op, impls in _impls(model).items() if any(i.startswith("winograd_4x3+") for i in impls)}


@pytest.mark.parametrize("winograd", [True, False])
def test_winograd_against_oracle(tmp_path, winograd):
    s = Seeded(7)
    outs, shapes = _graph(s)
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m", winograd=winograd)
    for n in (1, 3):
        feeds = {k: s.rand((n,) + v) for k, v in shapes.items()}
        check(model.run(feeds), ag.reference.run(outs, feeds), WINO if winograd else DIRECT)
    if winograd:
        assert _wino_ops(model) == {"conv_a", "conv_b", "conv_c"}
        for op in ("conv_a", "conv_b", "conv_c"):  # only the Winograd form ran for these
            assert all(i.startswith("winograd_4x3+") for i in _impls(model)[op]), _impls(model)[op]
    else:
        assert _wino_ops(model) == set()


def test_winograd_nan_and_inf_stay_where_direct_puts_them(tmp_path):
    """The transforms would spread a NaN over its tiles and turn an infinity into NaN: a call
    whose result is not finite is computed directly, and the next finite call by Winograd again."""
    s = Seeded(8)
    x = ag.Tensor([1, 16, 16, 32], name="x")
    outs = {"y": ops.conv2d(x, s.const([40, 3, 3, 32]), s.const([40]), padding=1, name="conv_w")}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    finite = {"x": s.rand((1, 16, 16, 32))}
    check(model.run(finite), ag.reference.run(outs, finite), WINO)
    assert _impls(model)["conv_w"] == {i for i in _impls(model)["conv_w"] if i.startswith("winograd_4x3+")}
    bad = {"x": finite["x"].copy()}
    bad["x"][0, 5, 6, 3] = np.nan
    bad["x"][0, 12, 1, 30] = np.inf
    bad["x"][0, 0, 15, 0] = -np.inf
    got, want = model.run(bad)["y"], ag.reference.run(outs, bad)["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isfinite(want).sum() > 0.9 * want.size  # the non-finite values stay in their windows
    check({"y": np.where(np.isfinite(want), got, 0)}, {"y": np.where(np.isfinite(want), want, 0)}, DIRECT)
    assert any(not i.startswith("winograd_4x3+") for i in _impls(model)["conv_w"])  # the direct form ran
    check(model.run(finite), ag.reference.run(outs, finite), WINO)


def test_winograd_non_finite_weight_and_overflow(tmp_path):
    """A NaN or infinite weight, and inputs whose transforms overflow float32 though the direct sum
    does not: the result is checked and such a call computed directly, so both match the oracle."""
    s = Seeded(10)
    x = ag.Tensor([1, 16, 16, 32], name="x")
    w = ag.constant((s.rng.standard_normal((40, 3, 3, 32)) * 0.3).astype(np.float32), name="w")
    outs = {"y": ops.conv2d(x, w, padding=1, name="conv_nf")}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = {"x": s.rand((1, 16, 16, 32))}
    big = {"x": feeds["x"].copy()}
    big["x"][0, 7, 7, 5] = 3e37  # 25 x that overflows in the input transform; 3e37 x 0.3 x ... does not
    want = ag.reference.run(outs, big)["y"]
    assert np.isfinite(want).all()
    got = model.run(big)["y"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    w2 = (s.rng.standard_normal((40, 3, 3, 32)) * 0.3).astype(np.float32)
    w2[3, 1, 1, 7] = np.nan
    w2[11, 0, 2, 30] = np.inf
    # Against the direct build: where an infinite weight meets the zero padding, the oracle's im2col
    # multiplies it (NaN) and oneDNN's direct form skips it (+-inf); Winograd must give the latter.
    direct = ag.compile_model(outs, target="cpu", workdir=tmp_path / "d", winograd=False)
    for m in (model, direct):
        m.set_constants({"w": w2})
    got, want = model.run(feeds)["y"], direct.run(feeds)["y"]
    for f in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(f(got), f(want))
    fin = np.isfinite(want)
    assert fin[..., 0].all() and not fin[..., 3].any()  # only the two channels' outputs are not finite
    with np.errstate(invalid="ignore"):  # inf x 0 in the oracle's GEMM
        oracle = conv2d_nhwc(feeds["x"], w2, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    fin &= np.isfinite(oracle)  # (an infinite weight's tap in the padding: skipped, or inf x 0 = NaN)
    check({"y": np.where(fin, got, 0)}, {"y": np.where(fin, oracle, 0)}, DIRECT)
    assert np.isnan(got[..., 3]).all() and np.isnan(oracle[..., 3]).all()


def test_winograd_weights_follow_set_constants(tmp_path):
    """The transformed weight is made once per constants version: new weights, new results."""
    s = Seeded(9)
    x = ag.Tensor([2, 12, 12, 32], name="x")
    w = ag.constant(s.rng.standard_normal((32, 3, 3, 32)).astype(np.float32) * 0.3, name="w")
    outs = {"y": ops.conv2d(x, w, padding=1, name="conv_k")}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = {"x": s.rand((2, 12, 12, 32))}
    check(model.run(feeds), ag.reference.run(outs, feeds), WINO)
    w2 = s.rng.standard_normal((32, 3, 3, 32)).astype(np.float32)
    model.set_constants({"w": w2})
    want = conv2d_nhwc(feeds["x"], w2, (1, 1), (1, 1, 1, 1), (1, 1), 1)  # the oracle's conv, new weight
    check(model.run(feeds), {"y": want}, WINO)
    assert "conv_k" in _wino_ops(model)


def test_cli_no_winograd(tmp_path):
    """`aitgen compile` builds Winograd by default and the direct form with --no-winograd, as
    report.json's kernel check (one run at the smallest shapes) records. The numbers of both forms
    are checked against the oracle above."""
    import json
    import textwrap

    from aitgen.cli import main
    mod = tmp_path / "convs.py"
    mod.write_text(textwrap.dedent("""
        import numpy as np
        import aitgen as ag
        from aitgen import ops

        def build():
            x = ag.Tensor([1, 16, 16, 32], name="x")
            w = ag.constant(np.random.default_rng(3).standard_normal((32, 3, 3, 32)).astype(np.float32))
            return {"y": ops.conv2d(x, w, padding=1)}
    """))
    got = {}
    for flag in ([], ["--no-winograd"]):
        work = tmp_path / ("direct" if flag else "wino")
        assert main(["compile", f"{mod}:build", "--target", "cpu", "--workdir", str(work)] + flag) == 0
        impls = json.loads((work / "report.json").read_text())["onednn_impls"]
        got[bool(flag)] = any("winograd_4x3+" in v for v in impls.values())
    assert got == {False: True, True: False}
