#!/usr/bin/env python
"""aitgen on the CPU against onnxruntime and torch eager: one process, same weights, same inputs.

    python benchmarks/cpu_vs_peers.py                          # all five: bert_base, resnet50, mobilenet_v2, vit_b16, gpt2
    python benchmarks/cpu_vs_peers.py --models bert_base --rounds 20
    python benchmarks/cpu_vs_peers.py --small --rounds 2       # small configs: a smoke run in seconds
    python benchmarks/cpu_vs_peers.py --no-fusion              # also aitgen built with fusion=False

Each zoo model is built once with aitgen's nn (seeded weights). Its hand-written torch twin
(aitgen/models/torch_refs.py) gets the same weights and is the torch-eager peer; an ONNX export of that
twin (opset 17) is the onnxruntime peer; compile_model(target="cpu") gives aitgen's, and aitgen's import
of that same ONNX file gives 'aitgen_onnx' (what a user importing the model gets; --no-imported skips it). Before any timing,
all three are checked against the float64 twin (max abs difference per output, relative to the output's
magnitude); a disagreement is reported and makes the exit status 1.

Timing: every framework gets the same thread count (--threads, default: the cores this process may use):
torch.set_num_threads, onnxruntime's intra_op_num_threads, and OMP_NUM_THREADS for aitgen's OpenMP
(set here before anything loads OpenMP, so a caller's OMP_NUM_THREADS=1 -- the test suite's -- is not
inherited). After a warm-up, rounds interleave the frameworks (the order rotates each round), so drift in
the machine's speed hits them alike; a turn is a pause (--pause, so the previous framework's spinning
threads have gone to sleep: right after ORT's turn aitgen ran 2x slower, benchmarks/peer_spin.py), one
untimed call (this framework's threads wake, its caches refill) and then --iters timed calls, whose
mean is the round's number. Other processes' CPU use is measured over the turns, not the pauses. A round during which other processes kept the cores busy (more than --max-foreign of
them, measured from /proc/stat less this process's own CPU time) is dropped and run again, up to
--max-rounds; if too few quiet rounds come, the report says "noisy". The report gives the median over
the kept rounds, and the ratios aitgen/onnxruntime and aitgen/torch. torch and onnxruntime are optional: a missing one is reported and skipped (without torch,
the numerics reference is aitgen's own numpy oracle, and there is no ONNX export).

Results: a table on stdout and JSON (default benchmarks/results/cpu_vs_peers.json, or
cpu_vs_peers_small.json with --small).
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
TARGET_RATIO = 0.8  # issue 14's goal for float32: aitgen at most 0.8x onnxruntime's latency
PEERS = ("onnxruntime", "torch")
# The flags that decide which kernels oneDNN (and ORT) can use: every JSON records them.
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_bf16", "amx_int8")

# Full size: the issue's configurations. Small: the zoo tests' sizes, for a quick end-to-end run.
CONFIGS = {
    "bert_base": {"full": dict(batch=1, seq=128),
                  "small": dict(batch=1, seq=16, layers=2, hidden=64, heads=2, intermediate=128, vocab=100,
                                max_position=32)},
    "resnet50": {"full": dict(batch=1),
                 "small": dict(batch=1, layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10)},
    "mobilenet_v2": {"full": dict(batch=1), "small": dict(batch=1, width=0.25, image_size=32, num_classes=10)},
    "vit_b16": {"full": dict(batch=1),
                "small": dict(batch=1, image_size=32, patch=8, layers=2, hidden=32, heads=2, mlp=64, num_classes=10)},
    "gpt2": {"full": dict(batch=1, seq=128),
             "small": dict(batch=1, seq=16, layers=2, hidden=32, heads=2, vocab=100, max_position=32)},
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(CONFIGS), help=f"comma-separated, from {sorted(CONFIGS)}")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds (median over these)")
    ap.add_argument("--iters", type=int, default=3, help="timed calls per framework per round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls per framework before the rounds")
    ap.add_argument("--max-foreign", type=float, default=0.05,
                    help="drop and rerun a round in which other processes used more than this share of all "
                         "cores (1 keeps every round)")
    ap.add_argument("--max-rounds", type=int, default=None, help="rounds run at most, dropped ones included "
                                                                     "(default 5 x --rounds)")
    ap.add_argument("--pause", type=float, default=0.5,
                    help="seconds of sleep before each framework's turn, so the previous one's spinning "
                         "threads are idle when it starts (0: back to back, as before)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="threads for every framework")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of onnxruntime,torch")
    ap.add_argument("--small", action="store_true", help="small configurations (smoke run)")
    ap.add_argument("--no-imported", action="store_true",
                    help="skip 'aitgen_onnx': aitgen's build of the ONNX file onnxruntime runs (the imported model)")
    ap.add_argument("--no-fusion", action="store_true",
                    help="also build aitgen with fusion=False and time it as 'aitgen_unfused', in the same rounds")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/cpu_vs_peers[_small].json)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep builds and ONNX files here (default: a temp dir)")
    ap.add_argument("--tol", type=float, default=1e-3,
                    help="agreement: max abs diff <= tol * max |reference| for every output")
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in CONFIGS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {sorted(CONFIGS)}")
    args.peers = [p for p in args.peers.split(",") if p]
    if set(args.peers) - set(PEERS):
        ap.error(f"--peers takes a subset of {PEERS}")
    if args.rounds < 1 or args.iters < 1 or args.threads < 1:
        ap.error("--rounds, --iters and --threads must be >= 1")
    if args.max_rounds is None:
        args.max_rounds = 5 * args.rounds
    if args.out is None:
        args.out = HERE / "results" / ("cpu_vs_peers_small.json" if args.small else "cpu_vs_peers.json")
    return args


# -- inputs and the three frameworks ---------------------------------------------------------
# numpy, torch, onnxruntime and aitgen are imported inside the functions: main() sets the thread
# environment first, and torch and onnxruntime stay optional.

def make_feeds(inputs: dict, cfg: dict, seed: int = 0) -> dict:
    """aitgen's feeds: NHWC float images, int64 tokens (the last eighth of the mask padded, so the
    numerics check covers the mask path)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = cfg.get("vocab", 1000)  # every default zoo vocabulary has at least 1000 tokens
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d.value for d in t.shape)
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(t.dtype.np)
        elif name == "attention_mask":
            feeds[name] = np.ones(shape, t.dtype.np)
            feeds[name][:, shape[1] - shape[1] // 8:] = 0
        elif name == "token_type_ids":
            feeds[name] = rng.integers(0, 2, shape).astype(t.dtype.np)
        else:
            feeds[name] = rng.integers(0, vocab, shape).astype(t.dtype.np)
    return feeds


class Zoo:
    """One zoo model as the narrow-precision benchmarks set it up: its config ("small" or "full"), the
    module, its input tensors and outputs, the output names, and the feeds (make_feeds, seed 0)."""

    def __init__(self, name: str, small: bool):
        from aitgen import models

        self.name = name
        self.cfg = CONFIGS[name]["small" if small else "full"]
        self.module, self.inputs, self.outputs = models.build(name, **self.cfg)
        self.out_names = list(self.outputs)
        self.feeds = make_feeds(self.inputs, self.cfg)


def nchw(feeds: dict) -> dict:
    """The peers' feeds: the same arrays, images transposed NHWC -> NCHW (outside any timing)."""
    import numpy as np

    return {k: np.ascontiguousarray(v.transpose(0, 3, 1, 2)) if v.ndim == 4 else v for k, v in feeds.items()}


def torch_runner(twin, feeds: dict, out_names: list):
    import torch

    args = [torch.from_numpy(v) for v in feeds.values()]

    def run():
        with torch.inference_mode():
            out = twin(*args)
        out = out if isinstance(out, tuple) else (out,)
        return {k: o.numpy() for k, o in zip(out_names, out)}
    return run


def onnx_export(twin, feeds: dict, out_names: list, path: Path) -> None:
    import warnings

    import torch

    # dynamo=True needs onnxscript; the TorchScript exporter needs only onnx and handles the twins.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(twin, tuple(torch.from_numpy(v) for v in feeds.values()), str(path), opset_version=17,
                          dynamo=False, input_names=list(feeds), output_names=out_names)


def ort_runner(path: Path, feeds: dict, out_names: list, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    mine = {i.name: feeds[i.name] for i in sess.get_inputs()}  # the exporter may drop an unused input

    def run():
        return dict(zip(out_names, sess.run(out_names, mine)))
    return run


def onednn_isa(report: dict) -> dict:
    """The implementations oneDNN chose for the build's GEMM/conv kernels (report.json's
    onednn_impls, e.g. "brgconv_1x1:avx512_core"), with how many kernels got each: the ISA the
    kernels actually run, next to what the CPU offers (environment.cpu_isa)."""
    counts: dict = {}
    for impl in (report.get("onednn_impls") or {}).values():
        counts[impl] = counts.get(impl, 0) + 1
    return dict(sorted(counts.items()))


def aitgen_runner(outputs: dict, feeds: dict, workdir: Path, fusion: bool = True):
    import aitgen as ag

    model = ag.compile_model(outputs, target="cpu", workdir=workdir, fusion=fusion)
    report = json.loads((workdir / "report.json").read_text())
    build = {k: report.get(k) for k in ("num_ops", "num_kernels", "unique_kernels", "build_seconds",
                                        "activation_bytes", "constant_bytes")}
    build["onednn_isa"] = onednn_isa(report)
    return (lambda: model.run(feeds)), build, model


def aitgen_onnx_runner(path: Path, feeds: dict, out_names: list, workdir: Path):
    """aitgen's build of the ONNX file onnxruntime runs: what a user importing the model gets."""
    import aitgen as ag
    from aitgen.frontend import onnx as ag_onnx

    inputs, outputs = ag_onnx.load(str(path))
    model = ag.compile_model({k: outputs[k] for k in out_names}, target="cpu", workdir=workdir)
    report = json.loads((workdir / "report.json").read_text())
    build = {k: report.get(k) for k in ("num_ops", "num_kernels", "unique_kernels", "build_seconds")}
    build["onednn_isa"] = onednn_isa(report)
    mine = {k: feeds[k] for k in inputs}
    return (lambda: model.run(mine)), build, model


# -- numerics and timing ---------------------------------------------------------------------

def agreement(results: dict, reference: dict, tol: float) -> dict:
    """Max abs difference of every framework's outputs from the reference; ok when each is within
    tol * max |reference| (NaN or a wrong shape is never ok)."""
    import numpy as np

    diffs, ok = {}, True
    for fw, outs in results.items():
        diffs[fw] = {}
        for k, want in reference.items():
            got = outs.get(k)
            if got is None or got.shape != want.shape:
                diffs[fw][k], ok = None, False
                continue
            d = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
            diffs[fw][k] = d
            ok = ok and d <= tol * float(np.max(np.abs(want)))
    if "aitgen" in results and "onnxruntime" in results:  # the pair the target compares, for the record
        a, o = results["aitgen"], results["onnxruntime"]
        diffs["aitgen_vs_onnxruntime"] = {
            k: float(np.max(np.abs(a[k].astype(np.float64) - o[k]))) if a[k].shape == o[k].shape else None
            for k in reference}
    scale = {k: float(np.max(np.abs(v))) for k, v in reference.items()}
    return {"max_abs_diff": diffs, "max_abs_reference": scale, "tolerance": tol, "ok": ok}


def cpu_isa() -> dict:
    """The CPU's model name and the ISA flags that decide which kernels run (Linux /proc/cpuinfo)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    lines = text.splitlines()
    name = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
    flags = set(next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), []))
    return {"model_name": name, "flags": {f: f in flags for f in ISA_FLAGS}}


def write_json(path, doc: dict) -> None:
    """A benchmark's JSON at `path` (its folder made), and the line that says so."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1))
    print(f"wrote {path}")


def _busy_seconds():
    """CPU seconds every process together has been busy, over all cores (/proc/stat); None off Linux."""
    try:
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def interleave(runners: dict, args) -> tuple[dict, dict]:
    """Per framework, one mean latency (ms) per kept round; frameworks take turns, the order rotating.

    A round in which other processes kept more than --max-foreign of the machine's cores busy is
    dropped and run again (up to --max-rounds in all): the frameworks' OpenMP and thread-pool barriers
    stall whenever a core is taken away, so one busy neighbour can multiply a latency several times.
    """
    for run in runners.values():
        for _ in range(args.warmup):
            run()
    names, kept, dropped = list(runners), [], []
    cores = os.cpu_count() or 1
    while len(kept) < args.rounds and len(kept) + len(dropped) < args.max_rounds:
        r = len(kept) + len(dropped)
        times, foreign, wall, measurable = {}, 0.0, 0.0, True
        for k in names[r % len(names):] + names[:r % len(names)]:
            run = runners[k]
            # The previous framework's pool (ORT's spinning intra-op threads, OpenMP's) keeps the cores
            # busy for a while after its last call; timed right after it, this one shares the cores
            # with those spinners (peer_spin.json: ResNet-50 int8 twice as slow). A pause lets them sleep.
            time.sleep(args.pause)
            busy0, own0, wall0 = _busy_seconds(), time.process_time(), time.perf_counter()
            run()  # untimed: this framework's threads wake and its caches refill after the last one's turn
            t0 = time.perf_counter()
            for _ in range(args.iters):
                run()
            times[k] = (time.perf_counter() - t0) * 1e3 / args.iters
            busy1 = _busy_seconds()
            wall += time.perf_counter() - wall0
            if busy0 is None or busy1 is None:
                measurable = False
            else:
                foreign += max(0.0, busy1 - busy0 - (time.process_time() - own0))
        share = foreign / (wall * cores) if measurable else None
        # /proc/stat counts in clock ticks (10 ms): a round too short to tell the threshold apart is kept.
        blurred = share is None or 2.0 / os.sysconf("SC_CLK_TCK") / (wall * cores) > args.max_foreign / 2
        # --max-foreign 1 keeps every round: /proc/stat's ticks and process_time() are sampled apart,
        # so a fully busy machine can read a share a little above 1.
        keep = blurred or share <= args.max_foreign or args.max_foreign >= 1.0
        (kept if keep else dropped).append((times, share))
    noisy = len(kept) < args.rounds
    use = kept or dropped  # every round was busy: report them all, flagged
    samples = {k: [t[k] for t, _ in use] for k in names}
    info = {"kept": len(kept), "dropped": len(dropped), "noisy": noisy, "max_foreign": args.max_foreign,
            "foreign_cpu_share": [s for _, s in use]}
    return samples, info


def _error(e: BaseException) -> str:
    lines = f"{type(e).__name__}: {e}".strip().splitlines()
    return "\n".join(lines[:6])


# -- one model -------------------------------------------------------------------------------

def bench_model(name: str, args, work: Path) -> dict:
    import numpy as np

    from aitgen import models
    from aitgen import reference as oracle

    cfg = CONFIGS[name]["small" if args.small else "full"]
    module, inputs, outputs = models.build(name, **cfg)
    out_names = list(outputs)
    feeds = make_feeds(inputs, cfg)
    peer_feeds = nchw(feeds)
    entry = {"config": cfg, "inputs": {k: list(v.shape) for k, v in feeds.items()}, "errors": {}, "skipped": {}}
    runners, keep = {}, []

    try:
        run, entry["aitgen_build"], model = aitgen_runner(outputs, feeds, work / name)
        runners["aitgen"] = run
        keep.append(model)
    except Exception as e:  # recorded; the peers are still measured
        entry["errors"]["aitgen"] = _error(e)
    if args.no_fusion:  # the same model without the fusion passes: what fusion buys, in the same rounds
        try:
            run, entry["aitgen_unfused_build"], model = aitgen_runner(outputs, feeds, work / f"{name}_unfused", False)
            runners["aitgen_unfused"] = run
            keep.append(model)
        except Exception as e:
            entry["errors"]["aitgen_unfused"] = _error(e)

    twin = reference = None
    try:
        import torch
        from aitgen.models import torch_refs
        torch.set_num_threads(args.threads)
        twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
        twin64 = torch_refs.from_aitgen(name, module, cfg, torch.float64)
        f64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in peer_feeds.items()}
        reference, ref_name = torch_runner(twin64, f64, out_names)(), "torch float64 twin"
        del twin64
    except ImportError as e:
        for p in PEERS:
            entry["skipped"][p] = f"torch is not installed ({e})"
    if twin is not None and "torch" in args.peers:
        runners["torch"] = torch_runner(twin, peer_feeds, out_names)
    if twin is not None and "onnxruntime" in args.peers:
        try:
            import onnxruntime  # noqa: F401
            path = work / f"{name}.onnx"
            onnx_export(twin, peer_feeds, out_names, path)
            runners["onnxruntime"] = ort_runner(path, peer_feeds, out_names, args.threads)
            if not args.no_imported:
                try:
                    run, entry["aitgen_onnx_build"], model = aitgen_onnx_runner(path, peer_feeds, out_names,
                                                                                work / f"{name}_onnx")
                    runners["aitgen_onnx"] = run
                    keep.append(model)
                except Exception as e:
                    entry["errors"]["aitgen_onnx"] = _error(e)
        except ImportError as e:
            entry["skipped"]["onnxruntime"] = f"not installed ({e})"
        except Exception as e:
            entry["errors"]["onnxruntime"] = _error(e)
    for p in PEERS:
        if p not in args.peers:
            entry["skipped"].setdefault(p, "not requested (--peers)")
    if reference is None:  # no torch: aitgen's numpy oracle, float32
        reference, ref_name = oracle.run(outputs, feeds), "aitgen.reference (numpy, float32)"

    results = {k: run() for k, run in runners.items()}
    entry["numerics"] = {"reference": ref_name, **agreement(results, reference, args.tol)}
    samples, entry["rounds"] = interleave(runners, args)
    entry["latency_ms"] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": v}
                           for k, v in samples.items()}
    med = {k: v["median"] for k, v in entry["latency_ms"].items()}
    entry["ratio"] = {f"aitgen/{p}": med["aitgen"] / med[p] if "aitgen" in med and p in med else None
                      for p in PEERS}
    if "aitgen_onnx" in med and "onnxruntime" in med:
        entry["ratio"]["aitgen_onnx/onnxruntime"] = med["aitgen_onnx"] / med["onnxruntime"]
    if "aitgen_unfused" in med:
        entry["ratio"]["aitgen/aitgen_unfused"] = med["aitgen"] / med["aitgen_unfused"] if "aitgen" in med else None
    r = entry["ratio"]["aitgen/onnxruntime"]
    ri = entry["ratio"].get("aitgen_onnx/onnxruntime")
    entry["target"] = {"aitgen/onnxruntime <=": TARGET_RATIO, "met": None if r is None else r <= TARGET_RATIO,
                       "imported_met": None if ri is None else ri <= TARGET_RATIO}
    for m in keep:
        m.close()
    return entry


# -- report ----------------------------------------------------------------------------------

def environment(args, load_at_start: float) -> dict:
    import platform
    from importlib import metadata

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    versions = {}
    for pkg in ("aitgen", "numpy", "torch", "onnxruntime", "onnx", "onednn-devel-cpu-gomp"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu": cpu, "cores": os.cpu_count(),
            "threads": args.threads, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "python": platform.python_version(), "versions": versions, "rounds": args.rounds,
            "iters": args.iters, "warmup": args.warmup, "pause_s": args.pause, "small": args.small,
            "peers": args.peers, "cpu_isa": cpu_isa(),
            # Other processes on the cores make every framework slower, OpenMP ones most: read with care
            # when these exceed a fraction of a core.
            "loadavg_1min": {"start": load_at_start, "end": os.getloadavg()[0]}}


def table(results: dict) -> str:
    rows = [("model", "aitgen ms", "imported ms", "onnxruntime ms", "torch ms", "unfused ms", "aitgen/ort",
             "imported/ort", "aitgen/torch", "fused/unfused", "rounds", "numerics")]
    for name, e in results.items():
        lat, ratio = e.get("latency_ms", {}), e.get("ratio", {})
        ms = [f"{lat[k]['median']:.2f}" if k in lat else "-"
              for k in ("aitgen", "aitgen_onnx", "onnxruntime", "torch", "aitgen_unfused")]
        rs = [f"{ratio[k]:.2f}x" if ratio.get(k) else "-"
              for k in ("aitgen/onnxruntime", "aitgen_onnx/onnxruntime", "aitgen/torch", "aitgen/aitgen_unfused")]
        num = e.get("numerics", {})
        worst = max((d for fw, per in num.get("max_abs_diff", {}).items() if fw in runnable(e)
                     for d in per.values() if d is not None), default=float("nan"))
        rd = e.get("rounds", {})
        kept = f"{rd.get('kept', 0)} kept, {rd.get('dropped', 0)} busy" + (" NOISY" if rd.get("noisy") else "")
        rows.append((name, *ms, *rs, kept, f"{'ok' if num.get('ok') else 'MISMATCH'} ({worst:.1e})"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)


def runnable(entry: dict) -> set:
    return set(entry.get("latency_ms", {}))


def run_benchmark(args) -> int:
    import gc
    import tempfile

    results, status, load = {}, 0, os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="aitgen_bench_") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.models:
            print(f"[cpu_vs_peers] {name} ({'small' if args.small else 'full'}): building, checking, timing ...",
                  file=sys.stderr, flush=True)
            results[name] = e = bench_model(name, args, work)
            gc.collect()
            for fw, per in e["numerics"]["max_abs_diff"].items():
                vs = "" if fw == "aitgen_vs_onnxruntime" else f" vs {e['numerics']['reference']}"
                print(f"  max abs diff{vs}, {fw}: "
                      + ", ".join(f"{k} {d:.2e}" if d is not None else f"{k} shape mismatch" for k, d in per.items()),
                      file=sys.stderr)
            for fw, msg in e["errors"].items():
                print(f"  {fw} FAILED: {msg}", file=sys.stderr)
            if e["errors"] or not e["numerics"]["ok"]:
                status = 1
    doc = {"benchmark": "cpu_vs_peers", "environment": environment(args, load), "target_ratio": TARGET_RATIO,
           "models": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(table(results))
    print(f"wrote {args.out}")
    return status


def main(argv=None) -> int:
    args = parse_args(argv)
    # Before numpy, torch or a built model loads an OpenMP runtime: each reads this once, at load.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    return run_benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
