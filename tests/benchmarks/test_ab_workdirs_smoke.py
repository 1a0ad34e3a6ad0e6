"""benchmarks/ab_workdirs.py on two builds of one small model that differ in one constant: the
outputs' difference is reported exactly (against the oracle's difference of the two graphs), and
the JSON has a median per build and their ratio. No timing assertions: these machines are shared."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

import aitgen as ag
from aitgen import ops
from aitgen.debug import random_inputs

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "ab_workdirs.py"


def _build(work, bias):
    rng = np.random.default_rng(7)
    x = ag.Tensor([4, 16], name="x")
    w = ag.constant((rng.standard_normal((16, 8)) * 0.3).astype(np.float32))
    out = {"y": ops.relu(ops.gemm(x, w, ag.constant(np.full(8, bias, np.float32))))}
    ag.compile_model(out, target="cpu", workdir=work)
    return out


def test_two_builds_compared(tmp_path):
    old, new = _build(tmp_path / "old", 0.0), _build(tmp_path / "new", 0.5)
    with ag.Model.load(tmp_path / "old") as m:
        feeds = random_inputs(m.input_specs)   # what the script feeds (seed 0)
    want = float(np.max(np.abs(ag.reference.run(new, feeds)["y"].astype(np.float64)
                               - ag.reference.run(old, feeds)["y"])))
    out = tmp_path / "ab.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "old"), str(tmp_path / "new"), "--rounds", "2",
                           "--iters", "3", "--warmup", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert want > 0.1
    assert abs(r["max_abs_diff"]["y"] - want) <= 1e-5 * max(1.0, want)
    assert set(r["median_ms"]) == {"old", "new"} and all(v > 0 for v in r["median_ms"].values())
    assert abs(r["new_over_old"] - r["median_ms"]["new"] / r["median_ms"]["old"]) < 1e-12
    assert len(r["rounds_ms"]["old"]) == 2 and "flags" in r["cpu_isa"]
