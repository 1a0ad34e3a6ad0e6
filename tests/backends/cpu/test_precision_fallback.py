"""compile_model(precision=...) on a CPU without the instructions that make it fast: a
PrecisionFallbackWarning saying what runs instead, the same note in report.json's precision, and a
build whose numbers are still right (bfloat16 against the float32 oracle within 2e-2 of max |y|,
int8 within 5e-2: their rounding). bfloat16 is forced onto the no-AVX-512 path by patching the CPU
check (native_bf16); int8 by ONEDNN_MAX_CPU_ISA=AVX2, which both the build and oneDNN honour. Where
the CPU has the instructions, no warning and no note."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.kernels.cpu import gemm as cpu_gemm
from aitgen.errors import PrecisionFallbackWarning

RNG = np.random.default_rng(31)


def _graph():
    x = ag.Tensor([8, 32], name="x")
    w = ag.constant((RNG.standard_normal((32, 16)) * 0.2).astype(np.float32))
    return {"y": ops.relu(ops.gemm(x, w, ag.constant(RNG.standard_normal(16).astype(np.float32))))}


def _feeds():
    return {"x": np.random.default_rng(5).standard_normal((8, 32)).astype(np.float32)}


def _close(model, outs, tol):
    want = ag.reference.run(outs, _feeds())["y"]
    got = model.run(_feeds())["y"].astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())))


def test_bf16_without_avx512_warns_and_reports(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_gemm, "native_bf16", lambda: False)
    outs = _graph()
    with pytest.warns(PrecisionFallbackWarning, match="bfloat16 on a CPU without AVX-512"):
        model = ag.compile_model(outs, target="cpu", workdir=tmp_path, precision="bfloat16")
    report = json.loads((tmp_path / "report.json").read_text())
    assert "float32 on converted operands" in report["precision"]["fallback"]
    _close(model, outs, 2e-2)


def test_int8_without_vnni_warns_and_reports(tmp_path, monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    outs = _graph()
    calib = [{"x": np.random.default_rng(s).standard_normal((8, 32)).astype(np.float32)} for s in range(4)]
    with pytest.warns(PrecisionFallbackWarning, match="int8 on a CPU without VNNI"):
        model = ag.compile_model(outs, target="cpu", workdir=tmp_path, precision="int8", calibration=calib)
    report = json.loads((tmp_path / "report.json").read_text())
    assert "int16" in report["precision"]["fallback"] and "7 bits" in report["precision"]["fallback"]
    _close(model, outs, 5e-2)


def test_no_note_where_the_cpu_has_them(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_gemm, "native_bf16", lambda: True)
    outs = _graph()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionFallbackWarning)
        ag.compile_model(outs, target="cpu", workdir=tmp_path / "bf16", precision="bfloat16", load=False)
        ag.compile_model(outs, target="cpu", workdir=tmp_path / "f32", load=False)
    for d in ("bf16", "f32"):
        assert "fallback" not in json.loads((tmp_path / d / "report.json").read_text())["precision"]
