"""Compile a zoo model for the best target present (the CPU here), run it, and check it against
the numpy oracle.

    python examples/run_model.py bert_base            # batch 1, seq 128
    python examples/run_model.py resnet50 --batch 2

Prints the max error against the oracle, the latency (median of timed runs), the kernel count, and
the planned activation arena against the naive sum of intermediates.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import aitgen as ag


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
        else:  # token ids: inside the smallest vocabulary of the zoo
            feeds[name] = rng.integers(0, 100, shape).astype(t.dtype.np)
    return feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="bert_base", help=f"one of {ag.models.list_models()}")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--target", default="auto", help="cpu, cuda or auto (the best present)")
    ap.add_argument("--workdir", default=None, help="build folder (default: a temporary one)")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()

    inputs, outputs = ag.models.get(args.model, batch=args.batch)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix=f"aitgen_{args.model}_"))
    t0 = time.perf_counter()
    model = ag.compile_model(outputs, target=args.target, workdir=workdir, progress=True)
    build_s = time.perf_counter() - t0
    report = json.loads((workdir / "report.json").read_text())

    feeds = random_feeds(inputs, np.random.default_rng(0))
    got = model.run(feeds)
    ref = ag.reference.run(outputs, feeds)
    bench = model.benchmark(feeds, iters=args.iters)

    print(f"model {args.model} (batch {args.batch}) on {report['target']}: built in {build_s:.1f} s "
          f"({report['cache_hits']} cached / {report['cache_misses']} compiled) into {workdir}")
    print(f"ops {report['num_ops']} before passes; {report['num_kernels']} kernel launches per run, "
          f"{report['unique_kernels']} unique kernels")
    for name, arr in got.items():
        want = ref[name].astype(np.float64)
        err = float(np.max(np.abs(arr.astype(np.float64) - want)))
        rel = err / max(float(np.max(np.abs(want))), 1e-30)
        print(f"output {name}: shape {list(arr.shape)}, max |aitgen - oracle| = {err:.3g} ({rel:.2g} of max |oracle|)")
    print(f"latency: median {bench['median_ms']:.2f} ms over {bench['iters']} runs (min {bench['min_ms']:.2f} ms)")
    mb = 1 / (1 << 20)
    print(f"activations: arena {report['activation_bytes'] * mb:.2f} MiB, lower bound "
          f"{report['activation_lower_bound_bytes'] * mb:.2f} MiB, naive sum {report['activation_naive_bytes'] * mb:.2f} MiB; "
          f"constants {report['constant_bytes'] * mb:.1f} MiB")


if __name__ == "__main__":
    main()
