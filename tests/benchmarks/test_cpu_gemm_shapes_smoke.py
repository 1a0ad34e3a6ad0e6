"""benchmarks/cpu_gemm_shapes.py on one small shape: a float32 and an int8 build of one linear layer,
their errors against the float32 oracle (float32 within 1e-5 of max |y|; int8 within 0.1, the
quantisation's), a positive rate per build and the CPU's ISA in the JSON. No timing assertions:
these machines are shared."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_gemm_shapes.py"


def test_small_shape_both_precisions(tmp_path):
    out = tmp_path / "shapes.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--shapes", "8x32x24", "--rounds", "1", "--iters", "2",
                           "--work", str(tmp_path / "work"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    rows = {row["precision"]: row for row in r["rows"]}
    assert set(rows) == {"float32", "int8"}
    assert rows["float32"]["rel_err"] <= 1e-5
    assert 0.0 < rows["int8"]["rel_err"] <= 0.1   # quantised: close, never exact
    for row in rows.values():
        assert (row["m"], row["k"], row["n"]) == (8, 32, 24) and row["median_ms"] > 0 and row["rate"] > 0
        assert row["impls"], row   # a oneDNN kernel, named
    assert "flags" in r["cpu_isa"]
