"""The model's run sequence as template parameters: storage of every tensor (input, output,
constant or arena offset), the input-shape checks that bind the IntVars, the kernel calls, and the
output shapes. backends/<b>/templates/model<suffix>.j2 renders it (each includes the common
backends/common/templates/run_sequence.inc.j2)."""
from __future__ import annotations

from typing import Any

from ..errors import LimitError, ShapeError
from ..ir.dims import MAX_SIZE, IntVar
from ..ir.graph import Graph
from ..ir.tensor import Tensor
from ..memory import MemoryPlan, align
from .cexpr import CODE, dim_expr
from .lower import OutputRef
from .bounds import link_bounds
from .spec import VARS_PTR, BoundRef, BoundSlot, KernelCall, VarSlot
from .streams import schedule

MAX_RANK = 8  # AIT_MAX_RANK in backends/common/include/aitgen/runtime.h


def user_name(graph: Graph, t: Tensor) -> str:
    """The name the user gave t, before name_graph made it a C identifier."""
    return graph.annotations.get("renamed", {}).get(t.name, t.name)


def bind_vars(graph: Graph) -> tuple[dict[IntVar, int], list[dict[str, Any]]]:
    """Index the IntVars by first appearance in the inputs and write the checks that bind them."""
    index: dict[IntVar, int] = {}
    checks: list[dict[str, Any]] = []
    derived = []
    for i, t in enumerate(graph.inputs):
        for axis, d in enumerate(t.shape):
            # The template names the input through its table entry (the user's name), not t.name.
            base = {"input": i, "axis": axis}
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
        what = f"dim {base['axis']} of input '{user_name(graph, graph.inputs[base['input']])}'"
        checks.append({**base, "kind": "derived", "expr": dim_expr(d, index, what), "text": str(d)})
    for t in graph.tensors:
        for d in t.shape:
            for v in d.vars():
                if v not in index and v.produced:
                    # A kernel binds it during the run; until then it holds its upper bound, so the
                    # output shapes asked before a run are the buffers' (Model.run allocates those).
                    index[v] = len(index)
                    checks.append({"kind": "produced", "var": index[v], "ub": v.ub})
                if v not in index:
                    raise ShapeError(f"dimension '{v.name}' of tensor '{t.name}' is not given by any "
                                     "graph input, so it cannot be known at run time")
    return index, checks


def check_limits(graph: Graph, plan: MemoryPlan, constants: dict[int, dict[str, Any]]) -> None:
    """LimitError unless every size and offset written into the program is at most MAX_SIZE.

    Python's ints never wrap, so this is where a size that C++ would hold in an int64 is checked:
    a tensor's bytes at the upper bounds of its dims, each arena slot's end, the arena, and the
    constants' place in the weights file. Tensors first, so the error names the one at fault
    rather than the arena it would overflow.
    """
    def refuse(what: str, n: int) -> None:
        raise LimitError(f"{what} needs {n} bytes, past the {MAX_SIZE} (2**62 - 1) that generated code "
                         "can address in int64 arithmetic; lower the upper bounds of its dims")

    for t in graph.tensors:
        n = t.nbytes_upper()
        if n > MAX_SIZE:
            refuse(f"tensor '{user_name(graph, t)}' ({t.dtype.short}{[str(d) for d in t.shape]})", n)
    for t, off in plan.offsets.items():
        end = off + align(t.nbytes_upper(), plan.alignment)
        if end > MAX_SIZE:
            refuse(f"tensor '{user_name(graph, t)}' at arena offset {off}", end)
    if plan.arena_bytes > MAX_SIZE:
        refuse("the activation arena", plan.arena_bytes)
    for c in constants.values():
        if c["offset"] + c["nbytes"] > MAX_SIZE:
            refuse(f"constant '{c['name']}' at weights offset {c['offset']}", c["offset"] + c["nbytes"])


def build_program(graph: Graph, plan: MemoryPlan, calls: list[KernelCall], constants: dict[int, dict[str, Any]],
                  weights_header_bytes: int, streams: int = 1, drop_wait: bool = False) -> dict[str, Any]:
    """Every user-given name goes into the result as the user wrote it; the templates escape it
    (`| cstr`), so nothing here quotes or escapes. `streams` > 1: each call gets a stream and the
    events that order it (codegen/streams.py); `drop_wait` plants a missing one (tests)."""
    check_limits(graph, plan, constants)
    # Bound slots (codegen/bounds.py): doubles after the arena's tensors, one per linked producer.
    slots_at = align(plan.arena_bytes, 64)
    arena_bytes = slots_at + 8 * link_bounds(calls) if any(
        isinstance(t, BoundRef) for c in calls for t in c.ptrs) else plan.arena_bytes
    if arena_bytes > MAX_SIZE:  # check_limits saw the tensors' part only
        raise LimitError(f"the activation arena and its bound slots need {arena_bytes} bytes, past the {MAX_SIZE} "
                         "(2**62 - 1) that generated code can address in int64 arithmetic; lower the upper bounds "
                         "of the dims")
    var_index, checks = bind_vars(graph)
    for c in calls:  # a size a kernel binds that no kept tensor has (an unused Split part): a slot still
        for d in c.dims:
            if isinstance(d, VarSlot) and d.var not in var_index:
                var_index[d.var] = len(var_index)
                checks.append({"kind": "produced", "var": var_index[d.var], "ub": d.var.ub})
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
        if t is None or isinstance(t, BoundRef):  # an unlinked bound slot
            return "nullptr"
        if isinstance(t, BoundSlot):
            return f"ctx->arena + {slots_at + 8 * t.index}"
        if isinstance(t, str) and t == VARS_PTR:
            return t
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

    def info(t: Tensor, name: str, what: str) -> dict[str, Any]:
        return {"name": name, "dtype": CODE[t.dtype], "rank": len(t.shape),
                "max_shape": [_fits(d.upper, f"{what}: the upper bound of dim {k}") for k, d in enumerate(t.shape)]}

    def span(t, written: bool) -> tuple:
        """(buffer, first byte, end byte, written) of a call's operand, for the stream scheduler."""
        if t is None or isinstance(t, BoundRef):
            return ("nullptr", 0, 0, False)
        if isinstance(t, BoundSlot):
            return ("arena", slots_at + 8 * t.index, slots_at + 8 * t.index + 8, written)
        tensor = graph.outputs[t.name] if isinstance(t, OutputRef) else t
        if not isinstance(t, OutputRef) and t in plan.offsets:
            return ("arena", plan.offsets[t], plan.offsets[t] + tensor.nbytes_upper(), written)
        return (ptr(t).split("+")[0].strip(), 0, MAX_SIZE, written)   # a user buffer, whole

    sched = None
    # Sizes bound during the run are read when a later call is made: calls run in order then.
    produced = any(c["kind"] == "produced" for c in checks)
    if streams > 1 and not produced:
        sched = schedule([[span(t, j in set(c.writes or [0])) for j, t in enumerate(c.ptrs)] for c in calls],
                         streams, drop_wait=drop_wait)
        if sched.num_streams == 1:   # a chain: nothing to run at once, so no stream code at all
            sched = None
    seen_funcs: list[str] = []
    rendered_calls = []
    for k, c in enumerate(calls):
        if c.spec.func not in seen_funcs:
            seen_funcs.append(c.spec.func)
        what = f"a size argument of the kernel for {c.op!r}"
        rendered_calls.append({"func": c.spec.func, "comment": c.op, "ptrs": [ptr(t) for t in c.ptrs],
                               "dims": [d if isinstance(d, str) else str(var_index[d.var]) if isinstance(d, VarSlot)
                                        else dim_expr(d, var_index, what) for d in c.dims],
                               "sched": None if sched is None else {"stream": sched.stream[k],
                                                                    "waits": sched.waits[k],
                                                                    "record": sched.record[k]}})
    outputs = []
    for j, (name, t) in enumerate(graph.outputs.items()):
        o = info(t, name, f"output '{name}'")
        o["shape"] = [{"slot": j * MAX_RANK + k, "expr": dim_expr(d, var_index, f"dim {k} of output '{name}'")}
                      for k, d in enumerate(t.shape)]
        outputs.append(o)
    inputs = []
    for t in graph.inputs:
        name = user_name(graph, t)
        inputs.append(info(t, name, f"input '{name}'"))
    return {
        "model_name": graph.name,
        "kernel_funcs": seen_funcs,
        "inputs": inputs,
        "outputs": outputs,
        "constants": sorted(constants.values(), key=lambda c: c["index"]),
        "arena_bytes": arena_bytes,
        "num_vars": len(var_index),
        "weights_header_bytes": weights_header_bytes,
        "checks": checks,
        "calls": rendered_calls,
        "streams": {"count": sched.num_streams, "events": sched.num_events} if sched is not None else None,
    }


def _fits(n: int, what: str) -> int:
    if not -MAX_SIZE <= n <= MAX_SIZE:
        raise LimitError(f"{what} is {n}, past the {MAX_SIZE} (2**62 - 1) that generated code holds in an int64")
    return n
