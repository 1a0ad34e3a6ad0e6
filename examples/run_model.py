"""Build a zoo model, run the pass pipeline, and evaluate it with the numpy oracle before and after.

    python examples/run_model.py bert_base            # full size: batch 1, seq 128
    python examples/run_model.py resnet50 --batch 2

Until a compiled backend lands this is the main job: it shows what the graph computes and that the
passes keep its meaning. Prints op counts, the outputs, the max difference, and timings.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import aitgen as ag
from aitgen.passes import run_pipeline


def random_feeds(inputs: dict, rng: np.random.Generator) -> dict:
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d.upper if not d.is_static else d.value for d in t.shape)
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(t.dtype.np)
        elif name == "attention_mask":
            feeds[name] = np.ones(shape, t.dtype.np)
        elif name == "token_type_ids":
            feeds[name] = np.zeros(shape, t.dtype.np)
        else:  # token ids: stay inside the smallest vocabulary of the zoo
            feeds[name] = rng.integers(0, 100, shape).astype(t.dtype.np)
    return feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="bert_base", help=f"one of {ag.models.list_models()}")
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()

    t0 = time.perf_counter()
    inputs, outputs = ag.models.get(args.model, batch=args.batch)
    graph = ag.Graph.from_outputs(outputs)
    before = graph.copy()
    t1 = time.perf_counter()
    graph = run_pipeline(graph, ag.CompileOptions(verify=True))
    t2 = time.perf_counter()
    feeds = random_feeds(inputs, np.random.default_rng(0))
    ref = ag.reference.run(before, feeds)
    t3 = time.perf_counter()
    got = ag.reference.run(graph, feeds)
    t4 = time.perf_counter()

    n_params = sum(int(c.value.size) for c in before.constants)
    print(f"model {args.model}: {len(before.ops)} ops before passes, {len(graph.ops)} after; "
          f"{n_params / 1e6:.1f} M constants; build {t1 - t0:.2f} s, passes {t2 - t1:.2f} s")
    for r in graph.annotations["pass_records"]:
        print(f"  {r.name:<18} {r.seconds * 1e3:8.1f} ms  -> {r.ops_after} ops")
    print("ops after passes: " + ", ".join(f"{k} {v}" for k, v in graph.op_counts().items()))
    for name, arr in got.items():
        diff = float(np.max(np.abs(arr.astype(np.float64) - ref[name].astype(np.float64))))
        print(f"output {name}: shape {list(arr.shape)} {arr.dtype}, mean {arr.mean():+.5f}, "
              f"std {arr.std():.5f}; max |after - before passes| = {diff:.3g}")
    print(f"oracle: {t3 - t2:.2f} s before passes, {t4 - t3:.2f} s after")


if __name__ == "__main__":
    main()
