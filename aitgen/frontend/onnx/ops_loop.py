"""ONNX Loop and Scan: one LOOP op over the body (loop_host.py), or unrolled at import time.

A Loop whose trip count or condition only the run knows, whose count is above MAX_ITERATIONS,
or that has no count, and a Scan whose length only the run knows or is above MAX_ITERATIONS,
become ONE LOOP op (aitgen/ops/loop.py) that the CPU backend runs as a host-side loop over the
body's compiled kernels: no iteration cap but the scan outputs' bound (loop_host.SCAN_MAX_TRIPS).

The rest unrolls here: each iteration converts the body afresh with its inputs bound to that
iteration's values (the iteration number is an import-time constant, so Slice/Gather on it fold,
and the iterations fuse), and the scan outputs are stacked with concat; capped at MAX_ITERATIONS.

Unrolling also serves a Loop whose body the LOOP op refuses (a carried value whose shape
changes, a body that binds sizes during the run, a loop in a loop body). Loop's condition: known
at import time, it ends the unrolling; computed at run time, the loop-carried values are held with
where() once it turns false. A trip count known only at run time unrolls to RUNTIME_TRIPS
iterations, each active while i < M and the condition holds; inactive ones hold the carried
values. Scan outputs under a run-time count or condition are stacked over all unrolled iterations
and cut to the number that ran, a size the run binds (aitgen/ops/dynamic.py). A run that would
need more than the unrolled iterations is refused (RuntimeInputError naming the node), never
truncated: each result passes through a binding that checks the count.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ... import ops
from ...errors import ImportError_, ShapeError, UnsupportedOpError
from ...ir.dtype import DType
from ...ir.op import OpKind
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import bind_dims, produced_var
from .loop_host import host_loop, host_scan
from .registry import Folded, NodeContext, onnx_op

MAX_ITERATIONS = 256  # iterations one Loop/Scan node may unroll to
RUNTIME_TRIPS = 32    # iterations a Loop whose trip count only the run knows unrolls to


def _as_tensor(ctx: NodeContext, v: Any, what: str) -> Tensor:
    if isinstance(v, Tensor):
        return v
    arr = v.value if isinstance(v, Folded) else v
    if not isinstance(arr, np.ndarray) or arr.dtype == object:
        raise ctx.unsupported(f"{what} is not a tensor aitgen computes (a sequence, optional or shape value)")
    return constant(arr, dtype="float64" if arr.dtype == np.float64 else None)


def _stack(ctx: NodeContext, items: list, axis: int, what: str):
    """Stack per-iteration values along a new axis: a Folded value when all are import-time values."""
    raw = [i.value if isinstance(i, Folded) else i for i in items]
    if all(isinstance(r, np.ndarray) and r.dtype != object for r in raw):
        return Folded(np.stack(raw, axis=axis))
    ts = [_as_tensor(ctx, i, what) for i in items]
    return ops.concat([ops.unsqueeze(t, [axis]) for t in ts], axis)


def _check_count(ctx: NodeContext, n: int, what: str) -> None:
    if n > MAX_ITERATIONS:
        raise ctx.unsupported(f"{what} {n} is over aitgen's unrolling cap of {MAX_ITERATIONS} iterations")


def _scalar_bool(v) -> Optional[bool]:
    """A condition's import-time value, or None when it is computed at run time."""
    arr = v.value if isinstance(v, Folded) else v
    if isinstance(arr, Tensor) and arr.is_constant:
        arr = arr.value
    if isinstance(arr, np.ndarray) and arr.dtype != object:
        return bool(arr.reshape(-1)[0])
    return None


@onnx_op("Loop", min_opset=1)
def _loop(ctx: NodeContext):
    body = ctx.attr("body")
    n_carried = ctx.num_inputs - 2
    n_scan = len(body.output) - 1 - n_carried
    if n_carried < 0 or n_scan < 0 or len(body.input) != n_carried + 2:
        raise ctx.malformed(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs "
                            f"for {max(n_carried, 0)} loop-carried values")
    m_known = ctx.const(0) if ctx.has_input(0) else None
    cond_known = _scalar_bool(ctx.value(1)) if ctx.has_input(1) else True
    static = None if m_known is None else int(m_known.reshape(-1)[0])
    big = static is not None and static > MAX_ITERATIONS
    if cond_known is not False and (big or static is None or cond_known is None):
        try:  # a count or condition only the run knows, or a long loop: one LOOP op over the body
            return host_loop(ctx, body, n_carried, n_scan, static)
        except (UnsupportedOpError, ImportError_, ShapeError):
            if big:
                raise
            # a body that cannot run as one graph (a carried shape that changes) is unrolled
    trips, m_rt = None, None
    if ctx.has_input(0):
        m = ctx.const(0)
        if m is None:
            m_rt = _as_tensor(ctx, ctx.value(0), "the trip count M")
            if m_rt.dtype != DType.int64 or len(m_rt.shape) > 1 or any(d != 1 for d in m_rt.shape):
                raise ctx.malformed(f"M must be one int64, got {m_rt.dtype}{[str(d) for d in m_rt.shape]}")
            m_rt = ops.reshape(m_rt, [])
            trips = RUNTIME_TRIPS
        else:
            trips = int(m.reshape(-1)[0])
            _check_count(ctx, trips, "trip count")
    running: Any = True if not ctx.has_input(1) else ctx.value(1)
    if _scalar_bool(running) is not None:
        running = _scalar_bool(running)
    carried = [ctx.value(2 + k) for k in range(n_carried)]
    scans: list[list] = [[] for _ in range(n_scan)]
    active: list[Tensor] = []  # per unrolled iteration, under a run-time count or condition: it ran
    built: set[int] = set()    # ids of the ops already checked by _gathers_past_end
    i = 0
    while running is not False and (trips is None or i < trips):
        if i >= MAX_ITERATIONS:
            raise ctx.unsupported(f"the condition keeps the loop running past aitgen's unrolling cap of "
                                  f"{MAX_ITERATIONS} iterations")
        if m_rt is not None:  # iteration i runs while i < M (and the condition holds)
            below = ops.greater(m_rt, constant(np.array(i, np.int64)))
            running = below if running is True else ops.logical_and(ops.reshape(running, []), below)
        if not isinstance(running, bool):
            active.append(ops.reshape(running, []))
        cond_in = np.array(running) if isinstance(running, bool) else running
        try:
            res = ctx.call(body, [np.array(i, np.int64), cond_in, *carried])
            past_end = m_rt is not None and _gathers_past_end(res, built)
        except (ShapeError, ImportError_):
            if m_rt is None or not i:
                raise
            past_end = True
        if past_end and i:
            # An iteration that cannot run (it cannot be built, or gathers row i past the end of a
            # table, which would fail the run even while inactive) ends the unrolled loop like one
            # that changes a shape: a run reaching it is refused.
            active.pop()
            break
        cond_out, new, outs = res[0], res[1:1 + n_carried], res[1 + n_carried:]
        if isinstance(running, bool):
            carried = new
        else:  # past the run-time exit the values stay as they were
            c = ops.reshape(running, [])
            if m_rt is not None and i and _reshapes(ctx, new, carried, outs, scans):
                # An iteration that would change a shape (a slice past the end of an input, say)
                # ends the unrolled loop: a run that reaches it is refused, not computed.
                active.pop()
                break
            carried = [_hold(ctx, c, n, o, k) for k, (n, o) in enumerate(zip(new, carried))]
        for k, o in enumerate(outs):
            scans[k].append(o)
        known = _scalar_bool(cond_out)
        if known is not None:
            running = known if isinstance(running, bool) else (running if known else False)
        else:
            cond = _as_tensor(ctx, cond_out, "the body's condition")
            if cond.dtype != DType.bool:
                raise ctx.malformed(f"the body's condition must be bool, got {cond.dtype}")
            running = cond if isinstance(running, bool) else ops.logical_and(running, cond)
        i += 1
    if n_scan and not scans[0]:
        raise ctx.unsupported("the loop runs no iteration, so its scan outputs' shapes are unknown")
    stacked = [_stack(ctx, s, 0, f"scan output {k}") for k, s in enumerate(scans)]
    if not active:
        return [*carried, *stacked]
    still = None  # whether the run would go on past the unrolled iterations
    if m_rt is not None and not isinstance(running, bool):
        still = ops.reshape(running, [])
        if len(active) == i:  # not stopped early: iteration i would still need i < M
            still = ops.logical_and(still, ops.greater(m_rt, constant(np.array(i, np.int64))))
    return _cut(ctx, carried, stacked, active, still, len(active))


def _gathers_past_end(values: list, seen: set[int]) -> bool:
    """Whether the ops behind `values` not seen before hold a gather of a constant index past a
    static axis (the iteration number indexing a table): such an iteration fails every run."""
    from ...ir.graph import topo_order
    bad = False
    for op in topo_order([v for v in values if isinstance(v, Tensor)])[0]:
        if id(op) in seen:
            continue
        seen.add(id(op))
        if op.kind is OpKind.GATHER and op.inputs[1].is_constant:
            n = op.inputs[0].shape[op.attrs.axis]
            idx = np.asarray(op.inputs[1].value)
            bad |= bool(n.is_static and idx.size and ((idx < -n.value) | (idx >= n.value)).any())
    return bad


def _shape(ctx: NodeContext, v) -> tuple:
    return tuple(_as_tensor(ctx, v, "a loop value").shape)


def _reshapes(ctx: NodeContext, new: list, carried: list, outs: list, scans: list[list]) -> bool:
    """Whether this iteration gives a carried value or scan output a shape the earlier ones lack."""
    return (any(_shape(ctx, a) != _shape(ctx, b) for a, b in zip(new, carried))
            or any(s and _shape(ctx, o) != _shape(ctx, s[0]) for o, s in zip(outs, scans)))


def _cut(ctx: NodeContext, carried: list, stacked: list, active: list[Tensor], still, n: int) -> list:
    """Results of a loop unrolled to n iterations under a run-time count or condition: the scan
    outputs cut to the iterations that ran; every result passed through a binding that refuses a run
    needing more than n iterations (`still`: the loop would go on after the last one)."""
    ran = ops.cast(active[0], DType.int64)
    for a in active[1:]:
        ran = ops.add(ran, ops.cast(a, DType.int64))
    if still is not None:
        # n + 1 where the loop would go on: outside the bound n, so the binding refuses the run
        ran = ops.add(ran, ops.cast(still, DType.int64))
    ran = ops.reshape(ran, [1])
    out = []
    for k, v in enumerate([*carried, *stacked]):
        t = _as_tensor(ctx, v, f"loop output {k}")
        count = produced_var(f"{ctx.name}:iterations_{k}", n)
        if k < len(carried):
            t = bind_dims(t, [ran], "values", [count], name=ctx.name)
        else:  # the first `count` entries along the stacked axis, by an iota of that length
            one = bind_dims(constant(np.ones([1], np.int64)), [ran], "values", [count], name=ctx.name)
            t = ops.gather(t, ops.cumsum(ops.expand(one, [count]), 0, exclusive=True), 0)
        out.append(t)
    return out


def _hold(ctx: NodeContext, cond: Tensor, new, old, k: int) -> Tensor:
    a, b = _as_tensor(ctx, new, f"loop-carried value {k}"), _as_tensor(ctx, old, f"loop-carried value {k}")
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        raise ctx.unsupported(f"loop-carried value {k} changes from {b.dtype}{[str(d) for d in b.shape]} to "
                              f"{a.dtype}{[str(d) for d in a.shape]} under a run-time condition")
    return ops.where(cond, a, b)


def _axes(ctx: NodeContext, name: str, n: int, default: int = 0) -> list[int]:
    v = ctx.attr(name, None)
    if v is None:
        return [default] * n
    if len(v) != n:
        raise ctx.malformed(f"{name} has {len(v)} entries for {n} values")
    return [int(a) for a in v]


def _scan_body(ctx: NodeContext, body, states: list, xs: list, in_axes, in_dirs, out_axes, out_dirs) -> list:
    """Scan's iteration (opset 9 semantics) over import-time-length inputs: final states + scan outputs."""
    n_state = len(states)
    lengths = set()
    for j, x in enumerate(xs):
        t = _as_tensor(ctx, x, f"scan input {j}")
        if not t.ndim:
            raise ctx.malformed(f"scan input {j} is a scalar")
        ax = in_axes[j] % t.ndim
        lengths.add(t.shape[ax])
        xs[j], in_axes[j] = t, ax
    if len(lengths) > 1:
        raise ctx.malformed(f"the scan inputs have different lengths {sorted(str(d) for d in lengths)}")
    length = lengths.pop() if lengths else None
    if length is not None and (not length.is_static or length.value > MAX_ITERATIONS):
        # a length only the run knows, or a long scan: one LOOP op that reads the inputs in place
        return host_scan(ctx, body, states, xs, in_axes, in_dirs, out_axes, out_dirs)
    n = length.value if length is not None else 0
    if n == 0:
        raise ctx.unsupported("an empty scan has output shapes aitgen cannot infer")
    per_iter: list[list] = []
    for i in range(n):
        slices = []
        for x, ax, rev in zip(xs, in_axes, in_dirs):
            p = n - 1 - i if rev else i
            slices.append(ops.squeeze(ops.slice(x, [p], [p + 1], [ax]), [ax]))
        res = ctx.call(body, [*states, *slices])
        states, outs = res[:n_state], res[n_state:]
        per_iter.append(outs)
    stacked = []
    for k in range(len(per_iter[0])):
        items = [it[k] for it in per_iter]
        if out_dirs[k]:
            items = items[::-1]
        rank = _as_tensor(ctx, items[0], f"scan output {k}").ndim if not isinstance(items[0], Folded) \
            else items[0].value.ndim
        ax = out_axes[k] % (rank + 1)
        stacked.append(_stack(ctx, items, ax, f"scan output {k}"))
    return [*states, *stacked]


@onnx_op("Scan", min_opset=9)
def _scan(ctx: NodeContext):
    body = ctx.attr("body")
    m = ctx.attr("num_scan_inputs")
    n_state = ctx.num_inputs - m
    n_out = len(body.output) - n_state
    if m < 1 or n_state < 0 or n_out < 0 or len(body.input) != ctx.num_inputs:
        raise ctx.malformed(f"num_scan_inputs {m} does not fit {ctx.num_inputs} inputs and a body of "
                            f"{len(body.input)} inputs, {len(body.output)} outputs")
    states = [ctx.value(k) for k in range(n_state)]
    xs = [ctx.value(n_state + j) for j in range(m)]
    return _scan_body(ctx, body, states, xs, _axes(ctx, "scan_input_axes", m), _axes(ctx, "scan_input_directions", m),
                      _axes(ctx, "scan_output_axes", n_out), _axes(ctx, "scan_output_directions", n_out))


@onnx_op("Scan", min_opset=8)
def _scan8(ctx: NodeContext):
    """Opset 8: a leading batch axis that the body does not see, the scan along axis 1, and an
    optional sequence_lens; unrolled per batch row (the batch must be static)."""
    body = ctx.attr("body")
    m = ctx.attr("num_scan_inputs")
    n_state = ctx.num_inputs - 1 - m
    n_out = len(body.output) - n_state
    if m < 1 or n_state < 0 or n_out < 0 or len(body.input) != n_state + m:
        raise ctx.malformed(f"num_scan_inputs {m} does not fit {ctx.num_inputs} inputs and a body of "
                            f"{len(body.input)} inputs, {len(body.output)} outputs")
    vals = [_as_tensor(ctx, ctx.value(1 + k), f"input {1 + k}") for k in range(n_state + m)]
    batch = vals[0].shape[0]
    if not batch.is_static:
        raise ctx.unsupported(f"the batch {batch} is dynamic; opset-8 Scan is unrolled per batch row")
    length = vals[n_state].shape[1] if vals[n_state].ndim > 1 else None
    if ctx.has_input(0):
        lens = ctx.require_const(0, "sequence_lens")
        if length is None or not length.is_static or (lens != length.value).any():
            raise ctx.unsupported(f"sequence_lens {lens.tolist()} shorter than the scan length: rows of "
                                  "different lengths are not supported")
    dirs = _axes(ctx, "directions", m)
    rows = []
    for b in range(batch.value):
        row = [ops.squeeze(ops.slice(v, [b], [b + 1], [0]), [0]) for v in vals]
        rows.append(_scan_body(ctx, body, row[:n_state], row[n_state:], [0] * m, dirs, [0] * n_out, [0] * n_out))
    return [_stack(ctx, [r[k] for r in rows], 0, f"output {k}") for k in range(n_state + n_out)]
