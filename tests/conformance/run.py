"""ONNX node-test conformance: every case through import -> CPU build -> run, beside onnxruntime.

    python -m tests.conformance.run                # all 1,884 cases; writes tests/conformance/results/
    python -m tests.conformance.run --ops Conv,Gemm --out /tmp/conf   # some op types only
    python -m tests.conformance.run --subset       # the default-tier subset (see SUBSET_PER_OP)

Per case: `load()` it, its integer inputs fed as data (`--freeze` pins those a converter needs
at import time, off by default); UnsupportedOpError -> "unsupported" (its message recorded), any other
error -> "fail". Imported cases also run through the numpy oracle (column `oracle`, a
diagnostic), then are built in batches, one CPU model per batch (conf_worker.py, a subprocess
each); a batch that fails to build or crashes is split in halves until the culprit is alone.
onnxruntime runs every case the same way (ort_runner.py). Tolerances: the case's own, else rtol
1e-3 / atol 1e-5; integers and bools exactly.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

try:
    from . import nodecases, ort_runner
    from .conf_worker import compare, freezable, import_case as load_case
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nodecases  # type: ignore[no-redef]
    import ort_runner  # type: ignore[no-redef]
    from conf_worker import compare, freezable, import_case as load_case  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BATCH = 96             # cases per CPU build
SUBSET_PER_OP = 1      # the default tier: this many imported cases per op type
WORKER_TIMEOUT = 1200  # seconds for one batch build + run


_NEEDS_CONST = re.compile(r"\(\w+, '([^']+)'\) must be known at import time")


def import_case(case, freeze: bool = False) -> dict:
    """Import one case in-process and check it with the oracle: the record before any build.

    Integer inputs (shapes, axes, K, pads) are fed as run-time data, as onnxruntime takes them.
    `freeze` (off unless asked: `--freeze`) pins an input that a converter needs while importing
    to the case's value, as a user may with load(constant_inputs=...); such records say which."""
    import aitgen as ag
    from aitgen.errors import AitgenError, UnsupportedOpError
    from aitgen.ir.graph import topo_order
    rec = {"name": case.name, "op": case.op, "opset": case.opset}
    frozen: list = []
    try:
        while True:
            try:
                inputs, outputs, feeds = load_case(case, frozen)
                break
            except UnsupportedOpError as e:
                # An op that needs a value while compiling (axes, a shape, scales) fed as data: pin
                # that input to the case's value, as a user would with load(constant_inputs=...).
                m = _NEEDS_CONST.search(str(e))
                name = m.group(1) if m and freeze else None
                if name is None or name in frozen or name not in freezable(case):
                    raise
                frozen.append(name)
        if frozen:
            rec["frozen_inputs"] = frozen
    except UnsupportedOpError as e:
        return {**rec, "status": "unsupported", "reason": str(e)}
    except ValueError as e:
        return {**rec, "status": "unsupported", "reason": f"inputs: {e}"}
    except AitgenError as e:
        return {**rec, "status": "fail", "reason": f"import: {type(e).__name__}: {e}"}
    except Exception as e:  # a crash of the importer: test_fuzz makes sure there are none
        return {**rec, "status": "fail", "reason": f"import crashed: {type(e).__name__}: {e}"}
    rec["status"] = "pending"
    rec["_frozen"] = frozen
    rec["dynamic"] = any(not d.is_static for t in inputs.values() for d in t.shape)
    # Inputs that no output reads (an output known at import time) are not fed.
    live = {t.name for t in topo_order(list(outputs.values()))[1] if t.is_input}
    try:
        rtol, atol = case.tolerances()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            for d, (ins, outs) in enumerate(case.data_sets):
                got = ag.reference.run(outputs, {k: v for k, v in feeds[d].items() if k in live})
                if len(got) != len(outs):
                    raise ValueError(f"{len(got)} outputs, the case expects {len(outs)}")
                for j, (g, w) in enumerate(zip(got.values(), outs)):
                    why = compare(g, w, rtol, atol)
                    if why:
                        raise ValueError(f"output {j} (data set {d}): {why}")
        rec["oracle"] = "pass"
    except Exception as e:
        rec["oracle"] = f"fail: {type(e).__name__}: {e}"[:500]
    return rec


def _spawn(cases: list, root: Path, tag: str) -> dict:
    """One conf_worker process over `cases`; {"results": ...} or {"batch_error": ...}."""
    bpath, rpath, work = root / f"{tag}.pkl", root / f"{tag}.json", root / f"w_{tag}"
    with open(bpath, "wb") as f:
        pickle.dump(cases, f)
    cmd = [sys.executable, str(HERE / "conf_worker.py"), str(bpath), str(rpath), str(work)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"batch_error": f"timed out after {WORKER_TIMEOUT} s"}
    if not rpath.exists():
        return {"batch_error": f"worker died (exit {p.returncode}): {p.stderr[-1500:]}"}
    return json.loads(rpath.read_text())


def build_and_run(cases: list, root: Path, log=print) -> dict[str, dict]:
    """name -> {"status", "reason"} for cases that imported, in as few builds as possible."""
    out: dict[str, dict] = {}
    # A case with dynamic dims gets a build of its own: IntVars of different cases may share a name.
    queue = [[c] for c in cases if c.dynamic] + [
        b for b in (lambda s: [s[i:i + BATCH] for i in range(0, len(s), BATCH)])([c for c in cases if not c.dynamic])]
    n = 0
    while queue:
        batch = queue.pop(0)
        n += 1
        t0 = time.perf_counter()
        res = _spawn([(c.case, c.frozen) for c in batch], root, f"b{n}")
        if "results" in res:
            out.update(res["results"])
            log(f"  build {n}: {len(batch)} cases, {time.perf_counter() - t0:.1f} s "
                f"(build {res.get('build_seconds', 0):.1f} s)")
            continue
        err = res["batch_error"]
        if len(batch) == 1:
            out[batch[0].case.name] = {"status": "fail", "reason": f"build/run: {err}"[:1500]}
            continue
        log(f"  build {n}: {len(batch)} cases failed ({err.splitlines()[0][:160]}); splitting")
        half = len(batch) // 2
        queue[:0] = [batch[:half], batch[half:]]
    return out


class _Pending:
    def __init__(self, case, dynamic: bool, frozen: list):
        self.case, self.dynamic, self.frozen = case, dynamic, frozen


def subset(cases: list, records: dict, per_op: int = SUBSET_PER_OP) -> list:
    """Up to `per_op` imported cases of each op type, plus every unsupported/failed-import case
    (those cost no build): the default tier's representative sample."""
    seen: collections.Counter = collections.Counter()
    keep = []
    for c in cases:
        r = records[c.name]
        if r["status"] != "pending":
            keep.append(c)
        elif seen[c.op] < per_op:
            seen[c.op] += 1
            keep.append(c)
    return keep


def run(ops=None, use_subset: bool = False, with_ort: bool = True, log=print, freeze: bool = False) -> dict:
    t0 = time.perf_counter()
    cases = nodecases.collect()
    if ops:
        cases = [c for c in cases if c.op in ops]
    records = {c.name: import_case(c, freeze) for c in cases}
    built = subset(cases, records) if use_subset else cases
    chosen = {c.name for c in built}
    for c in cases:  # imported and checked by the oracle, not built
        if c.name not in chosen and records[c.name]["status"] == "pending":
            records[c.name]["status"] = "not_built"
    t_import = time.perf_counter() - t0
    pending = [_Pending(c, records[c.name]["dynamic"], records[c.name]["_frozen"])
               for c in built if records[c.name]["status"] == "pending"]
    log(f"{len(cases)} cases, {len(pending)} imported ({t_import:.1f} s); building")
    with tempfile.TemporaryDirectory(prefix="aitgen_conf_") as tmp:
        outcome = build_and_run(pending, Path(tmp), log)
    t_build = time.perf_counter() - t0 - t_import
    for name, r in outcome.items():
        records[name].update(r)
    if with_ort:
        for c in built:
            s, why = ort_runner.run_case(c)
            records[c.name]["ort"] = s
            if why:
                records[c.name]["ort_reason"] = why
    for r in records.values():
        r.pop("dynamic", None)
        r.pop("_frozen", None)
    return {"records": records, "summary": summarize(records, with_ort),
            "seconds": {"import_and_oracle": round(t_import, 1), "builds_and_runs": round(t_build, 1),
                        "total": round(time.perf_counter() - t0, 1)}}


def summarize(records: dict, with_ort: bool = True) -> dict:
    from aitgen.frontend import onnx as ox
    recs = list(records.values())
    covered = [r for r in recs if r["status"] != "unsupported"]
    s = {
        "cases": len(recs),
        "converter_op_types": len(ox.supported_ops()),
        "covered_cases": len(covered),
        "passed": sum(r["status"] == "pass" for r in recs),
        "failed": sum(r["status"] == "fail" for r in recs),
        "unsupported": sum(r["status"] == "unsupported" for r in recs),
        "not_built": sum(r["status"] == "not_built" for r in recs),
        "oracle_passed": sum(r.get("oracle") == "pass" for r in recs),
        "covered_with_frozen_inputs": sum("frozen_inputs" in r for r in covered),
        "op_types_with_a_case": len({r["op"] for r in recs}),
        "op_types_covered": len({r["op"] for r in covered}),
        "op_types_passing": len({r["op"] for r in recs if r["status"] == "pass"}),
    }
    if with_ort:
        s["ort_passed_all_cases"] = sum(r.get("ort") == "pass" for r in recs)
        s["ort_passed_covered_cases"] = sum(r.get("ort") == "pass" for r in covered)
    return s


def write(result: dict, out: Path = RESULTS) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "conformance.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (out / "conformance.md").write_text(markdown(result))


def markdown(result: dict) -> str:
    s, recs = result["summary"], list(result["records"].values())
    ort = "ort_passed_covered_cases" in s
    lines = ["# ONNX node-test conformance (CPU backend)", "",
             "Regenerate: `python -m tests.conformance.run` (cases from onnx "
             "`collect_testcases()`; rtol 1e-3, atol 1e-5 unless a case sets its own).", "",
             f"- cases: {s['cases']}; covered (imported, not refused as unsupported): {s['covered_cases']}",
             f"- aitgen passes {s['passed']} of the {s['covered_cases']} covered cases"
             + (f"; onnxruntime passes {s['ort_passed_covered_cases']} of the same cases "
                f"({s['ort_passed_all_cases']} of all {s['cases']})" if ort else ""),
             f"- covered cases that pin integer inputs fed as data (axes, shapes) with "
             f"`load(constant_inputs=...)`: {s['covered_with_frozen_inputs']}",
             f"- op types: {s['op_types_covered']} covered, {s['op_types_passing']} with a passing case; "
             f"{s['converter_op_types']} op types have a converter", "",
             "| op type | cases | pass | fail | unsupported |" + (" ORT pass (covered) |" if ort else ""),
             "|---|---|---|---|---|" + ("---|" if ort else "")]
    by_op = collections.defaultdict(list)
    for r in recs:
        by_op[r["op"]].append(r)
    for op in sorted(by_op):
        rs = by_op[op]
        cnt = collections.Counter(r["status"] for r in rs)
        row = f"| {op} | {len(rs)} | {cnt['pass']} | {cnt['fail']} | {cnt['unsupported']} |"
        if ort:
            cov = [r for r in rs if r["status"] != "unsupported"]
            row += f" {sum(r.get('ort') == 'pass' for r in cov)}/{len(cov)} |"
        lines.append(row)
    fails = [r for r in recs if r["status"] == "fail"]
    if fails:
        lines += ["", "## Failures", ""]
        lines += [f"- `{r['name']}` ({r['op']}): {r['reason'][:300]}" for r in sorted(fails, key=lambda r: r["name"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated op types (default: all)")
    ap.add_argument("--subset", action="store_true", help=f"{SUBSET_PER_OP} imported cases per op type")
    ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--freeze", action="store_true",
                    help="pin integer inputs that a converter needs at import time (load(constant_inputs=...))")
    a = ap.parse_args(argv)
    res = run(ops=set(a.ops.split(",")) if a.ops else None, use_subset=a.subset, with_ort=not a.no_ort, freeze=a.freeze)
    write(res, a.out)
    print(json.dumps(res["summary"], indent=1), json.dumps(res["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
