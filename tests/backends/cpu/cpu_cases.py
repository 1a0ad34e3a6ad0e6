"""Shared by the CPU tests of grouped kernels and strided reads: seeded random data and the
comparison with the oracle (tolerances per dtype, atol scaled by the output's magnitude)."""
from __future__ import annotations

import numpy as np

import aitgen as ag

TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


class Seeded:
    """const/rand drawing from one seeded generator, so each test file keeps its own stream."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def const(self, shape, dtype="float32", scale=0.3):
        return ag.constant((self.rng.standard_normal(shape) * scale).astype(ag.DType[dtype].np))

    def rand(self, shape, dtype="float32"):
        return self.rng.standard_normal(shape).astype(ag.DType[dtype].np)


def check(got, want, tol):
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        g, w = got[k].astype(np.float32), want[k].astype(np.float32)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=k)


def assert_no_reference_kernels(workdir, model=None) -> dict:
    """report.json's kernel check (compile_model's run at the smallest shapes) found a oneDNN
    implementation for the oneDNN kernels and none is oneDNN's reference kernel; so does the
    loaded model after the runs it made (other shapes create primitives of their own). The report."""
    import json
    import pathlib
    report = json.loads((pathlib.Path(workdir) / "report.json").read_text())
    assert "error" not in report["kernel_check"], report["kernel_check"]
    onednn = {k["func"] for k in report["kernels"] if "onednn" in k["template"]}
    assert {k.split("/")[0] for k in report["onednn_impls"]} == onednn
    assert report["reference_kernels"] == [], report["reference_kernels"]
    if model is not None:
        assert model.kernel_report()["reference_kernels"] == []
    return report


def cpu_flags() -> set:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    from pathlib import Path
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
