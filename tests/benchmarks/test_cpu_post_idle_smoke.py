"""benchmarks/cpu_post_idle.py on a small zoo model: every runner (aitgen float32 and int8,
onnxruntime) and the plain memory read get one median per gap and call position, and the JSON
records the CPU's ISA. No timing assertions: these machines are shared."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_post_idle.py"


def test_post_idle_smoke(tmp_path):
    pytest.importorskip("onnxruntime", reason="needs the bench extra (onnxruntime)")
    pytest.importorskip("torch", reason="needs the torch extra (the ONNX export)")
    out = tmp_path / "p.json"
    cmd = [sys.executable, str(SCRIPT), "--small", "--models", "mobilenet_v2", "--precisions", "float32", "int8",
           "--gaps", "0", "0.01", "--reps", "1", "--calls", "2", "--mem-mb", "1", "--workdir", str(tmp_path / "w"),
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    res = doc["median_ms_per_call_position"]
    assert set(res) == {"memory_read", "mobilenet_v2"}
    assert set(res["mobilenet_v2"]) == {"aitgen_float32", "aitgen_int8", "onnxruntime_fp32"}
    for series in [res["memory_read"], *res["mobilenet_v2"].values()]:
        assert set(series) == {"0.0", "0.01"}
        assert all(len(v) == 2 and all(t > 0 for t in v) for v in series.values())
    assert "flags" in doc["environment"]["cpu_isa"]
