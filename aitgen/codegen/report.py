"""<workdir>/report.json: what the build did, in numbers (keys listed in DESIGN.md)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional, Sequence

from ..ir.graph import Graph
from ..ir.op import OpKind
from ..memory import MemoryPlan, align, is_view
from .build import atomic_write


def write_report(workdir: Path, graph: Graph, plan: MemoryPlan, *, num_ops: int, calls, unique_kernels: int,
                 build, seconds: float, target: str, passes: Sequence = (), pipeline_input: Optional[dict] = None,
                 precision: Optional[dict] = None) -> dict:
    """`passes`: the PassRecords of the pipeline (and of the stages after it), in order;
    `pipeline_input`: what the graph cost before the first (runner.PipelineRun.input_cost)."""
    report = {
        "target": target,
        "num_ops": num_ops,
        "num_kernels": len(calls),
        "unique_kernels": unique_kernels,
        "activation_bytes": plan.arena_bytes,
        "activation_lower_bound_bytes": plan.lower_bound_bytes,
        "activation_naive_bytes": plan.naive_bytes,
        "constant_bytes": sum(int(t.value.nbytes) for t in graph.tensors if t.is_constant),
        "cache_hits": build.cache_hits,
        "cache_misses": build.cache_misses,
        "build_seconds": round(seconds, 3),
        "compile_seconds": round(build.seconds, 3),
        "passes": [{"name": r.name, "seconds": round(r.seconds, 6), "ops_after": r.ops_after,
                    "kernels": getattr(r, "kernels", None), "activation_bytes": getattr(r, "activation_bytes", None)}
                   for r in passes],
        # The graph as it entered the pipeline: the "before" of the first pass.
        "pipeline_input": pipeline_input,
        # Which ops read and write which dtypes (precision_summary): where precision= narrowed what.
        "precision": precision,
        "kernels": [{"op": c.op, "func": c.spec.func, "template": c.spec.template} for c in calls],
    }
    atomic_write(workdir / "report.json", json.dumps(report, indent=1).encode())
    return report


def precision_summary(graph: Graph, requested: Optional[str], policy: Optional[str]) -> dict:
    """report.json's precision: per op kind (views left out: they move no data), how many ops read
    which float dtypes and write which, as "bf16+f32 -> f32". Every float kernel computes in
    float32 (float64 for float64) whatever it stores: norms, softmax and reductions accumulate in
    float32, GEMM/conv/attention too, so the storage types are what the rounding depends on. The
    int8 ops (precision="int8") read as "u8xi8 -> f32": the activation type they quantise to, int8
    weights, int32 accumulation; `int8` counts them per kind and `float` the ops left in float."""
    by_kind: dict[str, dict[str, int]] = {}
    int8: dict[str, int] = {}
    floats: dict[str, int] = {}
    for op in graph.ops:
        if is_view(op):
            continue
        act = getattr(op.attrs, "act", None) if op.kind in _INT8_KINDS else None
        if act is not None:
            key = f"{act.short}x{op.inputs[1].dtype.short} -> {op.outputs[0].dtype.short}"
            int8[op.kind.value] = int8.get(op.kind.value, 0) + 1
        else:
            # the float types read; an op reading none (a max pool over uint8) shows what it reads
            reads = (sorted({t.dtype.short for t in op.inputs if t.dtype.is_float})
                     or sorted({t.dtype.short for t in op.inputs}))
            writes = sorted({t.dtype.short for t in op.outputs})
            key = f"{'+'.join(reads) or '-'} -> {'+'.join(writes)}"
            if any(t.dtype.is_float for t in op.outputs):
                floats[op.kind.value] = floats.get(op.kind.value, 0) + 1
        row = by_kind.setdefault(op.kind.value, {})
        row[key] = row.get(key, 0) + 1
    out = {"requested": requested, "policy": policy, "accumulate": "float32",
           "by_kind": dict(sorted(by_kind.items()))}
    if int8:
        out.update(accumulate="int32 (int8 ops), float32 (the rest)", int8=dict(sorted(int8.items())),
                   float=dict(sorted(floats.items())))
    return out


_INT8_KINDS = (OpKind.QGEMM, OpKind.QCONV2D)


# -- graph.json: what `aitgen inspect DIR` draws -------------------------------------------------

def fused_kinds(attrs) -> Optional[list[str]]:
    """The op kinds a fused op absorbed, found generically in its attrs: any field holding an
    expression DAG (an object with `kinds()`, or with an `.expr` that has one, as an epilogue
    does) or a list of kinds. None for an op that fused nothing."""
    if not dataclasses.is_dataclass(attrs):
        return None
    found: list[str] = []
    hit = False
    for f in dataclasses.fields(attrs):
        v = getattr(attrs, f.name)
        for cand in (v, getattr(v, "expr", None)):
            kinds = getattr(cand, "kinds", None)
            if callable(kinds):
                found += [_kind_str(k) for k in kinds()]
                hit = True
                break
        else:
            if f.name in ("absorbed", "fused_kinds", "fused_ops") and isinstance(v, (list, tuple)):
                found += [_kind_str(k) for k in v]
                hit = True
    return found if hit else None


def _kind_str(k) -> str:
    return str(getattr(k, "value", k))


def attribute_calls(graph: Graph, calls) -> tuple[list[list[int]], list[int]]:
    """For each op of graph.ops, the indices of the calls it lowered to; and the calls no op owns
    (copies into graph outputs). Calls come in op order, so one forward scan assigns them: a call
    belongs to the first op, from the current one on, whose result it writes (outputs come first
    in a call's pointers) or whose name labels it."""
    per_op: list[list[int]] = [[] for _ in graph.ops]
    extra: list[int] = []

    def owns(op, call) -> bool:
        if any(p is o for p in call.ptrs[:len(op.outputs)] for o in op.outputs):
            return True
        label = str(call.op)
        return bool(op.name) and (label == op.name or label.startswith(op.name + " ")
                                  or f"'{op.name}'" in label)

    j = 0
    for ci, call in enumerate(calls):
        k = j
        while k < len(graph.ops) and not owns(graph.ops[k], call):
            k += 1
        if k == len(graph.ops):
            extra.append(ci)
        else:
            per_op[k].append(ci)
            j = k
    return per_op, extra


def graph_description(graph: Graph, calls, plan: Optional[MemoryPlan] = None) -> dict:
    """The optimised graph as JSON-able data: ops in schedule order (kind, name, tensors, the
    kernel calls each became, the kinds a fused op absorbed) and the memory plan, if given."""
    from ..ir.printer import format_attrs

    def tensor(t) -> dict:
        d = {"name": t.name, "shape": [str(x) for x in t.shape], "dtype": t.dtype.value,
             "role": t.role.value}
        try:
            d["bytes"] = t.nbytes_upper()
        except Exception:  # noqa: BLE001 - a dim without an upper bound: leave it out
            pass
        return d

    per_op, extra = attribute_calls(graph, calls)

    def call(ci: int) -> dict:
        c = calls[ci]
        return {"index": ci, "func": c.spec.func, "template": c.spec.template, "label": str(c.op)}

    ops = []
    for i, op in enumerate(graph.ops):
        attrs = format_attrs(op.attrs)
        ops.append({"step": i, "name": op.name, "kind": op.kind.value, "view": is_view(op),
                    "inputs": [t.name for t in op.inputs], "outputs": [tensor(t) for t in op.outputs],
                    "attrs": attrs if len(attrs) <= 600 else attrs[:600] + "...",
                    "fused": fused_kinds(op.attrs), "kernels": [call(ci) for ci in per_op[i]]})
    step = {id(op): i for i, op in enumerate(graph.ops)}
    memory = None
    if plan is not None:
        in_place = {id(to): frm.name for _, frm, to in plan.in_place}
        rows = []
        for t, off in plan.offsets.items():
            first = step.get(id(t.producer), 0)
            last = max([step[id(u)] for u in t.users if id(u) in step] + [first])
            row = {"name": t.name, "offset": off, "size": align(t.nbytes_upper(), plan.alignment), "first": first,
                   "last": last}
            if t.producer is not None and is_view(t.producer):
                row["view_of"] = plan.aliases[t].name if t in plan.aliases else t.producer.inputs[0].name
            if id(t) in in_place:
                row["in_place_over"] = in_place[id(t)]
            rows.append(row)
        rows.sort(key=lambda r: (r["first"], r["offset"]))
        memory = {"arena_bytes": plan.arena_bytes, "lower_bound_bytes": plan.lower_bound_bytes,
                  "naive_bytes": plan.naive_bytes, "strategy": plan.strategy, "tensors": rows}
    return {"name": graph.name, "num_steps": len(graph.ops),
            "inputs": [tensor(t) for t in graph.inputs],
            "constants": [tensor(t) for t in graph.constants],
            "outputs": {k: t.name for k, t in graph.outputs.items()},
            "ops": ops, "extra_calls": [call(ci) for ci in extra], "memory": memory}


def write_graph_json(workdir: Path, graph: Graph, calls, plan: MemoryPlan) -> dict:
    desc = graph_description(graph, calls, plan)
    atomic_write(workdir / "graph.json", json.dumps(desc, indent=1).encode())
    return desc
