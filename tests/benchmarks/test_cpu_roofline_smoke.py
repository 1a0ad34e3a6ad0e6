"""benchmarks/cpu_roofline.py at its small sizes, against a cpu_vs_peers JSON written here with known
latencies: the rates, fractions of peak and the 0.8x-ORT requirement are the arithmetic the script
documents, on FLOP counts equal to count_flops'. No timing assertions: these machines are shared."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from aitgen import models
from aitgen.analysis import count_flops

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_roofline.py"
sys.path.insert(0, str(SCRIPT.parent))
from cpu_vs_peers import CONFIGS  # noqa: E402

LATENCY_MS = {"aitgen": 2.0, "aitgen_onnx": 2.2, "onnxruntime": 2.5, "torch": 5.0}


def test_small_run_reports_rates_against_the_measured_peak(tmp_path):
    pytest.importorskip("torch")
    small = {k: v["small"] for k, v in CONFIGS.items()}
    peers = {"environment": {"date": "2026-12-02T00:00:00+0000", "threads": len(os.sched_getaffinity(0))},
             "models": {"bert_base": {"config": small["bert_base"],
                                      "latency_ms": {fw: {"median": ms} for fw, ms in LATENCY_MS.items()}},
                        # another config's latencies (a full-size run's) must not be used
                        "resnet50": {"config": {"batch": 1}, "latency_ms": {"aitgen": {"median": 24.0}}}}}
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    out = tmp_path / "r.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}  # the suite's: not inherited
    proc = subprocess.run([sys.executable, str(SCRIPT), "--small", "--shapes", "128x64x96,96x128x64", "--rounds", "2",
                           "--warmup", "1", "--pause", "0", "--models", "bert_base,resnet50",
                           "--peers-json", str(tmp_path / "peers.json"), "--out", str(out),
                           "--workdir", str(tmp_path / "work")], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0.8x ORT needs" in proc.stdout

    doc = json.loads(out.read_text())
    env = doc["environment"]
    assert env["threads"] == len(os.sched_getaffinity(0)) and env["OMP_NUM_THREADS"] == str(env["threads"])
    assert "avx2" in env["cpu_isa"]["flags"] and env["date"] and doc["target_ratio"] == 0.8
    peak = doc["peak"]
    rows = peak["gemms"]
    assert {(r["engine"], r["m"], r["n"], r["k"]) for r in rows} == {
        (e, *s) for e in ("aitgen", "numpy", "torch") for s in ((128, 64, 96), (96, 128, 64))}
    for r in rows:
        assert r["flops"] == 2 * r["m"] * r["n"] * r["k"] and r["rounds"] == 2
        assert r["gflops_median"] == pytest.approx(r["flops"] / r["median_s"] / 1e9)
        assert r["gflops_best"] >= r["gflops_median"] > 0
        assert r["max_rel_error"] < 1e-5, r  # each engine computed the product it was timed on
    assert peak["peak_gflops"] == max(r["gflops_best"] for r in rows)
    assert peak["aitgen_best_gflops"] == max(r["gflops_best"] for r in rows if r["engine"] == "aitgen")

    _, _, outputs = models.build("bert_base", **small["bert_base"])
    bert = doc["models"]["bert_base"]
    flops = count_flops(outputs)["flops"]
    assert bert["flops"] == flops and bert["by_kind"] == {"attention": 131072, "gemm": flops - 131072}
    for fw, ms in LATENCY_MS.items():
        f = bert["frameworks"][fw]
        assert f["latency_ms"] == ms and f["gflops"] == pytest.approx(flops / (ms / 1e3) / 1e9)
        assert f["fraction_of_peak"] == pytest.approx(f["gflops"] / peak["peak_gflops"])
    assert bert["target_ms"] == pytest.approx(0.8 * 2.5)
    assert bert["need_for_target_fraction_of_peak"] == pytest.approx(flops / 2.0e-3 / 1e9 / peak["peak_gflops"])
    assert bert["mac_time_at_peak_ms"] == pytest.approx(flops / peak["peak_gflops"] / 1e6)

    resnet = doc["models"]["resnet50"]
    assert resnet["frameworks"] == {} and "it has config {'batch': 1}" in resnet["missing"]
