"""benchmarks/patch_conv.py on its cheapest case, in this process (so it times this checkout's
aitgen), once on its own and once against a baseline folder (here its own builds): the JSON has
the documented structure, and the build is checked against the oracle. No timing assertions:
these machines are shared and noisy."""
from __future__ import annotations

import importlib.util
import json
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "patch_conv.py"


def _script():
    spec = importlib.util.spec_from_file_location("patch_conv_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_conv_case_writes_json_and_compares_with_a_baseline(tmp_path):
    bench = _script()
    work, out = tmp_path / "work", tmp_path / "r.json"
    assert bench.main(["--cases", "conv", "--rounds", "1", "--iters", "2", "--work", str(work), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    conv = doc["cases"]["conv"]["this"]
    assert conv["max_abs_err"] < 1e-4 and conv["num_kernels"] == 2  # the patch copy and the GEMM
    assert conv["kernel_report"]["reference_kernels"] == [] and len(conv["round_medians_ms"]) == 1
    assert set(doc["cpu"]["flags"]) == set(bench.FLAGS)
    out2 = tmp_path / "r2.json"
    assert bench.main(["--cases", "conv", "--rounds", "2", "--iters", "2", "--work", str(work), "--out", str(out2),
                       "--baseline", str(work)]) == 0
    doc = json.loads(out2.read_text())
    assert {"this", "baseline"} <= set(doc["cases"]["conv"])
    assert len(doc["cases"]["conv"]["baseline"]["round_medians_ms"]) == 2
