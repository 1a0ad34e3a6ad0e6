"""`aitgen inspect | compile | debug | run`: each takes the parsed arguments and returns the exit
status; a user error is raised as a typed AitgenError for main to print."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import OutputDirError, UsageError
from . import targets
from .sources import load_outputs
from .values import output_dir, output_files, parse_calibration, parse_config, parse_dims, parse_inputs, threads_option


def is_build_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, "graph.json"))


def cmd_inspect(args) -> int:
    from ..analysis import count_flops
    from ..compiler import compile_options
    from ..ir.graph import Graph
    from ..passes import run_passes

    if is_build_dir(args.target):
        return inspect_build(args.target)
    if os.path.isdir(args.target):
        raise UsageError(f"{args.target} has no graph.json; build it with `aitgen compile` first")
    outputs = load_outputs(args.target, parse_config(args.config), parse_dims(args.dim))
    graph = Graph.from_outputs(outputs)
    before = graph.op_counts()
    work_before = count_flops(graph)  # before the passes: they may rewrite this graph in place
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
    print(work_line(work_before, count_flops(graph)))
    print("# passes: " + ", ".join(f"{r.name} {r.seconds * 1e3:.1f} ms -> {r.ops_after} ops"
                                   for r in run.records))
    from ..viz import pass_table
    records = [dict(name=r.name, seconds=r.seconds, ops_after=r.ops_after, kernels=r.kernels,
                    activation_bytes=r.activation_bytes) for r in run.records]
    print("\n".join("# " + line for line in pass_table(records, run.input_cost).splitlines()))
    return 0


def work_line(before: dict, after: dict) -> str:
    """The model's arithmetic (aitgen.analysis.count_flops): FLOPs are the same before and after
    the passes, the elements written by the other ops drop where fusion removed intermediates."""
    kinds = ", ".join(after["by_kind"]) or "none"
    line = f"# work: {_si(after['flops'])}FLOPs (2 per multiply-add of {kinds})"
    if after["int8_macs"]:
        line += f", {_si(after['int8_ops'])}int8 ops"
    if after["dims"]:
        line += " at the upper bounds " + ", ".join(f"{k}={v}" for k, v in after["dims"].items())
    return line + (f"; other ops write {before['other_elements']:,d} elements before passes, "
                   f"{after['other_elements']:,d} after")


def _si(n: int) -> str:
    """4 significant figures and a prefix: 8.178 G, 1.467 M, 192 (then the unit follows)."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.4g} {prefix}"
    return f"{n} "


def inspect_build(workdir: str) -> int:
    """A build directory: the per-pass table, DIR/graph.html and DIR/memory.png."""
    from .. import viz

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
    prec = report.get("precision") or {}
    if prec.get("requested"):  # which ops store which types: what precision= narrowed, and what it kept
        rows = "; ".join(f"{kind} {k} x{n}" for kind, row in prec["by_kind"].items() for k, n in row.items())
        print(f"precision {prec['requested']} ({prec['policy']} policy, {prec['accumulate']} accumulation): {rows}")
        if prec.get("int8"):  # precision="int8": which ops run int8 and which stay float
            def counts(d):
                return ", ".join(f"{n} {k}" for k, n in d.items()) or "none"
            print(f"int8: {counts(prec['int8'])}; float: {counts(prec.get('float', {}))}")
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
    from ..debug import bisect, format_errors

    outputs = load_outputs(args.model, parse_config(args.config), parse_dims(args.dim))
    feeds = parse_inputs(args.input) or None  # None: random inputs at their max shapes
    result = bisect(outputs, feeds, target=args.target, workdir=args.workdir, rtol=args.rtol, atol=args.atol,
                    fusion=not args.no_fusion)
    print(format_errors(result, limit=None if args.all else 40))
    print(result.summary())
    return 0 if result.ok else 1


def cmd_compile(args) -> int:
    from ..compiler import check_workdir, compile_model

    # What can be checked without the model is checked first: loading a large model or an ONNX
    # file takes a while, and a typo in --target should not cost that.
    config, dims = parse_config(args.config), parse_dims(args.dim)
    check_workdir(args.workdir)
    calibration = parse_calibration(args.calibration)
    if args.precision == "int8" and calibration is None:
        raise UsageError("--precision int8 needs --calibration FEED.npz ... (one .npz of inputs per feed)")
    if calibration is not None and args.precision != "int8":
        raise UsageError("--calibration applies to --precision int8 only")
    backend, _ = targets.resolve(args.target, args.arch)
    if args.fold_qdq and backend != "cpu":
        raise UsageError(f"--fold-qdq builds int8 kernels, which the CPU has only (--target {args.target} "
                         f"picked {backend})")
    outputs = load_outputs(args.model, config, dims, fold_qdq=args.fold_qdq)
    # Build only: a CUDA library builds on a machine without a GPU; `aitgen run` loads it.
    # progress=True: a bar on a terminal, a plain line every few seconds in a log.
    compile_model(outputs, target=args.target, workdir=args.workdir, fusion=not args.no_fusion,
                  arch=args.arch, precision=args.precision, precision_policy=args.precision_policy, progress=True,
                  load=False, calibration=calibration, calibration_method=args.calibration_method,
                  winograd=not args.no_winograd)
    meta = json.loads((Path(args.workdir) / "model.json").read_text())
    report = json.loads((Path(args.workdir) / "report.json").read_text())
    print(f"built {args.workdir}: {report['num_ops']} ops -> {report['num_kernels']} kernel calls "
          f"({report['unique_kernels']} unique); cache {report['cache_hits']} hits, {report['cache_misses']} misses; "
          f"{report['build_seconds']:.2f} s")
    print(f"activations {report['activation_bytes']} bytes (lower bound {report['activation_lower_bound_bytes']}, "
          f"naive {report['activation_naive_bytes']}); constants {report['constant_bytes']} bytes")
    if meta.get("arch"):
        print(f"target {meta['target']} {meta['arch']}: {Path(args.workdir) / meta['library']}")
    if "onednn_impls" in report:  # compile_model's kernel check (CPU): which oneDNN kernels the ops got
        impls = sorted(set(report["onednn_impls"].values()))
        print(f"oneDNN: {len(report['onednn_impls'])} kernels ({', '.join(impls) or 'none'})")
        for r in report["reference_kernels"]:
            print(f"warning: op {', '.join(r['ops'])} runs oneDNN's reference implementation {r['impl']} "
                  f"({r['primitive']}, {r['shape']}): expect it orders of magnitude slower")
    for kind, group in (("input ", meta["inputs"]), ("output", meta["outputs"])):
        for name, t in group.items():
            print(f"{kind} {name}: {t['dtype']} max shape {t['max_shape']}")
    return 0


def cmd_run(args) -> int:
    import numpy as np

    from ..runtime.model import Model

    feeds = parse_inputs(args.input)
    if args.mock_device:
        return _mock_run(args, feeds)
    if args.cuda_graph:
        raise UsageError("--cuda-graph goes with --mock-device (a real CUDA run takes the build's setting)")
    out = output_dir(args.out) if args.out else None
    with Model.load(args.workdir, **threads_option(args)) as model:
        outputs = model.run(feeds)
    files = output_files(list(outputs)) if out is not None else {}
    for name, arr in outputs.items():
        line = f"{name}: {arr.dtype} {list(arr.shape)}{_summary(arr)}"
        if out is not None:
            try:
                np.save(out / files[name], arr)
            except OSError as e:
                raise OutputDirError(f"--out {out}: cannot write {files[name]} ({e.strerror or e})") from None
            line += f" -> {os.path.join(args.out, files[name])}"
        print(line)
    return 0


def _mock_run(args, feeds) -> int:
    """`run --mock-device`: the summary line of the mock's checks (outputs hold no results)."""
    import numpy as np

    from ..runtime.model import Model

    if args.out:
        raise UsageError("--out: a mock run computes nothing, so there are no outputs to write")
    with Model.load(args.workdir, mock_device=True, cuda_graph=bool(args.cuda_graph)) as model:
        for name, spec in model.input_specs.items():
            feeds.setdefault(name, np.zeros(spec.max_shape, spec.dtype.np))
        for _ in range(3 if args.cuda_graph else 1):
            model.run(feeds)   # a failed check raises MockDeviceError naming the launch
        run = model.mock_run()
    print(run.summary())
    print(f"operands checked for alignment: {run.operands}, misaligned: 0 required, {run.unpacked} preferred")
    return 0


def _summary(arr) -> str:
    """min/max/mean of a numeric output, for a glance at the numbers."""
    import numpy as np

    if arr.size == 0 or arr.dtype.kind not in "fiub":
        return ""
    a = arr.astype(np.float64)
    return f" min {a.min():.6g} max {a.max():.6g} mean {a.mean():.6g}"
