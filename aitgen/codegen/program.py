"""The model's run sequence as template parameters: storage of every tensor (input, output,
constant or arena offset), the input-shape checks that bind the IntVars, the kernel calls, and the
output shapes. backends/<b>/templates/model<suffix>.j2 renders it (each includes the common
backends/common/templates/run_sequence.inc.j2)."""
from __future__ import annotations

import json
from typing import Any

from ..errors import ShapeError
from ..ir.dims import IntVar
from ..ir.graph import Graph
from ..ir.tensor import Tensor
from ..passes.memory_planning import MemoryPlan
from .cexpr import CODE, dim_expr
from .lower import OutputRef
from .spec import KernelCall

MAX_RANK = 8  # AIT_MAX_RANK in backends/common/include/aitgen/runtime.h


def bind_vars(graph: Graph) -> tuple[dict[IntVar, int], list[dict[str, Any]]]:
    """Index the IntVars by first appearance in the inputs and write the checks that bind them."""
    index: dict[IntVar, int] = {}
    checks: list[dict[str, Any]] = []
    derived = []
    for i, t in enumerate(graph.inputs):
        for axis, d in enumerate(t.shape):
            base = {"input": i, "axis": axis, "name": t.name}
            if d.is_static:
                checks.append({**base, "kind": "static", "value": d.value})
            elif isinstance(d, IntVar):
                if d in index:
                    checks.append({**base, "kind": "same", "var": index[d], "var_name": d.name})
                else:
                    index[d] = len(index)
                    checks.append({**base, "kind": "bind", "var": index[d], "var_name": d.name,
                                   "lb": d.lb, "ub": d.ub})
            else:
                derived.append((base, d))
    for base, d in derived:  # 2*n and the like: checked once every IntVar is bound
        checks.append({**base, "kind": "derived", "expr": dim_expr(d, index), "text": str(d)})
    for t in graph.tensors:
        for d in t.shape:
            for v in d.vars():
                if v not in index:
                    raise ShapeError(f"dimension '{v.name}' of tensor '{t.name}' is not given by any "
                                     "graph input, so it cannot be known at run time")
    return index, checks


def build_program(graph: Graph, calls: list[KernelCall], constants: dict[int, dict[str, Any]],
                  weights_header_bytes: int) -> dict[str, Any]:
    plan: MemoryPlan = graph.annotations["memory_plan"]
    var_index, checks = bind_vars(graph)
    in_idx = {id(t): i for i, t in enumerate(graph.inputs)}
    out_names = list(graph.outputs)
    out_idx: dict[int, int] = {}
    for j, t in enumerate(graph.outputs.values()):
        # Only computed tensors live in an output buffer: an output that is a graph input or a
        # constant is a copy of it (lower_graph adds it), and readers keep reading the source.
        if t.producer is not None:
            out_idx.setdefault(id(t), j)
    const_idx = {tid: c["index"] for tid, c in constants.items()}

    def ptr(t) -> str:
        if isinstance(t, OutputRef):
            return f"ctx->outputs[{out_names.index(t.name)}]"
        if id(t) in out_idx:
            return f"ctx->outputs[{out_idx[id(t)]}]"
        if t in plan.offsets:
            return f"ctx->arena + {plan.offsets[t]}"
        ext: Tensor = plan.external(t)
        if id(ext) in in_idx:
            return f"const_cast<void*>(ctx->inputs[{in_idx[id(ext)]}])"
        if id(ext) in const_idx:
            return f"ctx->constants[{const_idx[id(ext)]}]"
        if id(ext) in out_idx:
            return f"ctx->outputs[{out_idx[id(ext)]}]"
        raise ValueError(f"tensor '{t.name}' has no storage in the memory plan")

    renamed = graph.annotations.get("renamed", {})  # name_graph's C-safe name -> the user's name

    def info(t: Tensor, name: str) -> dict[str, Any]:
        name = renamed.get(name, name) if t.is_input else name
        # json.dumps escapes quotes and backslashes the way a C string literal needs
        return {"name": json.dumps(name)[1:-1], "dtype": CODE[t.dtype], "rank": len(t.shape),
                "max_shape": [d.upper for d in t.shape]}

    seen_funcs: list[str] = []
    rendered_calls = []
    for c in calls:
        if c.spec.func not in seen_funcs:
            seen_funcs.append(c.spec.func)
        rendered_calls.append({"func": c.spec.func, "comment": c.op.replace("\n", " "),
                               "ptrs": [ptr(t) for t in c.ptrs],
                               "dims": [d if isinstance(d, str) else dim_expr(d, var_index) for d in c.dims]})
    outputs = []
    for j, (name, t) in enumerate(graph.outputs.items()):
        o = info(t, name)
        o["shape"] = [{"slot": j * MAX_RANK + k, "expr": dim_expr(d, var_index)} for k, d in enumerate(t.shape)]
        outputs.append(o)
    return {
        "model_name": graph.name,
        "kernel_funcs": seen_funcs,
        "inputs": [info(t, t.name) for t in graph.inputs],
        "outputs": outputs,
        "constants": sorted(constants.values(), key=lambda c: c["index"]),
        "arena_bytes": plan.arena_bytes,
        "num_vars": len(var_index),
        "weights_header_bytes": weights_header_bytes,
        "checks": checks,
        "calls": rendered_calls,
    }
