"""Build and run one batch of ONNX node cases on the CPU backend, in a process of its own.

    python tests/conformance/conf_worker.py BATCH.pkl RESULT.json WORKDIR

Every case of the batch is imported, its inputs and outputs renamed `c<k>_i<j>` / `c<k>_o<j>`, and
all of them are compiled into ONE model (kernels shared across cases). Each data set of each case
then runs through that model and is compared with the case's expected outputs. A build failure
of the batch is reported as {"batch_error": ...}; the driver splits the batch and tries again, so
one bad case costs a few extra builds, never the batch. The process boundary keeps a crash of a
kernel from taking the driver down.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
import time
import traceback
from typing import Optional

import numpy as np

try:
    from . import nodecases
except ImportError:  # run as a script
    _here = os.path.dirname(os.path.abspath(__file__))
    # The driver pickles cases as tests.conformance.nodecases.Case: make that path importable too.
    sys.path[:0] = [os.path.dirname(os.path.dirname(_here))]
    from tests.conformance import nodecases  # type: ignore[no-redef]


def _float_like(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" or a.dtype.kind == "V" or "float" in str(a.dtype) or "bfloat" in str(a.dtype)


def compare(got, want, rtol: float, atol: float) -> Optional[str]:
    """None when `got` matches the expected value, else why not (the onnx runner's rule: same
    dtype and shape, allclose for floats with NaN equal to NaN, exact for the rest)."""
    w = nodecases.to_array(want)
    if w is None:
        return f"expected value of type {type(want).__name__} (not a tensor)"
    g = np.asarray(got)
    if g.dtype != w.dtype:
        return f"dtype {g.dtype} != expected {w.dtype}"
    if g.shape != w.shape:
        return f"shape {list(g.shape)} != expected {list(w.shape)}"
    if _float_like(w):
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        bad = ~np.isclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            i = np.unravel_index(np.argmax(bad), bad.shape)
            return (f"{int(bad.sum())}/{bad.size} elements differ (rtol {rtol}, atol {atol}); first at "
                    f"{list(map(int, i))}: got {g64[i]!r}, expected {w64[i]!r}")
        return None
    if not np.array_equal(g, w):
        bad = g != w
        i = np.unravel_index(np.argmax(bad), bad.shape) if bad.ndim else ()
        return f"{int(np.sum(bad))}/{bad.size} elements differ; first at {list(map(int, i))}: got {g[i]!r}, expected {w[i]!r}"
    return None


def graph_input_names(case: "nodecases.Case") -> list[str]:
    """The model's graph inputs that are no initializers: what the case's data feeds, in order."""
    import onnx
    m = onnx.ModelProto()
    m.ParseFromString(case.model)
    inits = {i.name for i in m.graph.initializer}
    return [vi.name for vi in m.graph.input if vi.name not in inits]


def import_case(case: "nodecases.Case", frozen=()):
    """(inputs, outputs, feeds per data set) of the case. `frozen` names integer graph inputs
    (axes, shapes, pads fed as data) that are imported as constants holding the case's value."""
    from aitgen.frontend import onnx as ox
    names = graph_input_names(case)
    try:
        feeds = [feeds_for(names, ins) for ins, _ in case.data_sets]
    except ValueError:
        feeds = None  # load() says why first (a sequence input is an UnsupportedOpError there)
    consts = {n: feeds[0][n] for n in frozen} if feeds else {}
    inputs, outputs = ox.load(case.model, constant_inputs=consts or None)
    if feeds is None:
        feeds_for(names, case.data_sets[0][0])  # raises the ValueError
    return inputs, outputs, [{n: f[n] for n in inputs} for f in feeds]


def freezable(case: "nodecases.Case") -> list[str]:
    """Inputs of at most one dim whose value is the same in every data set: what a user would
    pin with load(constant_inputs=...) when an op needs it while compiling (axes, shapes, scales)."""
    names = graph_input_names(case)
    try:
        feeds = [feeds_for(names, ins) for ins, _ in case.data_sets]
    except ValueError:
        return []
    return [n for n in names if feeds[0][n].ndim <= 1
            and all(np.array_equal(f[n], feeds[0][n]) for f in feeds)]


def feeds_for(names: list, data_inputs: list) -> dict:
    """ONNX's backend runner feeds data by position over the graph inputs (initializers excluded)."""
    names = list(names)
    if len(data_inputs) != len(names):
        raise ValueError(f"the case gives {len(data_inputs)} inputs for graph inputs {names}")
    out = {}
    for n, v in zip(names, data_inputs):
        a = nodecases.to_array(v)
        if a is None:
            raise ValueError(f"input '{n}' is a {type(v).__name__}, not a tensor")
        out[n] = a
    return out


def run_batch(cases: list, workdir: str) -> dict:
    """Import every case, build them as one model, run each data set index once for all cases."""
    import aitgen as ag
    t0 = time.perf_counter()
    merged_out, live, results = {}, [], {}
    for k, (case, frozen) in enumerate(cases):
        try:
            inputs, outputs, feeds = import_case(case, frozen)
        except ValueError as e:
            results[case.name] = {"status": "fail", "reason": f"inputs: {e}"}
            continue
        names = {}
        for j, (n, t) in enumerate(inputs.items()):
            t.name = names[n] = f"c{k}_i{j}"
        onames = [f"c{k}_o{j}" for j in range(len(outputs))]
        if len(outputs) != len(case.data_sets[0][1]):
            results[case.name] = {"status": "fail", "reason": f"{len(outputs)} outputs, the case "
                                                              f"expects {len(case.data_sets[0][1])}"}
            continue
        merged_out.update(zip(onames, outputs.values()))
        live.append((case, [{names[n]: v for n, v in f.items()} for f in feeds], onames))
    if not live:
        return {"results": results, "build_seconds": 0.0, "seconds": time.perf_counter() - t0}
    model = ag.compile_model(merged_out, target="cpu", workdir=workdir)
    build_s = time.perf_counter() - t0
    # One run per data-set index feeds every case at once (a case with fewer data sets repeats
    # its last one and is not compared again).
    for d in range(max(len(c.data_sets) for c, _, _ in live)):
        feeds = {}
        for case, fs, _ in live:
            feeds.update(fs[min(d, len(fs) - 1)])
        # An input that no output reads is not an input of the built model.
        got = model.run({k: v for k, v in feeds.items() if k in model.input_specs})
        for case, fs, onames in live:
            if d >= len(fs) or results.get(case.name, {}).get("status") == "fail":
                continue
            rtol, atol = case.tolerances()
            for j, (o, w) in enumerate(zip(onames, case.data_sets[d][1])):
                why = compare(got[o], w, rtol, atol)
                if why:
                    results[case.name] = {"status": "fail", "reason": f"output {j} (data set {d}): {why}"}
                    break
    for case, _, _ in live:
        results.setdefault(case.name, {"status": "pass", "reason": ""})
    model.close()
    return {"results": results, "build_seconds": build_s, "seconds": time.perf_counter() - t0}


def main(argv: list[str]) -> int:
    batch_path, result_path, workdir = argv[1:4]
    with open(batch_path, "rb") as f:
        cases = pickle.load(f)
    try:
        res = run_batch(cases, workdir)
    except Exception as e:
        res = {"batch_error": f"{type(e).__name__}: {e}"[:4000], "traceback": traceback.format_exc()[-4000:]}
    with open(result_path, "w") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
