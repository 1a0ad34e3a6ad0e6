#!/usr/bin/env python
"""Two builds of one model, old against new, timed in turns in one process: medians and new/old.

    python benchmarks/ab_workdirs.py build/old build/new --rounds 21 --iters 200 --out ab.json

Build the same model into two workdirs from two versions of the code (e.g. `git stash`, build, `git
stash pop`, build; the build cache keys on the sources, so both stay cached). Both get the same
random inputs (seed 0) at their largest shapes, and their outputs are compared first (max abs
difference per output). Each round runs --warmup untimed calls and --iters timed calls of one, then
of the other; the order alternates between rounds, so drift in the machine's speed hits both alike.
A model much larger than the cache is slower here than alone (both builds' weights compete for it):
compare such models with cpu_vs_peers.py runs instead.

--env-old KEY=VALUE (repeatable) sets an environment variable for the old build's first run only,
where a kernel reads a run-time switch as it creates its primitives (AITGEN_PACKED_SGEMM=0 keeps the
oneDNN matmul primitive): then OLD and NEW may be two copies of one build (`cp -r`; one directory
loaded twice would share one library and its switches).

--zoo NAME feeds the zoo model's benchmark inputs (cpu_vs_peers.make_feeds at its full config: token
ids in range for BERT and GPT-2) instead of random ones.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu_vs_peers import CONFIGS, Zoo, cpu_isa  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    ap.add_argument("--zoo", default=None, choices=sorted(CONFIGS),
                    help="the builds are this zoo model: feed its benchmark inputs")
    ap.add_argument("--env-old", action="append", default=[], metavar="KEY=VALUE",
                    help="set for the old build's first run (when its kernels read their switches)")
    args = ap.parse_args(argv)
    env_old = dict(kv.split("=", 1) for kv in args.env_old)

    import numpy as np

    from aitgen.debug import random_inputs
    from aitgen.runtime.model import Model

    models = {"old": Model.load(args.old), "new": Model.load(args.new)}
    if args.zoo:
        feeds = Zoo(args.zoo, small=False).feeds
    else:
        feeds = random_inputs(models["old"].input_specs)
    first = {}
    for k, m in models.items():
        saved = {key: os.environ.get(key) for key in env_old}
        if k == "old":
            os.environ.update(env_old)
        try:
            first[k] = m.run(feeds)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    diff = {name: float(np.max(np.abs(first["old"][name].astype(np.float64) - first["new"][name].astype(np.float64))))
            for name in first["old"]}
    times = {"old": [], "new": []}
    for r in range(args.rounds):
        for k in (("old", "new") if r % 2 == 0 else ("new", "old")):
            m = models[k]
            for _ in range(args.warmup):
                m.run(feeds)
            t0 = time.perf_counter()
            for _ in range(args.iters):
                m.run(feeds)
            times[k].append((time.perf_counter() - t0) * 1e3 / args.iters)
    med = {k: statistics.median(v) for k, v in times.items()}
    per_round = statistics.median(n / o for o, n in zip(times["old"], times["new"]))
    result = {"benchmark": "ab_workdirs", "old": str(args.old), "new": str(args.new), "rounds": args.rounds, "env_old": env_old,
              "iters": args.iters, "threads": os.environ.get("OMP_NUM_THREADS"), "cpu_isa": cpu_isa(),
              "max_abs_diff": diff, "median_ms": med, "new_over_old": med["new"] / med["old"],
              "per_round_ratio_median": per_round, "rounds_ms": times}
    print(f"max abs diff new vs old: {diff}")
    print(f"old {med['old']:.3f} ms, new {med['new']:.3f} ms, new/old {med['new'] / med['old']:.3f} "
          f"(median of per-round ratios {per_round:.3f}, {args.rounds} rounds x {args.iters} runs)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    for m in models.values():
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
