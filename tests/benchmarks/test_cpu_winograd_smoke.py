"""benchmarks/cpu_winograd.py on one small shape, in this process: the JSON has the documented
structure, the Winograd build's kernel took Winograd and the direct one did not, and both builds
agree with the oracle. No timing assertions: these machines are shared and noisy."""
from __future__ import annotations

import importlib.util
import json
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_winograd.py"


def test_one_shape_writes_json(tmp_path):
    spec = importlib.util.spec_from_file_location("cpu_winograd_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "r.json"
    assert bench.main(["--shapes", "16x32", "--rounds", "1", "--iters", "1", "--max-chain", "2",
                       "--work", str(tmp_path / "w"), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    row = doc["shapes"]["16x32_b1"]
    assert row["chain"] == 2 and set(row["per_conv_ms"]) == {"winograd", "direct"}
    assert row["onednn_impls"]["winograd"] and all(i.startswith("winograd_4x3+") for i in row["onednn_impls"]["winograd"])
    assert not any(i.startswith("winograd_4x3+") for i in row["onednn_impls"]["direct"])
    assert row["max_rel_err_vs_oracle"]["winograd"] < 1e-4 and row["max_rel_err_vs_oracle"]["direct"] < 1e-5
    assert "flags" in doc["cpu"]
