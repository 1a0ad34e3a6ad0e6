#!/usr/bin/env python
"""What keeping ResNet-50's int8 block outputs uint8 buys: the same int8 model built twice in one
process, with and without it, timed interleaved (a pause before each turn), medians.

    python benchmarks/int8_block_outputs.py                  # ResNet-50 b1, 2 threads
    python benchmarks/int8_block_outputs.py --rounds 21

'new' is the build as compile_model makes it: each bottleneck's output stored uint8 by its conv3
(relu(conv + residual) as oneDNN post-ops, the residual added as uint8), read as uint8 by the next
block. 'old' turns that off for its build (quantize_int8's residual forms and the int8 ReLU
post-op), which is what the pass did before: block outputs in float32, the ReLU a second pass, each
next conv quantising its float32 input again. Same calibration feeds; writes
benchmarks/results/int8_block_outputs.json with the CPU's ISA flags.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path("build/bench_int8_blocks"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "int8_block_outputs.json")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)   # before anything loads OpenMP
    import numpy as np

    import aitgen as ag
    import cpu_vs_peers as peers
    from aitgen import models
    from aitgen.codegen.kernels.cpu import epilogue

    cfg = peers.CONFIGS["resnet50"]["full"]
    _, inputs, outputs = models.build("resnet50", **cfg)
    feeds = peers.make_feeds(inputs, cfg)
    calib = [peers.make_feeds(inputs, cfg, seed=s) for s in range(1, 5)]
    build = dict(target="cpu", precision="int8", calibration=calib)
    new = ag.compile_model(outputs, workdir=args.workdir / "new", **build)
    q = importlib.import_module("aitgen.passes.quantize_int8")
    saved = q._requantized_epilogue, q._residual_slot, epilogue.INT8_RELU
    try:   # the pass as it was: only an epilogue-free or ReLU result requantised, no residual read uint8
        q._requantized_epilogue = lambda ep, act: None if ep is None else (
            None if q._is_relu(ep) and act is q.DType.uint8 else False)
        q._residual_slot = lambda u, t: None
        epilogue.INT8_RELU = False
        old = ag.compile_model(outputs, workdir=args.workdir / "old", **build)
    finally:
        q._requantized_epilogue, q._residual_slot, epilogue.INT8_RELU = saved
    runners = {"new": lambda: new.run(feeds), "old": lambda: old.run(feeds)}
    for run in runners.values():
        for _ in range(3):
            run()
    ms = {k: [] for k in runners}
    for r in range(args.rounds):
        for k in list(runners)[::1 if r % 2 == 0 else -1]:
            time.sleep(args.pause)
            runners[k]()
            t = time.perf_counter()
            for _ in range(args.iters):
                runners[k]()
            ms[k].append((time.perf_counter() - t) * 1e3 / args.iters)
    med = {k: statistics.median(v) for k, v in ms.items()}
    a, b = new.run(feeds)["logits"], old.run(feeds)["logits"]
    out = {"model": "resnet50", "config": cfg, "threads": args.threads, "rounds": args.rounds, "iters": args.iters,
           "pause_s": args.pause, "cpu_isa": peers.cpu_isa(), "loadavg_1min": os.getloadavg()[0],
           "median_ms": med, "ratio_new_over_old": med["new"] / med["old"], "rounds_ms": ms,
           "max_abs_diff_new_vs_old": float(np.abs(a - b).max()), "max_abs_logits": float(np.abs(b).max())}
    new.close()
    old.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"median ms {({k: round(v, 2) for k, v in med.items()})}, new/old {out['ratio_new_over_old']:.3f}; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
