"""LOOP: ONNX Loop as one op over a body graph, run as a host-side loop by the CPU backend.

The body is a Graph of its own (attrs.body) whose inputs are, in order: the iteration number
(int64 scalar), the condition (bool scalar), the loop-carried values, the slices of the scan
inputs (Scan: one slice of each along axis 0 per iteration), then the captured values
(outer tensors the body reads; after codegen/loop_body.py, also the body's constants, lifted so
the outer graph's weights file holds them). Its outputs, in order: the condition, the carried
values (the shapes and dtypes of the carried inputs: loop-invariant shapes only), the scan outputs.

The op's inputs: [trip count M (int64 scalar), if given][condition (bool scalar), if given],
the carried initial values, the scan inputs, the captured values. Its outputs: the carried values after the last
iteration, the scan outputs stacked along a new axis 0 of length `attrs.trips` (a produced IntVar
bound by the run when the count is known only then, else static), and, once the body is compiled
(attrs.workspace > 0), a uint8 workspace that holds the body's arena; nothing reads it.

ONNX semantics: iteration i runs while i < M (when M is given) and the condition holds; a run
that would reach iteration attrs.max_trips is refused (RuntimeInputError naming the node), since
the scan outputs' buffers hold that many slices.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import RuntimeInputError, ShapeError, UnsupportedOpError
from ..ir.dims import Dim, IntImm, evaluate_shape
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .dynamic import produced_var
from .registry import Category, check, make_op, register

__all__ = ["LoopAttrs", "loop"]


@dataclasses.dataclass(frozen=True)
class LoopAttrs:
    body: Graph                      # compared by identity: two loops merge only over one body
    n_carried: int
    n_scan: int
    has_trip: bool
    has_cond: bool
    max_trips: int                   # iterations a run may reach (the scan outputs' leading bound)
    trips: Optional[Dim] = None      # the scan outputs' leading dim (None without scan outputs)
    label: str = ""                  # the node as run-time errors name it
    workspace: int = 0               # bytes of the workspace output (0: not compiled yet, no output)
    plan: Any = dataclasses.field(default=None, compare=False, repr=False)  # the body's MemoryPlan, once compiled
    # Scan (ONNX Scan as a LOOP): inputs sliced along axis 0, slice `it` (or, reversed, count-1-it)
    # given to the body each iteration; outputs stacked in reverse where scan_out_reverse says so;
    # the count is a Dim (the scan length), evaluated by the program like any size.
    n_scan_in: int = 0
    scan_in_reverse: tuple = ()
    scan_out_reverse: tuple = ()
    count: Optional[Dim] = None

    def split(self, inputs: Sequence[Tensor]) -> tuple[Optional[Tensor], Optional[Tensor], list, list, list]:
        """(trip count, condition, carried inits, scan inputs, captured) of the op's inputs."""
        k = 0
        trip = cond = None
        if self.has_trip:
            trip, k = inputs[0], 1
        if self.has_cond:
            cond, k = inputs[k], k + 1
        j = k + self.n_carried
        return (trip, cond, list(inputs[k:j]), list(inputs[j:j + self.n_scan_in]),
                list(inputs[j + self.n_scan_in:]))


def _same_type(a: Tensor, b: Tensor) -> bool:
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)


def _infer_loop(inputs, a: LoopAttrs):
    trip, cond, inits, xs, captured = a.split(inputs)
    body = a.body
    outs = list(body.outputs.values())
    check(len(xs) == a.n_scan_in and len(a.scan_in_reverse) == len(xs) and len(a.scan_out_reverse) in (0, a.n_scan),
          "one direction per scan input and output")
    for j, (x, p) in enumerate(zip(xs, body.inputs[2 + a.n_carried:])):
        check(x.ndim >= 1 and a.count is not None and x.shape[0] == a.count and _same_type(
            Tensor(x.shape[1:], x.dtype), p), f"scan input {j} {x.dtype}{list(x.shape)} does not slice to the "
              f"body's {p.dtype}{list(p.shape)} over {a.count} iterations")
    check(len(body.inputs) == 2 + a.n_carried + len(xs) + len(captured),
          f"the body takes {len(body.inputs)} inputs for {a.n_carried} carried and {len(captured)} captured values")
    check(len(outs) == 1 + a.n_carried + a.n_scan,
          f"the body gives {len(outs)} outputs for {a.n_carried} carried values and {a.n_scan} scan outputs")
    if trip is not None:
        check(trip.dtype == DType.int64 and not trip.shape, "the trip count is an int64 scalar")
    if cond is not None:
        check(cond.dtype == DType.bool and not cond.shape, "the condition is a bool scalar")
    check(body.inputs[0].dtype == DType.int64 and body.inputs[1].dtype == DType.bool and outs[0].dtype == DType.bool,
          "the body takes the iteration number (int64) and condition (bool) and gives a bool condition")
    for k, (x, p, o) in enumerate(zip(inits, body.inputs[2:], outs[1:])):
        check(_same_type(x, p), f"loop-carried value {k} is {x.dtype}{list(x.shape)}, the body takes "
                                f"{p.dtype}{list(p.shape)}")
        check(_same_type(o, p), f"loop-carried value {k} changes from {p.dtype}{list(p.shape)} to "
                                f"{o.dtype}{list(o.shape)} in the body (only loop-invariant shapes run as a loop)")
    for k, (x, p) in enumerate(zip(captured, body.inputs[2 + a.n_carried + len(xs):])):
        check(_same_type(x, p), f"captured value {k} is {x.dtype}{list(x.shape)}, the body takes "
                                f"{p.dtype}{list(p.shape)}")
    check(a.n_scan == 0 or a.trips is not None, "scan outputs need the trips dim")
    res = [(tuple(p.shape), p.dtype) for p in body.inputs[2:2 + a.n_carried]]
    res += [((a.trips, *s.shape), s.dtype) for s in outs[1 + a.n_carried:]]
    if a.workspace:
        res.append(((IntImm(a.workspace),), DType.uint8))
    return res


def _ref_loop(args, a: LoopAttrs, ctx):
    evaluate = ctx.run_graph  # the oracle, which runs the body
    if evaluate is None:
        raise UnsupportedOpError(f"loop '{a.label}': its reference runs the body through the oracle (aitgen.reference)")
    body = a.body
    h = int(a.has_trip) + int(a.has_cond)
    m = int(np.asarray(args[0]).reshape(-1)[0]) if a.has_trip else None
    cond = bool(np.asarray(args[h - 1]).reshape(-1)[0]) if a.has_cond else True
    carried = list(args[h:h + a.n_carried])
    xs = list(args[h + a.n_carried:h + a.n_carried + a.n_scan_in])
    captured = list(args[h + a.n_carried + a.n_scan_in:])
    if a.count is not None:
        m = a.count.evaluate(ctx.env)
    outs = list(body.outputs.values())
    scans: list[list[np.ndarray]] = [[] for _ in range(a.n_scan)]
    it = 0
    while (m is None or it < m) and cond:
        if it >= a.max_trips:
            raise RuntimeInputError(f"{a.label or 'loop'}: the loop would run past its bound of {a.max_trips} "
                                    "iterations")
        slices = [x[m - 1 - it if rev else it] for x, rev in zip(xs, a.scan_in_reverse)]
        # in the body's dtypes: the oracle hands float16 operands over widened to float32
        vals = [np.array(it, np.int64), np.array(cond), *carried, *slices, *captured]
        feeds = {p: np.asarray(v).astype(p.dtype.np, copy=False) for p, v in zip(body.inputs, vals)}
        res = evaluate(body, feeds)
        vals = [res[id(t)] for t in outs]
        cond = bool(np.asarray(vals[0]).reshape(-1)[0])
        carried = [np.asarray(v).astype(t.dtype.np, copy=False) for v, t in zip(vals[1:1 + a.n_carried],
                                                                                  outs[1:1 + a.n_carried])]
        for s, v in zip(scans, vals[1 + a.n_carried:]):
            s.append(np.asarray(v))
        it += 1
    stacked = []
    for k, (s, t) in enumerate(zip(scans, outs[1 + a.n_carried:])):
        if a.scan_out_reverse and a.scan_out_reverse[k]:
            s = s[::-1]
        shape = evaluate_shape(t.shape, ctx.env)
        stacked.append(np.stack(s).astype(t.dtype.np, copy=False) if s else np.zeros((0, *shape), t.dtype.np))
    res = [*carried, *stacked]
    if a.workspace:
        res.append(np.zeros([a.workspace], np.uint8))
    return res


register(OpKind.LOOP, Category.CONTROL, LoopAttrs, _infer_loop, _ref_loop, num_inputs=(0, 1 << 30))


def loop(body: Graph, trip: Optional[Tensor], cond: Optional[Tensor], inits: Sequence[Tensor],
         captured: Sequence[Tensor], n_scan: int, max_trips: int, static_trips: Optional[int] = None,
         name: Optional[str] = None, xs: Sequence[Tensor] = (), scan_in_reverse: Sequence[bool] = (),
         scan_out_reverse: Sequence[bool] = (), count: Optional[Dim] = None) -> list[Tensor]:
    """A LOOP op over `body` (see the module docstring for its inputs and outputs). `static_trips`:
    the number of iterations every run makes, when the importer knows it (a constant count and a
    condition that stays true): the scan outputs then have that static length, else their length
    is a size the run binds (at most max_trips). `count` (Scan): the number of iterations as a Dim,
    the length of the scan inputs `xs` along axis 0; the scan outputs then have that length."""
    label = name or "loop"
    trips: Optional[Dim] = None
    if n_scan:
        if count is not None:
            trips = count
        elif static_trips is not None:
            trips = IntImm(static_trips)
        else:
            trips = produced_var(f"{label}:trips", max_trips)
    attrs = LoopAttrs(body, len(inits), n_scan, trip is not None, cond is not None, int(max_trips), trips, label,
                      n_scan_in=len(xs), scan_in_reverse=tuple(bool(r) for r in scan_in_reverse),
                      scan_out_reverse=tuple(bool(r) for r in scan_out_reverse), count=count)
    ins = ([trip] if trip is not None else []) + ([cond] if cond is not None else []) + list(inits) + list(xs) \
        + list(captured)
    try:
        return make_op(OpKind.LOOP, ins, attrs, name)
    except ShapeError as e:
        raise UnsupportedOpError(f"loop '{label}': {e}") from None
