"""`aitgen` command line. Sub-commands arrive with the issues that build them; today: inspect."""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Optional, Sequence

from .errors import AitgenError


def load_outputs(spec: str):
    """`path/to/module.py:function` (or `zoo:NAME`) -> the outputs the function returns."""
    if spec.startswith("zoo:"):
        from . import models
        _, outputs = models.get(spec[4:])
        return outputs
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise SystemExit(f"aitgen: expected module.py:function or zoo:NAME, got {spec!r}")
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


def cmd_inspect(args) -> int:
    from .ir.graph import Graph
    from .options import CompileOptions
    from .passes import run_pipeline

    outputs = load_outputs(args.target)
    graph = Graph.from_outputs(outputs)
    before = graph.op_counts()
    opts = CompileOptions(verify=args.verify, dump_passes=args.dump_passes)
    graph = run_pipeline(graph, opts)
    if not args.summary:
        print(graph)
    after = graph.op_counts()
    print(f"# ops before passes: {sum(before.values())}, after: {sum(after.values())}")
    width = max((len(k) for k in set(before) | set(after)), default=4)
    print(f"# {'kind':<{width}}  before  after")
    for k in sorted(set(before) | set(after)):
        print(f"# {k:<{width}}  {before.get(k, 0):>6}  {after.get(k, 0):>5}")
    print("# passes: " + ", ".join(f"{r.name} {r.seconds * 1e3:.1f} ms -> {r.ops_after} ops"
                                   for r in graph.annotations.get("pass_records", [])))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aitgen", description="aitgen: a deep-learning inference compiler")
    sub = p.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="print a model's graph after the pass pipeline, with op counts")
    ins.add_argument("target", help="module.py:function (returning the outputs dict) or zoo:NAME")
    ins.add_argument("--summary", action="store_true", help="op counts only, no graph text")
    ins.add_argument("--verify", action="store_true", help="verify the IR after every pass")
    ins.add_argument("--dump-passes", metavar="DIR", help="write NN-<pass>.txt after every pass")
    ins.set_defaults(func=cmd_inspect)
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
