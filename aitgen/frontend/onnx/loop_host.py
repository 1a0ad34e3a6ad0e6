"""ONNX Loop as one LOOP op (aitgen/ops/loop.py): the body converted once, into a graph of its own.

ops_loop.py sends a Loop here when unrolling is impossible or wasteful: a trip count or condition
known only at run time, or a count above its unrolling cap. The body is converted with fresh
placeholder Tensors as its inputs, then cut at the tensors that existed before the conversion
(outer-scope values): each becomes a captured input of the op, read by the body through a
placeholder of its own. The body's constants stay in the body (its pass pipeline folds them),
and codegen/loop_body.py lifts what remains into the outer graph at build time.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...errors import UnsupportedOpError
from ...ir.dtype import DType
from ...ir.graph import Graph
from ...ir.tensor import Tensor, constant
from .registry import Folded, NodeContext

# Iterations a loop with scan outputs may run when the count is known only at run time: each scan
# output's buffer holds this many slices. Without scan outputs nothing is sized by the count, and
# the bound only stops a loop whose condition never turns false.
SCAN_MAX_TRIPS = 4096
MAX_TRIPS = 1 << 31


def _tensor(ctx: NodeContext, v, what: str) -> Tensor:
    if isinstance(v, Tensor):
        return v
    arr = v.value if isinstance(v, Folded) else v
    if arr is None or getattr(arr, "dtype", object) == object:
        raise ctx.unsupported(f"{what} is not a tensor aitgen computes (a sequence, optional or shape value)")
    return constant(arr)


def _scalar(ctx: NodeContext, v, dtype: DType, what: str) -> Tensor:
    t = _tensor(ctx, v, what)
    if t.dtype != dtype or any(d != 1 for d in t.shape):
        raise ctx.malformed(f"{what} must be one {dtype}, got {t.dtype}{[str(d) for d in t.shape]}")
    return ops.reshape(t, []) if t.shape else t


def _cut(outs: list[Tensor], inner: list[Tensor], outer: set[int]) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Cut the body's DAG at outer-scope tensors: (outputs, the outer tensors it reads, their
    placeholders). Constants stay in the body."""
    inner_ids = {id(t) for t in inner}
    captured: dict[int, tuple[Tensor, Tensor]] = {}
    seen: set[int] = set()
    body_ops = []
    stack = list(outs)
    while stack:
        t = stack.pop()
        if id(t) in inner_ids or t.is_constant:
            continue
        if id(t) in outer or t.producer is None:
            if id(t) not in captured:
                captured[id(t)] = (t, Tensor(t.shape, t.dtype, name=f"captured_{len(captured)}"))
            continue
        if id(t.producer) in seen:
            continue
        seen.add(id(t.producer))
        body_ops.append(t.producer)
        stack.extend(t.producer.inputs)
    for op in body_ops:
        for x in list(op.inputs):
            if id(x) in captured:
                op.replace_input(x, captured[id(x)][1])
    outs = [captured[id(t)][1] if id(t) in captured else t for t in outs]
    return outs, [c[0] for c in captured.values()], [c[1] for c in captured.values()]


def _check_body(ctx: NodeContext, body: Graph) -> None:
    for t in body.tensors:
        for d in t.shape:
            if any(v.produced for v in d.vars()):
                raise ctx.unsupported(f"the body binds sizes during the run ('{t.name}': {[str(x) for x in t.shape]})")
    if any(op.kind.value == "loop" for op in body.ops):
        raise ctx.unsupported("a loop inside a loop body runs only unrolled")


def host_loop(ctx: NodeContext, body_proto, n_carried: int, n_scan: int, static_trips: Optional[int]) -> list:
    """The Loop node as one LOOP op; UnsupportedOpError when its body cannot run as one (a
    carried value whose shape changes, a value that is not a tensor)."""
    m = None
    if ctx.has_input(0):
        m = _scalar(ctx, ctx.value(0), DType.int64, "M")
    cond = _scalar(ctx, ctx.value(1), DType.bool, "cond") if ctx.has_input(1) else None
    inits = [_tensor(ctx, ctx.value(2 + k), f"loop-carried value {k}") for k in range(n_carried)]
    outer = {id(t) for t in ctx.scope_tensors()} | {id(t) for t in inits}
    if m is not None:
        outer.add(id(m))
    if cond is not None:
        outer.add(id(cond))
    it = Tensor([], DType.int64, name="iteration")
    c = Tensor([], DType.bool, name="cond")
    carried = [Tensor(t.shape, t.dtype, name=f"carried_{k}") for k, t in enumerate(inits)]
    res = ctx.call(body_proto, [it, c, *carried])
    outs = [_tensor(ctx, v, f"body output {k}") for k, v in enumerate(res)]
    if outs[0].dtype != DType.bool or outs[0].shape and any(d != 1 for d in outs[0].shape):
        raise ctx.malformed(f"the body's condition must be one bool, got {outs[0].dtype}")
    if outs[0].shape:
        outs[0] = ops.reshape(outs[0], [])
    outs, captured, placeholders = _cut(outs, [it, c, *carried], outer)
    names = ["cond"] + [f"carried_{k}" for k in range(n_carried)] + [f"scan_{k}" for k in range(n_scan)]
    body = Graph(dict(zip(names, outs)), [it, c, *carried, *placeholders], name="loop_body")
    if static_trips is not None:
        max_trips = static_trips
    else:
        max_trips = SCAN_MAX_TRIPS if n_scan else MAX_TRIPS
    # Every run makes exactly M iterations when the condition starts true and the body passes it
    # on unchanged (or gives a constant true): the scan outputs then have a static length.
    cond_in_true = cond is None or (cond.is_constant and bool(cond.value))
    stays = outs[0] is c or (outs[0].is_constant and bool(outs[0].value))
    exact = static_trips if cond_in_true and stays else None
    _check_body(ctx, body)
    try:
        return ops.loop(body, m, cond, inits, captured, n_scan, max_trips, exact, name=ctx.name)
    except UnsupportedOpError as e:
        raise ctx.unsupported(str(e)) from None


def _to_front(x: Tensor, ax: int) -> Tensor:
    return x if ax == 0 else ops.permute(x, [ax] + [k for k in range(x.ndim) if k != ax])


def host_scan(ctx: NodeContext, body_proto, states: list, xs: list, in_axes, in_dirs, out_axes, out_dirs) -> list:
    """Scan (opset 9 semantics) as one LOOP op: the scan inputs, moved to axis 0 where needed, are
    read in place slice by slice; the count is their length (a Dim: static or an input's IntVar).
    UnsupportedOpError when the body cannot run as one graph."""
    inits = [_tensor(ctx, v, f"state {k}") for k, v in enumerate(states)]
    xs = [_to_front(_tensor(ctx, x, f"scan input {j}"), ax) for j, (x, ax) in enumerate(zip(xs, in_axes))]
    count = xs[0].shape[0]
    outer = {id(t) for t in ctx.scope_tensors()} | {id(t) for t in inits} | {id(t) for t in xs}
    it = Tensor([], DType.int64, name="iteration")
    c = Tensor([], DType.bool, name="cond")
    carried = [Tensor(t.shape, t.dtype, name=f"carried_{k}") for k, t in enumerate(inits)]
    slices = [Tensor(x.shape[1:], x.dtype, name=f"slice_{j}") for j, x in enumerate(xs)]
    res = ctx.call(body_proto, [*carried, *slices])
    outs = [constant(np.array(True))] + [_tensor(ctx, v, f"body output {k}") for k, v in enumerate(res)]
    outs, captured, placeholders = _cut(outs, [it, c, *carried, *slices], outer)
    n_out = len(outs) - 1 - len(inits)
    names = ["cond"] + [f"carried_{k}" for k in range(len(inits))] + [f"scan_{k}" for k in range(n_out)]
    body = Graph(dict(zip(names, outs)), [it, c, *carried, *slices, *placeholders], name="scan_body")
    _check_body(ctx, body)
    try:
        res = ops.loop(body, None, None, inits, captured, n_out, count.upper, None, name=ctx.name, xs=xs,
                       scan_in_reverse=in_dirs, scan_out_reverse=out_dirs, count=count)
    except UnsupportedOpError as e:
        raise ctx.unsupported(str(e)) from None
    finals, stacked = res[:len(inits)], res[len(inits):]
    for k, (t, ax) in enumerate(zip(stacked, out_axes)):
        ax %= t.ndim
        if ax:  # stacked along axis 0: the slices' axes move down past the scan axis
            perm = list(range(1, t.ndim))
            perm.insert(ax, 0)
            stacked[k] = ops.permute(t, perm)
    return [*finals, *stacked]
