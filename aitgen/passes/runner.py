"""Runs an ordered list of passes: timing, op counts, verification, dumps, and errors that name the pass.

Every pass has one signature, `def name(graph: Graph, opts: CompileOptions) -> Graph`. A pass may
rewrite the graph in place and return it, or return a new one; the runner only follows the result.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Optional, Sequence

from ..errors import PassError
from ..ir.graph import Graph
from ..ir.verify import verify
from ..options import CompileOptions

PassFn = Callable[[Graph, CompileOptions], Graph]


@dataclasses.dataclass(frozen=True)
class PassRecord:
    """One pass as it ran: report.json's `passes` entries are made from these."""
    name: str
    seconds: float
    ops_after: int
    # What the graph costs after the pass, before any lowering: ops that launch a kernel (views
    # launch nothing) and the naive activation bytes (every intermediate at its upper bound, no
    # reuse). `aitgen inspect` prints them pass by pass, so a fusion shows up as a drop.
    kernels: Optional[int] = None
    activation_bytes: Optional[int] = None


def graph_cost(graph: Graph) -> tuple[int, int]:
    """(ops that launch, naive bytes of the intermediates) of a graph as it stands."""
    from ..ops.registry import Category, get_opdef
    outs = {id(t) for t in graph.outputs.values()}
    kernels = nbytes = 0
    for op in graph.ops:
        try:
            view = get_opdef(op.kind).category is Category.VIEW
        except Exception:  # noqa: BLE001 - a kind without a definition is counted as a launch
            view = False
        if view:
            continue  # shares its input's bytes and launches nothing
        kernels += 1
        for t in op.outputs:
            if id(t) not in outs:
                try:
                    nbytes += t.nbytes_upper()
                except Exception:  # noqa: BLE001 - a shape a later pass resolves: count nothing
                    pass
    return kernels, nbytes


@dataclasses.dataclass
class PipelineRun:
    """What run_passes returns: the final graph, one record per pass, and what the graph cost as
    it came in (the "before" column of `aitgen inspect`'s per-pass table and report.json's
    pipeline_input: ops, kernels, activation_bytes)."""
    graph: Graph
    records: list[PassRecord]
    input_cost: dict[str, int]


def pass_name(fn: PassFn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def run_passes(graph: Graph, opts: CompileOptions, pipeline: Sequence[PassFn]) -> PipelineRun:
    """Run `pipeline` over `graph`: the final graph, a PassRecord per pass, and what the graph cost
    before the first pass (aitgen.passes.run_pipeline / run_passes default it to PIPELINE).

    Raises PassError naming the failing pass and every pass that ran before it, with the
    original exception chained, when a pass raises, returns something other than a Graph, or
    (with opts.verify) leaves a graph that aitgen.ir.verify rejects.
    """
    passes = list(pipeline)
    dump_dir = opts.dump_passes
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        _dump(dump_dir, "00-input.txt", graph)
    if opts.verify:
        try:
            verify(graph)
        except Exception as e:
            # Blaming the first pass for a graph that arrived broken would send the reader astray.
            raise PassError(f"the input graph fails verification before any pass ran: {e}") from e

    records: list[PassRecord] = []
    kernels, nbytes = graph_cost(graph)
    # The "before" column of the per-pass table: what the graph cost as it came in.
    start_cost = {"ops": len(graph.ops), "kernels": kernels, "activation_bytes": nbytes}
    for index, fn in enumerate(passes, start=1):
        name = pass_name(fn)
        done = [r.name for r in records]
        start = time.perf_counter()
        try:
            result = fn(graph, opts)
        except Exception as e:
            raise PassError(_message(name, index, done, f"raised {type(e).__name__}: {e}")) from e
        seconds = time.perf_counter() - start
        if not isinstance(result, Graph):
            raise PassError(_message(name, index, done, f"returned {type(result).__name__}, not a Graph"))
        graph = result
        if opts.verify:
            try:
                verify(graph)
            except Exception as e:
                if dump_dir:  # the broken graph is what the reader needs to see
                    _dump(dump_dir, f"{index:02d}-{name}.FAILED.txt", graph)
                raise PassError(_message(name, index, done, f"left a graph that fails verification: {e}")) from e
        records.append(PassRecord(name, seconds, len(graph.ops), *graph_cost(graph)))
        if dump_dir:
            _dump(dump_dir, f"{index:02d}-{name}.txt", graph)
    return PipelineRun(graph, records, start_cost)


def _message(name: str, index: int, done: list[str], what: str) -> str:
    before = ", ".join(done) if done else "none"
    return f"pass '{name}' (#{index}) {what}; passes run before it: [{before}]"


def _dump(folder: str, filename: str, graph: Graph) -> None:
    with open(os.path.join(folder, filename), "w", encoding="utf-8") as f:
        f.write(str(graph))
