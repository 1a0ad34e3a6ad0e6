#!/usr/bin/env python
"""aitgen's CPU bfloat16 mode against torch's bf16 autocast and onnxruntime float32, in one process.

    python benchmarks/cpu_bf16.py                         # bert_base (seq 128, batch 1), resnet50 (batch 1)
    python benchmarks/cpu_bf16.py --small --rounds 2      # small configs: a smoke run
    python benchmarks/cpu_bf16.py --models bert_base --rounds 10

The issue's bar (14, item 3): compile_model(..., precision="bfloat16") is at least as accurate as
torch.autocast("cpu", dtype=torch.bfloat16) on the same weights and inputs, and (on a CPU with AMX)
>= 4x faster than onnxruntime float32. Accuracy: max abs difference of each output from the torch
float32 twin (aitgen/models/torch_refs.py), for aitgen bf16, torch autocast bf16 and aitgen float32
(the floor). Timing: medians of rounds that interleave aitgen bf16, aitgen fp32, onnxruntime fp32 and
torch autocast (benchmarks/cpu_vs_peers.py's interleave: same threads, rotating order, busy rounds
dropped). The JSON (benchmarks/results/cpu_bf16[_small].json) records the CPU (model name, the
avx512_bf16 / amx_bf16 / avx512_fp16 flags), oneDNN's implementation per kernel of the bf16 build
(report.json's onednn_impls: `brg:avx512_core_amx` on AMX, `brg:avx512_core_bf16` on AVX512-BF16),
and which precision each kernel of the bf16 build runs in (report.json's precision).
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
import cpu_vs_peers as peers  # noqa: E402  (make_feeds, nchw, runners, interleave: one definition)

TARGET_SPEEDUP = 4.0  # the goal on AMX: aitgen bf16 >= 4x faster than onnxruntime fp32


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["bert_base", "resnet50"], choices=sorted(peers.CONFIGS))
    ap.add_argument("--small", action="store_true", help="the zoo tests' small configurations")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=None, help="rounds in all, busy ones included (2x rounds)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--pause", type=float, default=0.5, help="sleep before each turn (cpu_vs_peers --pause)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--max-foreign", type=float, default=1.0,
                    help="drop rounds when other processes used more than this share of the cores (1: keep all)")
    ap.add_argument("--no-timing", action="store_true", help="errors only")
    ap.add_argument("--workdir", type=Path, default=Path("build/bench_bf16"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    args.max_rounds = args.max_rounds or 2 * args.rounds
    args.peers = ["onnxruntime", "torch"]  # for cpu_vs_peers.environment
    args.out = args.out or HERE / "results" / ("cpu_bf16_small.json" if args.small else "cpu_bf16.json")
    return args


cpu_isa = peers.cpu_isa  # one definition (the JSONs of every CPU benchmark carry it)


def max_abs(outs: dict, ref: dict) -> dict:
    import numpy as np
    return {k: float(np.max(np.abs(outs[k].astype(np.float64) - ref[k].astype(np.float64)))) for k in ref}


def bench_model(name: str, args) -> dict:
    import numpy as np
    import torch

    import aitgen as ag
    from aitgen.models import torch_refs

    zoo = peers.Zoo(name, args.small)
    cfg, module, inputs, outputs = zoo.cfg, zoo.module, zoo.inputs, zoo.outputs
    out_names, feeds = zoo.out_names, zoo.feeds
    peer_feeds = peers.nchw(feeds)
    torch.set_num_threads(args.threads)
    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
    targs = [torch.from_numpy(v) for v in peer_feeds.values()]

    def autocast():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = twin(*targs)
        out = out if isinstance(out, tuple) else (out,)
        return {k: o.float().numpy() for k, o in zip(out_names, out)}

    fp32_ref = peers.torch_runner(twin, peer_feeds, out_names)()
    work = args.workdir / ("small" if args.small else "full")
    built = {}
    for prec in ("bfloat16", None):
        wd = work / f"{name}_{prec or 'float32'}"
        built[prec or "float32"] = (ag.compile_model(outputs, target="cpu", workdir=wd, precision=prec),
                                    json.loads((wd / "report.json").read_text()))
    bf16, rep = built["bfloat16"]
    f32, _ = built["float32"]
    runners = {"aitgen_bf16": lambda: bf16.run(feeds), "aitgen_fp32": lambda: f32.run(feeds),
               "torch_autocast_bf16": autocast}
    path = work / f"{name}.onnx"
    peers.onnx_export(twin, peer_feeds, out_names, path)
    runners["onnxruntime_fp32"] = peers.ort_runner(path, peer_feeds, out_names, args.threads)

    errs = {k: max_abs(run(), fp32_ref) for k, run in runners.items()}
    worst = {k: max(v.values()) for k, v in errs.items()}
    entry = {"config": cfg,
             "max_abs_err_vs_torch_fp32": errs,
             "max_abs_torch_fp32": {k: float(np.max(np.abs(v))) for k, v in fp32_ref.items()},
             "accuracy_target": {"aitgen_bf16 <= torch_autocast_bf16": worst["aitgen_bf16"]
                                 <= worst["torch_autocast_bf16"]},
             "bf16_build": {k: rep.get(k) for k in ("num_kernels", "unique_kernels", "precision", "onednn_impls")}}
    if not args.no_timing:
        timed(entry, runners, args, "aitgen_bf16", "onnxruntime_fp32", TARGET_SPEEDUP)
    bf16.close()
    f32.close()
    return entry


def timed(entry: dict, runners: dict, args, ours: str, peer: str, target: float) -> None:
    """Interleaved rounds of `runners` into entry: medians, speed-ups over `peer`, and whether
    `ours` reaches `target` times the peer's speed (cpu_int8.py times through this too)."""
    samples, entry["rounds"] = peers.interleave(runners, args)
    med = {k: statistics.median(v) for k, v in samples.items()}
    entry["median_ms"] = med
    entry[f"speedup_vs_{peer}"] = {k: med[peer] / v for k, v in med.items()}
    entry["speed_target"] = {f"{ours} >= {target}x {peer}": entry[f"speedup_vs_{peer}"][ours] >= target}


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before anything loads OpenMP
    load0 = os.getloadavg()[0]
    return write_results(args, {name: bench_model(name, args) for name in args.models}, load0)


def write_results(args, results: dict, load0: float) -> int:
    """The JSON (environment with the CPU ISA, per-model results) at args.out, and a summary on
    stdout: errors against torch float32 and the medians (cpu_int8.py writes through this too)."""
    env = peers.environment(args, load0)
    env["cpu_isa"] = cpu_isa()
    doc = {"environment": env, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, e in results.items():
        errs = {k: round(max(v.values()), 4) for k, v in e["max_abs_err_vs_torch_fp32"].items()}
        print(name, "max abs err vs torch fp32:", errs)
        if "median_ms" in e:
            print(name, "median ms:", {k: round(v, 2) for k, v in e["median_ms"].items()})
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
