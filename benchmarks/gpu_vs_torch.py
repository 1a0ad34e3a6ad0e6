#!/usr/bin/env python
"""aitgen on the GPU against torch eager and torch.compile: one process, same weights, same inputs.

    python benchmarks/gpu_vs_torch.py                                  # bert_base (s128, b1), resnet50 (b1), float16
    python benchmarks/gpu_vs_torch.py --models bert_base --precision bfloat16 --rounds 10
    python benchmarks/gpu_vs_torch.py --small --rounds 2 --no-compile  # small configs: a smoke run

Each zoo model is built once with aitgen's nn (seeded weights) and compiled for the present GPU's arch
(sm_90a on an H100/H200) with compile_model(precision=...); its torch twin (aitgen/models/torch_refs.py)
gets the same weights, cast to the same dtype, on the same GPU; torch.compile wraps that twin
(default mode). Inputs are torch CUDA tensors, which aitgen reads in place (DLPack), so every
framework is timed on device-resident data. aitgen is timed twice: plain runs and CUDA-graph
replay (Model.load(cuda_graph=True)).

Before timing, aitgen's outputs are compared with torch eager's (max |diff| relative to the largest
|value| of the output), and reported. Timing: after a warm-up, rounds interleave the frameworks (the
order rotates each round); a turn is --iters back-to-back calls, each ended by a device
synchronisation (aitgen's run returns with its stream idle; torch's are followed by
torch.cuda.synchronize()), timed with the wall clock; the round's number is the mean per call. The
report gives the median over rounds, and the ratios aitgen / torch.compile and aitgen / eager.

Results: a table on stdout and JSON (--out, default benchmarks/results/gpu_vs_torch.json).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CONFIGS = {
    "bert_base": {"full": dict(batch=1, seq=128),
                  "small": dict(batch=1, seq=16, layers=2, hidden=64, heads=2, intermediate=128, vocab=100,
                                max_position=32)},
    "resnet50": {"full": dict(batch=1),
                 "small": dict(batch=1, layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10)},
    "vit_b16": {"full": dict(batch=1),
                "small": dict(batch=1, image_size=32, patch=8, layers=2, hidden=64, heads=2, mlp=128, num_classes=10)},
    "gpt2": {"full": dict(batch=1, seq=128),
             "small": dict(batch=1, seq=16, layers=2, hidden=64, heads=2, vocab=100, max_position=32)},
    "mobilenet_v2": {"full": dict(batch=1), "small": dict(batch=1, width=0.25, image_size=32, num_classes=10)},
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["bert_base", "resnet50"], choices=sorted(CONFIGS))
    ap.add_argument("--precision", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--arch", default=None, help="default: the present GPU's (sm_90a on Hopper)")
    ap.add_argument("--small", action="store_true", help="the tests' small configs")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (it takes a minute per model)")
    ap.add_argument("--workdir", default="/tmp/aitgen_gpu_bench")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_vs_torch.json"))
    return ap.parse_args(argv)


def device_feeds(inputs, rng, torch):
    """Random inputs at the (static) shapes, as numpy (for aitgen's checks) and CUDA tensors."""
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d.value for d in t.shape)
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
        elif name == "attention_mask":
            feeds[name] = np.ones(shape, np.int64)
        elif name == "token_type_ids":
            feeds[name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
            feeds[name] = rng.integers(0, 100, shape).astype(np.int64)
    return {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}


def timed(fn, iters: int, sync) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
        sync()
    return (time.perf_counter() - t0) / iters * 1e3


def bench_model(name: str, args, torch) -> dict:
    import aitgen as ag
    from aitgen import models
    from aitgen.models import torch_refs

    cfg = CONFIGS[name]["small" if args.small else "full"]
    module, inputs, outputs = models.build(name, **cfg)
    entry: dict = {"config": {k: str(v) for k, v in cfg.items()}, "precision": args.precision, "errors": {}}
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[args.precision]
    dev = device_feeds(inputs, np.random.default_rng(0), torch)
    runners = {}

    t0 = time.perf_counter()
    work = ag.compile_model(outputs, target="cuda", arch=args.arch, workdir=Path(args.workdir) / name,
                            precision=args.precision, load=False)
    entry["aitgen_build_seconds"] = round(time.perf_counter() - t0, 2)
    report = json.loads((work / "report.json").read_text())
    entry["aitgen_build"] = {k: report[k] for k in ("num_kernels", "unique_kernels", "activation_bytes",
                                                     "cache_hits", "cache_misses")}
    entry["arch"] = json.loads((work / "model.json").read_text())["arch"]
    plain, graphed = ag.Model.load(work), ag.Model.load(work, cuda_graph=True)
    out_names = list(outputs)
    runners["aitgen"] = lambda: plain.run(dev)
    runners["aitgen_cuda_graph"] = lambda: graphed.run(dev)

    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32).to(device="cuda", dtype=tdt).eval()
    # the twins take images NCHW and float inputs in their own dtype
    targs = [v.permute(0, 3, 1, 2).contiguous().to(tdt) if v.ndim == 4 else v for v in dev.values()]

    def eager():
        with torch.inference_mode():
            return twin(*targs)
    runners["torch_eager"] = eager
    if not args.no_compile:
        try:
            compiled = torch.compile(twin)
            t0 = time.perf_counter()
            with torch.inference_mode():
                compiled(*targs)
            torch.cuda.synchronize()
            entry["torch_compile_seconds"] = round(time.perf_counter() - t0, 2)

            def comp():
                with torch.inference_mode():
                    return compiled(*targs)
            runners["torch_compile"] = comp
        except Exception as e:  # noqa: BLE001 - recorded, the others are still timed
            entry["errors"]["torch_compile"] = f"{type(e).__name__}: {e}"[:500]

    # numerics: aitgen against torch eager, same dtype
    ref = eager()
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = plain.run(dev)
    entry["max_rel_diff_vs_torch"] = {}
    for k, r in zip(out_names, ref):
        r = r.float().cpu().numpy()
        g = got[k].float().cpu().numpy()
        entry["max_rel_diff_vs_torch"][k] = float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), 1e-6))

    sync = torch.cuda.synchronize
    for fn in runners.values():
        for _ in range(args.warmup):
            fn()
        sync()
    samples = {k: [] for k in runners}
    order = list(runners)
    for r in range(args.rounds):
        for k in order[r % len(order):] + order[:r % len(order)]:
            samples[k].append(timed(runners[k], args.iters, sync))
    entry["median_ms"] = {k: round(statistics.median(v), 4) for k, v in samples.items()}
    entry["rounds_ms"] = {k: [round(x, 4) for x in v] for k, v in samples.items()}
    med = entry["median_ms"]
    best = min(med["aitgen"], med["aitgen_cuda_graph"])
    entry["speedup"] = {f"vs_{k}": round(med[k] / best, 3) for k in ("torch_eager", "torch_compile") if k in med}
    try:   # where aitgen's device time goes: its kernels by total time (torch.profiler sees them)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                graphed.run(dev)
            sync()
        per: dict = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name[:100]] = per.get(e.name[:100], 0.0) + (e.time_range.end - e.time_range.start) / 5e3
        entry["aitgen_device_ms"] = round(sum(per.values()), 4)
        entry["aitgen_top_kernels_ms"] = dict(sorted(((k, round(v, 4)) for k, v in per.items()),
                                                     key=lambda kv: -kv[1])[:12])
    except Exception as e:  # noqa: BLE001 - no CUPTI: the timings above stand alone
        entry["errors"]["profile"] = f"{type(e).__name__}: {e}"[:300]
    plain.close()
    graphed.close()
    return entry


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_vs_torch: no CUDA device", file=sys.stderr)
        return 2
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "models": {}}
    status = 0
    for name in args.models:
        try:
            result["models"][name] = bench_model(name, args, torch)
        except Exception as e:  # noqa: BLE001 - one model failing must not lose the others' numbers
            traceback.print_exc()
            result["models"][name] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            status = 1
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))   # after each model: a timeout keeps the rest
    print(f"{'model':<14} {'aitgen':>9} {'+graph':>9} {'eager':>9} {'compile':>9}  (median ms)")
    for name, e in result["models"].items():
        m = e.get("median_ms", {})
        cells = [f"{m[k]:9.3f}" if k in m else f"{'-':>9}" for k in ("aitgen", "aitgen_cuda_graph", "torch_eager",
                                                                     "torch_compile")]
        print(f"{name:<14} {' '.join(cells)}  {e.get('speedup', e.get('error', ''))}")
    print(f"wrote {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
