"""benchmarks/cpu_vs_peers.py end to end at the small configs: it builds all three frameworks, they
agree numerically, and the JSON has the documented structure. No timing assertions: these machines
are shared and noisy, and the full-size numbers are the benchmark's business, not the suite's."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_vs_peers.py"
FRAMEWORKS = ("aitgen", "aitgen_onnx", "onnxruntime", "torch")


def test_small_run_agrees_and_writes_json(tmp_path):
    out = tmp_path / "r.json"
    # The suite's conftest sets OMP_NUM_THREADS=1 for its workers; the script must not inherit it.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # --max-foreign 1: keep every round (another test worker may share the cores).
    proc = subprocess.run([sys.executable, str(SCRIPT), "--small", "--rounds", "2", "--iters", "1", "--warmup", "1",
                           "--max-foreign", "1", "--pause", "0.05", "--models", "bert_base,resnet50",
                           "--out", str(out), "--workdir", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "aitgen/ort" in proc.stdout  # the table

    doc = json.loads(out.read_text())
    env = doc["environment"]
    assert env["small"] is True and env["rounds"] == 2
    assert env["threads"] == len(os.sched_getaffinity(0)) and env["OMP_NUM_THREADS"] == str(env["threads"])
    assert doc["target_ratio"] == 0.8 and env["pause_s"] == 0.05 and "avx2" in env["cpu_isa"]["flags"]
    assert list(doc["models"]) == ["bert_base", "resnet50"]
    outputs = {"bert_base": {"last_hidden_state", "pooler_output"}, "resnet50": {"logits"}}
    for name, e in doc["models"].items():
        assert e["errors"] == {} and e["skipped"] == {}, (name, e["errors"], e["skipped"])
        num = e["numerics"]
        assert num["ok"] is True and num["reference"] == "torch float64 twin", (name, num)
        for fw in FRAMEWORKS:
            diffs = num["max_abs_diff"][fw]
            assert set(diffs) == outputs[name]
            assert all(0 <= d <= num["tolerance"] * num["max_abs_reference"][k] for k, d in diffs.items()), (fw, diffs)
        assert set(num["max_abs_diff"]["aitgen_vs_onnxruntime"]) == outputs[name]
        for fw in FRAMEWORKS:
            lat = e["latency_ms"][fw]
            assert len(lat["rounds"]) == 2 and lat["min"] <= lat["median"] <= lat["max"] and lat["min"] > 0
        assert e["rounds"]["kept"] == 2 and e["rounds"]["dropped"] == 0  # --max-foreign 1 keeps every round
        assert len(e["rounds"]["foreign_cpu_share"]) == 2
        assert set(e["ratio"]) == {"aitgen/onnxruntime", "aitgen_onnx/onnxruntime", "aitgen/torch"}
        assert e["ratio"]["aitgen/onnxruntime"] == pytest.approx(
            e["latency_ms"]["aitgen"]["median"] / e["latency_ms"]["onnxruntime"]["median"])
        assert isinstance(e["target"]["met"], bool)
        assert e["aitgen_build"]["num_kernels"] > 0
        # the implementations oneDNN chose (a jit ISA, never its reference kernel), per build
        for build in ("aitgen_build", "aitgen_onnx_build"):
            isa = e[build]["onednn_isa"]
            assert isa and sum(isa.values()) >= 1, (name, build, isa)
            assert not any(impl.startswith("ref") for impl in isa), isa
