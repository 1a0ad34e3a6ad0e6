"""The ONNX node-test conformance run as a test: nothing silently skipped, no new failures.

Default tier: every case is imported (unsupported ones must carry the UnsupportedOpError message)
and every imported case is checked through the numpy oracle; SUBSET_PER_OP imported cases per op
type are also built and run on the CPU. Slow tier: all cases,
with onnxruntime beside them. Both require that every case passes, fails with a reason recorded
in known_failures.json, or is unsupported with a message; the slow tier also checks the pass
floor and that our pass rate on the covered cases is at least onnxruntime's on the same cases.
Regenerate the recorded table with `python -m tests.conformance.run`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the harness is the package tests.conformance
from tests.conformance import run as conformance  # noqa: E402
KNOWN = json.loads((HERE / "known_failures.json").read_text())
RECORDED = json.loads((HERE / "results" / "conformance.json").read_text())
# Passing cases of the full run, recorded when known_failures.json was last reviewed.
PASS_FLOOR = KNOWN["pass_floor"]


def _check_every_case(result: dict) -> None:
    recs = result["records"]
    bad = []
    for name, r in recs.items():
        st = r["status"]
        if st == "unsupported":
            if not r.get("reason"):
                bad.append(f"{name}: unsupported without the UnsupportedOpError message")
        elif st == "fail":
            if name not in KNOWN["cases"]:
                bad.append(f"{name}: new failure: {r.get('reason', '')[:300]}")
        elif st == "not_built":  # the default tier builds a subset; the rest is checked by the oracle
            # (16-bit cases where the oracle's per-op rounding misses a tolerance the CPU build
            # meets are recorded with that oracle result; anything else is new)
            was = RECORDED["records"].get(name, {}).get("oracle")
            if r.get("oracle") != "pass" and name not in KNOWN["cases"] and r.get("oracle") != was:
                bad.append(f"{name}: the oracle disagrees: {r.get('oracle', '')[:300]}")
        elif st != "pass":
            bad.append(f"{name}: status {st!r} (neither pass, fail nor unsupported)")
    assert not bad, "\n".join(bad)


def test_conformance_subset():
    result = conformance.run(use_subset=True, with_ort=False, log=lambda *a: None)
    _check_every_case(result)
    s = result["summary"]
    assert s["cases"] == RECORDED["summary"]["cases"], "every generated case is accounted for"
    # No case that passes in the recorded full run may fail here.
    # (A case recorded as passing only with its inputs frozen, which the harness no longer does,
    # is compared once the table is regenerated: its record says which inputs were frozen.)
    regressed = [n for n, r in result["records"].items()
                 if r["status"] in ("fail", "unsupported") and RECORDED["records"].get(n, {}).get("status") == "pass"
                 and not RECORDED["records"][n].get("frozen_inputs")]
    assert not regressed, f"passed in the recorded run, not now: {regressed}"
    built = s["covered_cases"] - s["not_built"]
    assert built >= s["op_types_covered"] and s["passed"] >= built - len(KNOWN["cases"])


@pytest.mark.slow
def test_conformance_full_beside_onnxruntime():
    result = conformance.run(use_subset=False, with_ort=True, log=lambda *a: None)
    _check_every_case(result)
    s = result["summary"]
    assert s["passed"] >= PASS_FLOOR, (s["passed"], PASS_FLOOR)
    assert s["op_types_passing"] >= 100
    # Our pass rate on the cases we cover is at least onnxruntime's on the same cases.
    assert s["passed"] >= s["ort_passed_covered_cases"], s
