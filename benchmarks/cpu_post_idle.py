#!/usr/bin/env python
"""Latency call by call after an idle gap: aitgen's builds (float32, bfloat16, int8) and onnxruntime
float32, with a plain memory read beside them.

    python benchmarks/cpu_post_idle.py                        # resnet50, gaps 0 and 0.5 s
    python benchmarks/cpu_post_idle.py --models resnet50 bert_base --gaps 0 0.02 0.5 --reps 8
    python benchmarks/cpu_post_idle.py --small --reps 1 --calls 2   # a smoke run

Why: the interleaved benchmarks (cpu_vs_peers.py, cpu_bf16.py, cpu_int8.py) pause 0.5 s before each
framework's turn, then time a few calls, and their ratios moved by 5% from run to run. After a gap,
aitgen's calls were slow for several calls (ResNet-50 int8 6.7, 6.0, 5.6 ms against 4.4 steady) while
onnxruntime float32's were not. The `memory` row tells why: a single-threaded read of a --mem-mb
buffer after the same gap takes 2-2.5x its steady time for two passes (on the AMX Xeon these notes
were taken on), while compute alone (AVX-512 FMA, AMX) runs at full speed at once. A build whose
weights sit in the last-level cache between calls (ResNet-50 int8: 25 MB; bf16: 51 MB) pays that
warm-up; onnxruntime float32's 102 MB stream from memory on every call anyway.

For each gap and each runner: --reps times (sleep gap, then --calls timed calls), the median per call
position. Writes JSON (benchmarks/results/cpu_post_idle.json) with the CPU's ISA.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cpu_vs_peers as peers  # noqa: E402  (CONFIGS, make_feeds, nchw, runners, environment)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["resnet50"], choices=sorted(peers.CONFIGS))
    ap.add_argument("--small", action="store_true", help="the zoo tests' small configurations (a smoke run)")
    ap.add_argument("--precisions", nargs="+", default=["float32", "bfloat16", "int8"],
                    choices=["float32", "bfloat16", "int8"])
    ap.add_argument("--gaps", nargs="+", type=float, default=[0.0, 0.5], help="idle seconds before each series")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--calls", type=int, default=6, help="timed calls after each gap")
    ap.add_argument("--mem-mb", type=int, default=32, help="the plain read's buffer")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--workdir", type=Path, default=Path("build/bench_post_idle"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "cpu_post_idle.json")
    args = ap.parse_args(argv)
    # for cpu_vs_peers.environment
    args.rounds, args.iters, args.warmup, args.pause = args.reps, args.calls, 20, None
    args.peers = ["onnxruntime"]
    return args


def series(run, args) -> dict:
    """{gap: median ms per call position}."""
    for _ in range(20):
        run()
    out = {}
    for gap in args.gaps:
        rows = []
        for _ in range(args.reps):
            time.sleep(gap)
            row = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                run()
                row.append((time.perf_counter() - t0) * 1e3)
            rows.append(row)
        out[str(gap)] = [round(statistics.median(r[i] for r in rows), 3) for i in range(args.calls)]
    return out


def bench_model(name: str, args) -> dict:
    import torch

    import aitgen as ag
    from aitgen.models import torch_refs

    zoo = peers.Zoo(name, args.small)
    cfg, module, inputs, outputs = zoo.cfg, zoo.module, zoo.inputs, zoo.outputs
    out_names, feeds = zoo.out_names, zoo.feeds
    work = args.workdir / name
    work.mkdir(parents=True, exist_ok=True)
    runners = {}
    for prec in args.precisions:
        extra = {}
        if prec == "int8":
            extra = {"calibration": [peers.make_feeds(inputs, cfg, seed=s) for s in range(1, 5)]}
        model = ag.compile_model(outputs, target="cpu", workdir=work / prec,
                                 precision=None if prec == "float32" else prec, **extra)
        runners[f"aitgen_{prec}"] = (lambda m=model: m.run(feeds))
    torch.set_num_threads(args.threads)
    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
    path = work / f"{name}.onnx"
    peers.onnx_export(twin, peers.nchw(feeds), out_names, path)
    runners["onnxruntime_fp32"] = peers.ort_runner(path, peers.nchw(feeds), out_names, args.threads)
    result = {k: series(run, args) for k, run in runners.items()}
    for k, per_gap in result.items():
        print(name, k, per_gap, flush=True)
    return result


def memory_series(args) -> dict:
    import numpy as np

    buf = np.ones(args.mem_mb << 18, dtype=np.float32)  # mem_mb MiB
    return series(lambda: float(buf.sum()), args)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before anything loads OpenMP
    load0 = os.getloadavg()[0]
    results = {"memory_read": memory_series(args)}
    print("memory read", results["memory_read"], flush=True)
    for name in args.models:
        results[name] = bench_model(name, args)
    doc = {"environment": peers.environment(args, load0), "gaps_s": args.gaps, "calls": args.calls,
           "reps": args.reps, "mem_mb": args.mem_mb, "median_ms_per_call_position": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
