#!/usr/bin/env python
"""How close the five CPU benchmark models run to this machine's float32 multiply-add peak, and
what fraction of that peak aitgen would need to reach 0.8x onnxruntime's latency (issue 14's goal).

    python benchmarks/cpu_roofline.py                       # peak GEMMs, then the five full-size models
    python benchmarks/cpu_roofline.py --peers-json benchmarks/results/cpu_vs_peers.json --rounds 30
    python benchmarks/cpu_roofline.py --small               # small GEMMs and configs: a smoke run

(a) Peak. aitgen compiles (target cpu) one large GEMM per --shapes entry, the way the models use
them: a linear layer whose constant weight oneDNN prepacks; numpy (its BLAS) and torch.matmul run
the same product as cross-checks. Every engine gets --threads threads (OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS set here before anything loads them, torch.set_num_threads), a pause before
its turn (the previous engine's spinning threads go to sleep, as in cpu_vs_peers.py), warm-up
calls, then --rounds timed calls. GFLOP/s = 2*M*N*K / time. The machine's peak is the fastest
single call of any engine and shape: a generous peak, so the fractions below are, if anything, low.
aitgen's time is Model.run's (input checks, the output's allocation and its first touch included,
as in every model run).

(b) Models. aitgen.analysis.count_flops counts each model's multiply-adds (GEMM, conv, attention:
2 FLOPs each; element-wise work, norms and softmax are not FLOPs here) on the configurations
cpu_vs_peers.py uses (its CONFIGS, imported). The latencies are the medians of a cpu_vs_peers JSON
(--peers-json, default benchmarks/results/cpu_vs_peers.json, or _small with --small). For aitgen,
aitgen_onnx (its ONNX import), onnxruntime and torch: achieved GFLOP/s, that as a fraction of the
peak, and "need for 0.8x ORT": the fraction of peak the multiply-adds alone would have to run at for
the whole model to take 0.8x onnxruntime's time. That is a lower bound on what 0.8x needs: the
element-wise, norm, softmax and memory ops take time too, and they are not in it. Above 1.0, 0.8x
is out of reach for any kernel on this machine at this thread count.

Results: a table on stdout and JSON (default benchmarks/results/cpu_roofline.json, or
cpu_roofline_small.json with --small), with cpu_isa(), threads and the date.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# cpu_vs_peers imports only the standard library at module level: the thread settings below still
# come before numpy, torch or aitgen load.
from cpu_vs_peers import CONFIGS, TARGET_RATIO, _busy_seconds, cpu_isa  # noqa: E402

FRAMEWORKS = ("aitgen", "aitgen_onnx", "onnxruntime", "torch")
ENGINES = ("aitgen", "numpy", "torch")
# Two large GEMMs, where packing and threading costs are amortised: the peak. Then the models' own
# shapes (after the passes: Q, K and V merged into one N=2304 GEMM), rows M = 128 tokens (BERT,
# GPT-2) and 197 (ViT): how near that peak a GEMM of the size the models run can come.
DEFAULT_SHAPES = ("2048x2048x2048", "1024x4096x1024", "128x2304x768", "128x3072x768", "128x768x3072", "197x3072x768")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=None, help="GEMMs as MxNxK, comma-separated (default: two large ones for "
                                                   f"the peak and the models' own: {','.join(DEFAULT_SHAPES)}; "
                                                   "256x256x256 with --small)")
    ap.add_argument("--models", default=",".join(CONFIGS), help=f"comma-separated, from {sorted(CONFIGS)}")
    ap.add_argument("--rounds", type=int, default=15, help="timed calls per engine and shape")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls per engine and shape first")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds of sleep before each engine's turn")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="threads for every engine")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {ENGINES}")
    ap.add_argument("--small", action="store_true", help="small GEMMs and the small model configs (smoke run)")
    ap.add_argument("--peers-json", type=Path, default=None,
                    help="cpu_vs_peers results to read latencies from (default benchmarks/results/"
                         "cpu_vs_peers[_small].json)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/cpu_roofline[_small].json)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the GEMM builds here (default: a temp dir)")
    args = ap.parse_args(argv)
    try:
        shapes = args.shapes or ("256x256x256" if args.small else ",".join(DEFAULT_SHAPES))
        args.shapes = [tuple(int(v) for v in s.lower().split("x")) for s in shapes.split(",") if s]
    except ValueError:
        ap.error(f"--shapes takes MxNxK entries such as 2048x2048x2048, got {args.shapes!r}")
    if not args.shapes or any(len(s) != 3 or min(s) < 1 for s in args.shapes):
        ap.error(f"--shapes takes MxNxK entries of positive ints, got {args.shapes}")
    args.models = [m for m in args.models.split(",") if m]
    if set(args.models) - set(CONFIGS):
        ap.error(f"unknown model(s) {sorted(set(args.models) - set(CONFIGS))}; choose from {sorted(CONFIGS)}")
    args.engines = [e for e in args.engines.split(",") if e]
    if not args.engines or set(args.engines) - set(ENGINES):
        ap.error(f"--engines takes a subset of {ENGINES}")
    if args.rounds < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--rounds and --threads must be >= 1, --warmup >= 0")
    suffix = "_small" if args.small else ""
    args.peers_json = args.peers_json or HERE / "results" / f"cpu_vs_peers{suffix}.json"
    args.out = args.out or HERE / "results" / f"cpu_roofline{suffix}.json"
    return args


# -- (a) the peak ----------------------------------------------------------------------------

def time_calls(fn, args) -> dict:
    """Seconds per call over --rounds calls after --warmup, and the share of the cores other
    processes used meanwhile (a busy neighbour makes every number here low)."""
    time.sleep(args.pause)
    for _ in range(args.warmup):
        fn()
    busy0, own0, wall0 = _busy_seconds(), time.process_time(), time.perf_counter()
    times = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    busy1, wall = _busy_seconds(), time.perf_counter() - wall0
    foreign = None if busy0 is None or busy1 is None else \
        max(0.0, busy1 - busy0 - (time.process_time() - own0)) / (wall * (os.cpu_count() or 1))
    return {"median_s": statistics.median(times), "min_s": min(times), "rounds": len(times),
            "foreign_cpu_share": foreign}


def gemm_runners(m: int, n: int, k: int, args, work: Path) -> dict:
    """name -> (call, check): each engine's x[M,K] @ W[N,K]^T, and its max error against float64."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)

    def err(y) -> float:
        return float(np.max(np.abs(np.asarray(y, np.float64) - ref)) / np.max(np.abs(ref)))

    runners = {}
    if "aitgen" in args.engines:
        import aitgen as ag
        from aitgen import ops
        y = ops.linear(ag.Tensor([m, k], name="x"), ag.constant(w, name="w"))
        model = ag.compile_model({"y": y}, target="cpu", workdir=work / f"gemm_{m}x{n}x{k}")
        feeds = {"x": x}
        runners["aitgen"] = (lambda: model.run(feeds), lambda: err(model.run(feeds)["y"]))
    if "numpy" in args.engines:
        wt, out = np.ascontiguousarray(w.T), np.empty((m, n), np.float32)
        runners["numpy"] = (lambda: np.matmul(x, wt, out=out), lambda: err(x @ wt))
    if "torch" in args.engines:
        try:
            import torch
        except ImportError:
            print("[cpu_roofline] torch is not installed: skipped", file=sys.stderr)
        else:
            torch.set_num_threads(args.threads)
            tx, tw = torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(w.T))
            tout = torch.empty((m, n))
            runners["torch"] = (lambda: torch.matmul(tx, tw, out=tout), lambda: err(torch.matmul(tx, tw).numpy()))
    return runners


def measure_peak(args, work: Path) -> dict:
    rows = []
    for m, n, k in args.shapes:
        flops = 2 * m * n * k
        for engine, (call, check) in gemm_runners(m, n, k, args, work).items():
            t = time_calls(call, args)
            rows.append({"engine": engine, "m": m, "n": n, "k": k, "flops": flops, **t,
                         "gflops_median": flops / t["median_s"] / 1e9, "gflops_best": flops / t["min_s"] / 1e9,
                         "max_rel_error": check()})
            print(f"[cpu_roofline] {engine} {m}x{n}x{k}: {rows[-1]['gflops_median']:.1f} GFLOP/s median, "
                  f"{rows[-1]['gflops_best']:.1f} best", file=sys.stderr, flush=True)
    best = max(rows, key=lambda r: r["gflops_best"])
    aitgen_rows = [r for r in rows if r["engine"] == "aitgen"]
    return {"gemms": rows, "peak_gflops": best["gflops_best"],
            "peak_from": f"{best['engine']} {best['m']}x{best['n']}x{best['k']}, fastest call",
            "aitgen_best_gflops": max((r["gflops_best"] for r in aitgen_rows), default=None),
            "aitgen_median_gflops": max((r["gflops_median"] for r in aitgen_rows), default=None)}


# -- (b) the models --------------------------------------------------------------------------

def model_row(name: str, args, peers: dict, peak: float) -> dict:
    from aitgen import models
    from aitgen.analysis import count_flops

    cfg = CONFIGS[name]["small" if args.small else "full"]
    _, _, outputs = models.build(name, **cfg)  # graph only: nothing is compiled
    c = count_flops(outputs)
    row = {"config": cfg, "flops": c["flops"], "macs": c["macs"],
           "by_kind": {k: v["flops"] for k, v in c["by_kind"].items()}, "notes": c["notes"], "frameworks": {}}
    entry = peers.get("models", {}).get(name, {})
    # Latencies of another configuration (a --small run's JSON for full-size counts) would give
    # rates off by orders of magnitude: such an entry is not used.
    lat = entry.get("latency_ms", {}) if entry.get("config") == json.loads(json.dumps(cfg)) else {}
    for fw in FRAMEWORKS:
        if fw not in lat:
            continue
        ms = lat[fw]["median"]
        gflops = c["flops"] / (ms / 1e3) / 1e9
        row["frameworks"][fw] = {"latency_ms": ms, "gflops": gflops, "fraction_of_peak": gflops / peak}
    if "onnxruntime" in lat:
        target_ms = TARGET_RATIO * lat["onnxruntime"]["median"]
        row["target_ms"] = target_ms  # 0.8x onnxruntime's median
        row["mac_time_at_peak_ms"] = c["flops"] / (peak * 1e9) * 1e3
        # Even if nothing but the multiply-adds took time: the rate they would need, over the peak.
        row["need_for_target_fraction_of_peak"] = c["flops"] / (target_ms / 1e3) / 1e9 / peak
    else:
        row["missing"] = (f"no onnxruntime latency for {name} at config {cfg} in {args.peers_json}"
                          + (f" (it has config {entry['config']})" if "config" in entry else ""))
    return row


def table(doc: dict) -> str:
    head = ("model", "GFLOP", *(f"{fw} ms|GF/s|peak" for fw in FRAMEWORKS), "0.8x ORT needs")
    rows = [head]
    for name, r in doc["models"].items():
        cells = []
        for fw in FRAMEWORKS:
            f = r["frameworks"].get(fw)
            cells.append(f"{f['latency_ms']:.2f}|{f['gflops']:.0f}|{f['fraction_of_peak']:.0%}" if f else "-")
        need = r.get("need_for_target_fraction_of_peak")
        rows.append((name, f"{r['flops'] / 1e9:.2f}", *cells, f"{need:.0%} of peak" if need is not None else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    p = doc["peak"]
    gemms = [f"  {r['engine']:<6} {r['m']}x{r['n']}x{r['k']}: {r['gflops_median']:.0f} GFLOP/s median, "
             f"{r['gflops_best']:.0f} best" for r in p["gemms"]]
    return "\n".join([f"peak {p['peak_gflops']:.1f} GFLOP/s fp32 ({p['peak_from']}), {doc['environment']['threads']} "
                      f"threads"] + gemms + lines)


def _shown(path: Path) -> str:
    """A path inside the repository relative to its root (the JSON is committed), else as given."""
    try:
        return str(path.resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


def run(args) -> int:
    peers = json.loads(args.peers_json.read_text()) if args.peers_json.exists() else {}
    if not peers:
        print(f"[cpu_roofline] {args.peers_json} not found: FLOP counts and the peak only", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="aitgen_roofline_") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        peak = measure_peak(args, work)
    penv = peers.get("environment", {})
    doc = {"benchmark": "cpu_roofline", "target_ratio": TARGET_RATIO,
           "environment": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu_isa": cpu_isa(),
                           "cores": os.cpu_count(), "threads": args.threads,
                           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "rounds": args.rounds,
                           "warmup": args.warmup, "pause_s": args.pause, "small": args.small,
                           "loadavg_1min": os.getloadavg()[0]},
           "peers_json": {"path": _shown(args.peers_json), "date": penv.get("date"), "threads": penv.get("threads"),
                          "cpu_isa": penv.get("cpu_isa")},
           "peak": peak, "models": {}}
    if penv.get("threads") not in (None, args.threads):
        print(f"[cpu_roofline] warning: the latencies were measured with {penv['threads']} threads, the peak "
              f"with {args.threads}", file=sys.stderr)
    for name in args.models:
        doc["models"][name] = model_row(name, args, peers, peak["peak_gflops"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(table(doc))
    print(f"wrote {args.out}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    # Before numpy, torch or a built model loads OpenMP or OpenBLAS: each reads these once, at load.
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
