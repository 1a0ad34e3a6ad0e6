"""`aitgen` command line: compile | run | bench | inspect.

    aitgen compile model.py:build --target cpu --workdir build/m     # or zoo:NAME
    aitgen compile model.onnx --target cpu --workdir build/m --dim batch=1:32
    aitgen run build/m --input x=x.npy --out results/                 # prints names/shapes, writes .npy
    aitgen bench build/m --iters 50                                   # random inputs at max shapes
    aitgen inspect model.py:build --summary
    aitgen inspect build/m                                            # graph.html, memory.png, per-pass table
    aitgen debug model.py:build --target cpu --workdir build/dbg      # first tensor that diverges
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from .errors import AitgenError


def parse_config(items: Sequence[str]) -> dict:
    """KEY=VALUE pairs for a zoo model: Python literals (2, 0.5, (1, 1, 1, 1), 'float16'), a bare
    word as a string, or LO..HI for a dynamic dim (an IntVar named KEY with those bounds)."""
    config = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise SystemExit(f"aitgen: --config wants KEY=VALUE, got {item!r}")
        bounds = re.fullmatch(r"(\d+)\.\.(\d+)", text.strip())
        if bounds:
            from .ir.dims import IntVar
            config[key] = IntVar(key, int(bounds.group(1)), int(bounds.group(2)))
            continue
        try:
            config[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            config[key] = text
    return config


def parse_dims(items: Sequence[str]) -> dict:
    """NAME=LB:UB pairs: bounds for an imported model's symbolic dims."""
    dims = {}
    for item in items or ():
        m = re.fullmatch(r"([^=]+)=(\d+):(\d+)", item.strip())
        if not m:
            raise SystemExit(f"aitgen: --dim wants NAME=LB:UB, got {item!r}")
        dims[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return dims


def load_outputs(spec: str, config: Optional[dict] = None, dims: Optional[dict] = None):
    """`path/to/module.py:function` (or `zoo:NAME`, built with `config`, or `model.onnx`, its symbolic
    dims bounded by `dims`) -> the outputs it returns."""
    if spec.lower().endswith(".onnx") and os.path.isfile(spec):
        if config:
            raise SystemExit("aitgen: --config applies to zoo:NAME models only (use --dim for ONNX)")
        from .frontend.onnx import load
        _, outputs = load(spec, dim_bounds=dims)
        return outputs
    if dims:
        raise SystemExit("aitgen: --dim applies to .onnx models only")
    if spec.startswith("zoo:"):
        from . import models
        try:
            _, outputs = models.get(spec[4:], **(config or {}))
        except (ValueError, TypeError) as e:
            raise SystemExit(f"aitgen: {spec}: {e}")
        return outputs
    if config:
        raise SystemExit("aitgen: --config applies to zoo:NAME models only")
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise SystemExit(f"aitgen: expected module.py:function, zoo:NAME or model.onnx, got {spec!r}")
    if not os.path.exists(path):
        raise SystemExit(f"aitgen: no such file: {path}")
    mod_name = "_aitgen_user_" + os.path.splitext(os.path.basename(path))[0]
    loader = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        loader.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    fn = getattr(module, func, None)
    if fn is None:
        raise SystemExit(f"aitgen: {path} has no function '{func}'")
    out = fn()
    # A function may return (inputs, outputs) like aitgen.models.get, or just the outputs.
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        out = out[1]
    return out


def is_build_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, "graph.json"))


def cmd_inspect(args) -> int:
    from .compiler import compile_options
    from .ir.graph import Graph
    from .passes import run_passes

    if is_build_dir(args.target):
        return inspect_build(args.target)
    if os.path.isdir(args.target):
        raise SystemExit(f"aitgen: {args.target} has no graph.json; build it with `aitgen compile` first")
    outputs = load_outputs(args.target, parse_config(args.config), parse_dims(args.dim))
    graph = Graph.from_outputs(outputs)
    before = graph.op_counts()
    opts = compile_options("cpu", verify=args.verify, dump_passes=args.dump_passes, fusion=not args.no_fusion)
    run = run_passes(graph, opts)
    graph = run.graph
    if not args.summary:
        print(graph)
    after = graph.op_counts()
    print(f"# ops before passes: {sum(before.values())}, after: {sum(after.values())}")
    width = max((len(k) for k in set(before) | set(after)), default=4)
    print(f"# {'kind':<{width}}  before  after")
    for k in sorted(set(before) | set(after)):
        print(f"# {k:<{width}}  {before.get(k, 0):>6}  {after.get(k, 0):>5}")
    print("# passes: " + ", ".join(f"{r.name} {r.seconds * 1e3:.1f} ms -> {r.ops_after} ops"
                                   for r in run.records))
    from .viz import pass_table
    records = [dict(name=r.name, seconds=r.seconds, ops_after=r.ops_after, kernels=r.kernels,
                    activation_bytes=r.activation_bytes) for r in run.records]
    print("\n".join("# " + line for line in pass_table(records, run.input_cost).splitlines()))
    return 0


def inspect_build(workdir: str) -> int:
    """A build directory: the per-pass table, DIR/graph.html and DIR/memory.png."""
    from . import viz

    desc, report = viz.load(workdir)
    print(f"{desc['name']} in {workdir}: {report.get('num_ops', '?')} ops before passes, "
          f"{len(desc['ops'])} after; {report.get('num_kernels', '?')} kernel calls per run "
          f"({report.get('unique_kernels', '?')} unique)")
    if report.get("passes"):
        print(viz.pass_table(report["passes"], report.get("pipeline_input")))
    if report.get("activation_bytes") is not None:
        naive = report.get("activation_naive_bytes") or 0
        lb = report.get("activation_lower_bound_bytes") or 0
        ratio = f", {report['activation_bytes'] / lb:.3f}x the lower bound" if lb else ""
        print(f"planned arena {report['activation_bytes']:,d} bytes (lower bound {lb:,d}, naive {naive:,d}{ratio})")
    html = os.path.join(workdir, "graph.html")
    counts = viz.write_graph_html(desc, html, report)
    print(f"wrote {html}: {counts['kernel_boxes']} kernel boxes, {counts['fused_groups']} fused groups, "
          f"{counts['views']} views")
    png = os.path.join(workdir, "memory.png")
    try:
        mem = viz.write_memory_png(desc, png)
    except ImportError:
        print("memory.png needs matplotlib: pip install 'aitgen[viz]'", file=sys.stderr)
    else:
        print(f"wrote {png}: {mem['tensors']} arena tensors, arena {mem['arena_bytes']:,d} bytes")
    return 0


def cmd_debug(args) -> int:
    from .debug import bisect, format_errors

    outputs = load_outputs(args.model, parse_config(args.config), parse_dims(args.dim))
    feeds = _parse_inputs(args.input) or None  # None: random inputs at their max shapes
    result = bisect(outputs, feeds, target=args.target, workdir=args.workdir, rtol=args.rtol, atol=args.atol,
                    fusion=not args.no_fusion)
    print(format_errors(result, limit=None if args.all else 40))
    print(result.summary())
    return 0 if result.ok else 1


def cmd_compile(args) -> int:
    from .compiler import compile_model

    outputs = load_outputs(args.model, parse_config(args.config), parse_dims(args.dim))
    # Build only: a CUDA library builds on a machine without a GPU; `aitgen run` loads it.
    compile_model(outputs, target=args.target, workdir=args.workdir, fusion=not args.no_fusion,
                  arch=args.arch, precision=args.precision, progress=sys.stderr.isatty(), load=False)
    meta = json.loads((Path(args.workdir) / "model.json").read_text())
    report = json.loads((Path(args.workdir) / "report.json").read_text())
    print(f"built {args.workdir}: {report['num_ops']} ops -> {report['num_kernels']} kernel calls "
          f"({report['unique_kernels']} unique); cache {report['cache_hits']} hits, {report['cache_misses']} misses; "
          f"{report['build_seconds']:.2f} s")
    print(f"activations {report['activation_bytes']} bytes (lower bound {report['activation_lower_bound_bytes']}, "
          f"naive {report['activation_naive_bytes']}); constants {report['constant_bytes']} bytes")
    if meta.get("arch"):
        print(f"target {meta['target']} {meta['arch']}: {Path(args.workdir) / meta['library']}")
    for kind, group in (("input ", meta["inputs"]), ("output", meta["outputs"])):
        for name, t in group.items():
            print(f"{kind} {name}: {t['dtype']} max shape {t['max_shape']}")
    return 0


def _parse_inputs(items: Sequence[str]) -> dict:
    import numpy as np

    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"aitgen: --input wants NAME=FILE.npy, got {item!r}")
        if not os.path.exists(path):
            raise SystemExit(f"aitgen: no such file: {path}")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SystemExit(f"aitgen: cannot read {path} as .npy: {e}")
    return feeds


def cmd_run(args) -> int:
    import numpy as np

    from .runtime.model import Model

    feeds = _parse_inputs(args.input)
    with Model.load(args.workdir) as model:
        outputs = model.run(feeds)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    for name, arr in outputs.items():
        line = f"{name}: {arr.dtype} {list(arr.shape)}{_summary(arr)}"
        if args.out:
            # ONNX names may hold '/' or ':'; the file name keeps the safe characters only.
            path = os.path.join(args.out, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy")
            np.save(path, arr)
            line += f" -> {path}"
        print(line)
    return 0


def _summary(arr) -> str:
    """min/max/mean of a numeric output, for a glance at the numbers."""
    import numpy as np

    if arr.size == 0 or arr.dtype.kind not in "fiub":
        return ""
    a = arr.astype(np.float64)
    return f" min {a.min():.6g} max {a.max():.6g} mean {a.mean():.6g}"


def cmd_bench(args) -> int:
    from .debug import random_inputs
    from .runtime.model import Model

    if args.iters < 1:
        raise SystemExit("aitgen: --iters must be at least 1")
    given = _parse_inputs(args.input)
    with Model.load(args.workdir) as model:
        feeds = {**random_inputs(model.input_specs), **given}
        stats = model.benchmark(feeds, iters=args.iters, warmup=args.warmup)
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items())
    print(f"inputs: {shapes}")
    print(f"median {stats['median_ms']:.3f} ms, mean {stats['mean_ms']:.3f} ms, min {stats['min_ms']:.3f} ms "
          f"over {stats['iters']} runs")
    return 0


_CONFIG_HELP = ("a zoo model's configuration, repeatable: layers=2, hidden=64, seq=1..128 (a dynamic dim); "
                "see aitgen.models")


_DIM_HELP = ("bounds of an ONNX model's symbolic dim, repeatable: batch=1:32 (default 1:64 for every "
             "dim not named)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aitgen", description="aitgen: a deep-learning inference compiler")
    sub = p.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="print a model's graph after the pass pipeline, with op counts; "
                                         "or, given a build directory, draw it (graph.html, memory.png)")
    ins.add_argument("target", help="module.py:function (returning the outputs dict), zoo:NAME, or a directory "
                                    "`aitgen compile` built")
    ins.add_argument("--no-fusion", action="store_true", help="skip the fusion passes")
    ins.add_argument("--summary", action="store_true", help="op counts only, no graph text")
    ins.add_argument("--verify", action="store_true", help="verify the IR after every pass")
    ins.add_argument("--dump-passes", metavar="DIR", help="write NN-<pass>.txt after every pass")
    ins.add_argument("--config", action="append", metavar="KEY=VALUE", help=_CONFIG_HELP)
    ins.add_argument("--dim", action="append", metavar="NAME=LB:UB", help=_DIM_HELP)
    ins.set_defaults(func=cmd_inspect)

    comp = sub.add_parser("compile", help="compile a model into a workdir (shared library + weights + report)")
    comp.add_argument("model", help="module.py:function (returning the outputs dict), zoo:NAME or model.onnx")
    comp.add_argument("--target", default="auto", help="cpu, cuda, rocm or auto (default: auto)")
    comp.add_argument("--workdir", required=True, help="directory to build into")
    comp.add_argument("--arch", help="CUDA: sm_80 or sm_90a (sm_90 means sm_90a); default: the GPU present, "
                                     "else sm_80. No GPU is needed to build")
    comp.add_argument("--precision", choices=["float16", "bfloat16"],
                      help="compute in float16/bfloat16 (inputs and outputs keep their dtypes)")
    comp.add_argument("--no-fusion", action="store_true", help="skip the fusion passes")
    comp.add_argument("--config", action="append", metavar="KEY=VALUE", help=_CONFIG_HELP)
    comp.add_argument("--dim", action="append", metavar="NAME=LB:UB", help=_DIM_HELP)
    comp.set_defaults(func=cmd_compile)

    dbg = sub.add_parser("debug", help="numerical bisect: build with every intermediate exposed and name the "
                                       "first tensor that differs from the oracle (exit 1 if one does)")
    dbg.add_argument("model", help="module.py:function (returning the outputs dict) or zoo:NAME")
    dbg.add_argument("--target", default="cpu", help="cpu, cuda or rocm (default: cpu)")
    dbg.add_argument("--workdir", required=True, help="directory to build into")
    dbg.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    dbg.add_argument("--atol", type=float, default=1e-5,
                     help="absolute tolerance, times max(1, the largest |value| of the tensor) (default 1e-5)")
    dbg.add_argument("--no-fusion", action="store_true", help="skip the fusion passes")
    dbg.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="use these inputs (all of them) instead of random ones")
    dbg.add_argument("--all", action="store_true", help="print every tensor, not only 40 around the first divergence")
    dbg.add_argument("--config", action="append", metavar="KEY=VALUE", help=_CONFIG_HELP)
    dbg.add_argument("--dim", action="append", metavar="NAME=LB:UB", help=_DIM_HELP)
    dbg.set_defaults(func=cmd_debug)

    run = sub.add_parser("run", help="run a built model on .npy inputs")
    run.add_argument("workdir", help="a directory compile built")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="one per input")
    run.add_argument("--out", "--output-dir", dest="out", metavar="DIR", help="write each output to DIR/<name>.npy")
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="time a built model on random inputs at their max shapes")
    bench.add_argument("workdir", help="a directory compile built")
    bench.add_argument("--iters", type=int, default=50, help="timed runs (default 50)")
    bench.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    bench.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                       help="use this input instead of a random one")
    bench.set_defaults(func=cmd_bench)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AitgenError as e:
        print(f"aitgen: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
