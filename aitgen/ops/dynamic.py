"""Data-dependent sizes, as TensorRT's output allocators do them: sizes that only the run knows.

A size that depends on values (NonZero's count, a Reshape whose target shape is a run-time
tensor, Range's length, TopK's run-time K) is a *produced* IntVar (`IntVar(..., produced=True)`):
no input shape gives it, its upper bound comes from the input bounds (or, for a size read from a
value, from the importer's `value_bound`), buffers are planned at that bound, and the kernel of
the op that creates it writes its value into the run's dim table. Every later kernel reads its
sizes from that table when it is called, so it runs on the actual dims; the model's output
shapes are evaluated after the run, so `Model.run` returns arrays of the actual shape.

Two op kinds create produced dims:
- BIND_DIMS(x, *values): reads small integer (or, for Range, float) tensors, computes sizes by a
  rule, checks them, binds the produced vars, and copies x into an output of `attrs.shape`.
  Ops that need those sizes consume that output, which orders them after the binding.
- NONZERO(x): the int64 [rank, count] coordinates of x's non-zero elements.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional

import numpy as np

from ..errors import DTypeError, RuntimeInputError, ShapeError
from ..ir.dims import Dim, IntVar, as_dim, prod
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .registry import Category, check, make_op1, register

__all__ = ["BindAttrs", "NonZeroAttrs", "bind_dims", "nonzero", "produced_var", "RULES"]

# How the slots (the sizes) come from the value operands:
#   values  - the value operands' elements in order (TopK's K, Tile's repeats, a fill's shape);
#             known[j], when not None, is an upper limit of slot j (K <= the axis size)
#   reshape - ONNX Reshape's target: 0 copies x's dim (unless allowzero), one -1 takes the rest;
#             known = x's dims, and the product must equal x's element count
#   expand  - ONNX Expand's broadcast of known (x's dims) with the target, right-aligned
#   range   - ONNX Range's length max(ceil((limit - start) / delta), 0) of three scalars
#   reduce  - a reduction over run-time axes (known = x's dims, r of them): kept_j, red_j for each
#             axis j (d_j, 1 when j is kept; 1, d_j when reduced), then, unless keepdims
#             (allowzero carries keepdims), the kept dims in order. x reshaped to
#             [kept_0, red_0, kept_1, red_1, ...] holds its elements in the same order.
#   view    - no values: x's bytes under another shape (known, already bound), checked to fit
#   axis    - one axis a (of known = x's dims): [prod(d[:a]), d[a], prod(d[a+1:])], the view an
#             op along a static middle axis runs on
#   unsqueeze / squeeze - ONNX's output dims for run-time axes (squeezed dims must be 1)
#   split   - the values as sizes that must add up to known[0] (Split's sizes along its axis)
#   slice   - ONNX Slice of x (known = its dims) by the value operands that `operands` names
#             (starts, ends, then axes and steps when given); the output is the slice itself
#   pad     - ONNX Pad of x by the operands "pads"[, "axes"], "value" (x's dtype, the fill of
#             constant mode); `mode` is attrs.operands[-1]'s suffix: ("pads", ..., "value", "mode:edge")
RULES = ("values", "reshape", "expand", "range", "reduce", "view", "axis", "unsqueeze", "squeeze", "split",
         "slice", "pad")


def produced_var(name: str, ub: int) -> IntVar:
    """A size that a kernel binds during the run, at most ub."""
    return IntVar(name, 0, max(int(ub), 0), produced=True)


@dataclasses.dataclass(frozen=True)
class BindAttrs:
    rule: str
    slots: tuple           # per size: a produced IntVar (bound here) or a Dim (the size it must equal)
    shape: tuple           # the output's dims: x's, or (reshape) the slots
    known: tuple = ()      # rule-specific Dims (None for "no limit")
    allowzero: bool = False
    label: str = ""        # the op as run-time errors name it
    operands: tuple = ()   # slice: which value operand is which


def _infer_bind(inputs, a: BindAttrs):
    x, values = inputs[0], inputs[1:]
    check(a.rule in RULES, f"rule {a.rule!r} is not one of {RULES}")
    if a.rule == "pad":  # the fill value is data of x's dtype, not a size
        check(a.operands[-2:-1] == ("value",) and values[-1].dtype == x.dtype and prod(values[-1].shape).value == 1,
              "pad: the last operand is the fill value, one element of x's dtype")
        values = values[:-1]
    for t in values:
        check(t.dtype != DType.bool, f"size operand '{t.name}' is bool", DTypeError)
        check(all(d.is_static for d in t.shape), f"size operand '{t.name}' needs a static element count")
        check(a.rule == "range" or t.dtype.is_int, f"size operand '{t.name}' must be an integer tensor", DTypeError)
    n = sum(prod(t.shape).value for t in values)
    r = len(a.known)
    want = {"values": len(a.slots), "reshape": len(a.slots), "expand": n, "range": 3, "view": 0,
            "reduce": min(n, r), "axis": 1, "unsqueeze": len(a.slots) - r, "squeeze": r - len(a.slots), "split": len(a.slots), "slice": n, "pad": n}[a.rule]
    check(n == want, f"{n} values for {len(a.slots)} sizes ({a.rule})")
    if a.rule == "reduce":
        check(len(a.slots) == 2 * r + (0 if a.allowzero else r - n), "reduce: 2 slots per axis, then the kept ones")
    if a.rule == "view":
        check(not a.slots and tuple(a.shape) == tuple(a.known), "view: the new shape is `known`, no slots")
    if a.rule == "expand":
        check(len(a.slots) == max(len(a.known), n), "expand: one slot per output axis")
    for s in a.slots:
        check(isinstance(s, Dim), f"slot {s!r} is not a Dim")
    if a.rule == "slice":
        check(len(a.slots) == r and a.operands[:2] == ("starts", "ends") and len(a.operands) == len(values),
              "slice: one slot per axis; starts, ends[, axes][, steps]")
        check(len({prod(t.shape).value for t in values}) == 1, "slice: starts, ends, axes, steps differ in length")
    if a.rule not in ("reshape", "reduce", "view", "axis", "unsqueeze", "squeeze", "slice", "pad"):
        check(tuple(a.shape) == tuple(x.shape), "the output of this rule has x's shape")
    return [(tuple(as_dim(d) for d in a.shape), x.dtype)]


def _axes(flat, r: int, who: str) -> list[int]:
    """Run-time axes of a rank-r tensor, normalised; RuntimeInputError names the node for one out
    of range or repeated."""
    axes: list[int] = []
    for ax in flat:
        if not -r <= ax < r:
            raise RuntimeInputError(f"{who}: axis {ax} is out of range for rank {r}")
        if ax % r in axes:
            raise RuntimeInputError(f"{who}: axes {flat} repeat axis {ax % r}")
        axes.append(ax % r)
    return axes


def slot_values(a: BindAttrs, values: list[np.ndarray], env: Mapping[IntVar, int]) -> list[int]:
    """The sizes a run computes (RuntimeInputError naming the op when the values are bad)."""
    who = a.label or "bind_dims"
    known = [None if k is None else k.evaluate(env) for k in a.known]
    if a.rule == "pad":
        values = values[:-1]  # the fill value is data, not a size
    if a.rule == "range":
        s, lim, dl = (np.asarray(v).reshape(-1)[0] for v in values)
        if dl == 0:
            raise RuntimeInputError(f"{who}: delta is 0")
        if np.asarray(s).dtype.kind in "iu":
            q, r = divmod(int(lim) - int(s), int(dl))   # exact for int64, as the kernel is
            out = [max(q + (r != 0), 0)]
        else:
            out = [max(int(math.ceil((float(lim) - float(s)) / float(dl))), 0)]
        return out
    flat = [int(x) for v in values for x in np.asarray(v).reshape(-1)]
    if a.rule == "slice":
        out = slice_plan(a, values, known)[2]
    elif a.rule == "pad":
        out = pad_plan(a, values, known)[1]
    elif a.rule == "view":
        out = []
    elif a.rule in ("axis", "unsqueeze", "squeeze"):
        r = len(known) + (len(flat) if a.rule == "unsqueeze" else 0)
        axes = _axes(flat, r, who)
        if a.rule == "axis":
            ax = axes[0]
            out = [math.prod(known[:ax]), known[ax], math.prod(known[ax + 1:])]
        elif a.rule == "unsqueeze":
            rest = iter(known)
            out = [1 if j in axes else next(rest) for j in range(r)]
        else:
            if any(known[j] != 1 for j in axes):
                raise RuntimeInputError(f"{who}: cannot squeeze axes {flat} of shape {known}: not all are 1")
            out = [d for j, d in enumerate(known) if j not in axes]
    elif a.rule == "reduce":
        r = len(known)
        red = set(_axes(flat, len(known), who))
        out = [1 if j in red else d for j, d in enumerate(known)] + [d if j in red else 1 for j, d in enumerate(known)]
        if not a.allowzero:
            out += [d for j, d in enumerate(known) if j not in red]
    elif a.rule == "split":
        out = flat
        if sum(out) != known[0] or any(v < 0 for v in out):
            raise RuntimeInputError(f"{who}: split sizes {flat} add up to {sum(out)}, not the axis size {known[0]}")
    elif a.rule == "values":
        out = flat
        for j, (v, k) in enumerate(zip(out, known + [None] * len(out))):
            if k is not None and v > k:
                raise RuntimeInputError(f"{who}: value {v} at position {j} exceeds {k}")
    elif a.rule == "reshape":
        numel = math.prod(known)
        out = [known[j] if v == 0 and not a.allowzero and j < len(known) else v for j, v in enumerate(flat)]
        if out.count(-1) > 1:
            raise RuntimeInputError(f"{who}: more than one -1 in the target shape {flat}")
        if -1 in out:
            rest = math.prod(v for v in out if v != -1)
            if rest == 0 or numel % rest:
                raise RuntimeInputError(f"{who}: cannot reshape {known} to {flat}")
            out[out.index(-1)] = numel // rest
        if any(v < 0 for v in out) or math.prod(out) != numel:
            raise RuntimeInputError(f"{who}: cannot reshape {known} ({numel} elements) to {flat}")
    else:  # expand
        r = len(a.slots)
        xs = [1] * (r - len(known)) + known
        ts = [1] * (r - len(flat)) + flat
        out = []
        for j, (xd, td) in enumerate(zip(xs, ts)):
            if td != 1 and xd != 1 and td != xd:
                raise RuntimeInputError(f"{who}: cannot expand {known} to {flat} (axis {j})")
            out.append(xd if td == 1 else td)
    for j, (v, s) in enumerate(zip(out, a.slots)):
        if v < 0:
            raise RuntimeInputError(f"{who}: size {j} is {v}, negative")
        if isinstance(s, IntVar) and s.produced:
            if not s.lb <= v <= s.ub:
                raise RuntimeInputError(f"{who}: size {j} ('{s.name}') is {v}, outside its bounds "
                                        f"[{s.lb}, {s.ub}]")
        elif v != s.evaluate(env):
            raise RuntimeInputError(f"{who}: size {j} is {v}, where the graph has {s} = {s.evaluate(env)}")
    return out


def bindings(a: BindAttrs, values: list[np.ndarray], env: Mapping[IntVar, int]) -> dict[IntVar, int]:
    """The produced IntVars this op binds: the oracle adds them to its env before evaluating shapes."""
    return {s: v for s, v in zip(a.slots, slot_values(a, values, env)) if isinstance(s, IntVar) and s.produced}


def slice_plan(a: BindAttrs, values: list[np.ndarray], known: list[int]):
    """(first index, step, count) per axis of x for ONNX Slice's clamping rules."""
    who = a.label or "slice"
    v = {n: [int(x) for x in np.asarray(t).reshape(-1)] for n, t in zip(a.operands, values)}
    c, r = len(v["starts"]), len(known)
    begin, step, out, seen = [0] * r, [1] * r, list(known), set()
    for s, e, ax, st in zip(v["starts"], v["ends"], v.get("axes", range(c)), v.get("steps", [1] * c)):
        if not -r <= ax < r:
            raise RuntimeInputError(f"{who}: axis {ax} is out of range for rank {r}")
        ax %= r
        if ax in seen:
            raise RuntimeInputError(f"{who}: axis {ax} is sliced twice")
        if st == 0:
            raise RuntimeInputError(f"{who}: step 0 on axis {ax}")
        seen.add(ax)
        d = known[ax]
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            n = max(0, -(-(e - s) // st))
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            n = max(0, -(-(s - e) // -st))
        begin[ax], step[ax], out[ax] = s, st, n
    return begin, step, out


def pad_plan(a: BindAttrs, values: list[np.ndarray], known: list[int]):
    """(before, output dims) per axis for ONNX Pad's pads (and axes)."""
    who = a.label or "pad"
    v = {n: [int(x) for x in np.asarray(t).reshape(-1)] for n, t in zip(a.operands, values) if n in ("pads", "axes")}
    r = len(known)
    axes = v.get("axes", list(range(r)))
    if len(v["pads"]) != 2 * len(axes):
        raise RuntimeInputError(f"{who}: {len(v['pads'])} pads for {len(axes)} axes")
    before, out, seen = [0] * r, list(known), set()
    for k, ax in enumerate(axes):
        if not -r <= ax < r:
            raise RuntimeInputError(f"{who}: axis {ax} is out of range for rank {r}")
        ax %= r
        if ax in seen:
            raise RuntimeInputError(f"{who}: axis {ax} is padded twice")
        seen.add(ax)
        b, e = v["pads"][k], v["pads"][k + len(axes)]
        before[ax], out[ax] = b, known[ax] + b + e
        if out[ax] < 0:
            raise RuntimeInputError(f"{who}: pads {b}, {e} leave axis {ax} of size {known[ax]} negative")
    return before, out


def _pad_source(i: np.ndarray, d: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """The source index along one axis of each output index minus `before`, and where it is inside."""
    inside = (i >= 0) & (i < d)
    if mode == "edge":
        i = np.clip(i, 0, d - 1)
    elif mode == "wrap":
        i = np.mod(i, d)
    elif mode == "reflect":
        p = max(2 * d - 2, 1)
        m = np.mod(i, p)
        i = np.where(m >= d, p - m, m)
    return np.clip(i, 0, max(d - 1, 0)), inside if mode == "constant" else np.ones_like(inside)


def _ref_bind(args, a: BindAttrs, ctx):
    if a.rule == "pad":
        x, mode = args[0], a.operands[-1].split(":", 1)[1]
        before, out = pad_plan(a, args[1:], list(x.shape))
        if any(d == 0 and n > 0 for d, n in zip(x.shape, out)) and mode != "constant":
            raise RuntimeInputError(f"{a.label or 'pad'}: {mode} padding of an empty axis")
        y, keep = x, np.ones(out, bool)
        for ax, (b, n, d) in enumerate(zip(before, out, x.shape)):
            src, inside = _pad_source(np.arange(n, dtype=np.int64) - b, d, mode)
            y = np.take(y, src, axis=ax) if d else np.zeros(y.shape[:ax] + (n,) + y.shape[ax + 1:], x.dtype)
            keep &= inside.reshape([-1 if j == ax else 1 for j in range(len(out))])
        return [np.where(keep, y, np.asarray(args[-1]).reshape(()))]
    if a.rule == "slice":
        begin, step, out = slice_plan(a, args[1:], list(args[0].shape))
        y = args[0]
        for ax, (b, st, n) in enumerate(zip(begin, step, out)):
            y = np.take(y, b + np.arange(n, dtype=np.int64) * st, axis=ax)
        return [y]
    if math.prod(ctx.out_shapes[0]) != args[0].size:
        raise RuntimeInputError(f"{a.label or 'bind_dims'}: {args[0].size} elements do not fill the shape "
                                f"{list(ctx.out_shapes[0])}")
    return [np.ascontiguousarray(args[0]).reshape(ctx.out_shapes[0])]


register(OpKind.BIND_DIMS, Category.MEMORY, BindAttrs, _infer_bind, _ref_bind, num_inputs=(1, 5))


def bind_dims(x: Tensor, values: list[Tensor], rule: str, slots, shape=None, known=(), allowzero=False,
              name: Optional[str] = None, operands=()) -> Tensor:
    """x (copied; sliced by the slice rule) with `shape` (default x's), once the sizes that
    `values` give by `rule` are bound."""
    a = BindAttrs(rule, tuple(as_dim(s) for s in slots), tuple(x.shape if shape is None else shape),
                  tuple(None if k is None else as_dim(k) for k in known), bool(allowzero), name or "",
                  tuple(operands))
    return make_op1(OpKind.BIND_DIMS, [x, *values], a, name)


@dataclasses.dataclass(frozen=True)
class NonZeroAttrs:
    count: IntVar          # the produced number of non-zero elements
    label: str = ""


def _infer_nonzero(inputs, a: NonZeroAttrs):
    (x,) = inputs
    check(isinstance(a.count, IntVar) and a.count.produced, "count must be a produced IntVar")
    check(a.count.ub >= prod(x.shape).upper, f"count's bound {a.count.ub} is below x's element count",
          ShapeError)
    return [((as_dim(max(x.ndim, 1)), a.count), DType.int64)]


def _ref_nonzero(args, a: NonZeroAttrs, ctx):
    x = args[0]
    # ONNX (and numpy 2) treat a scalar as a 1-D tensor of one element
    return [np.array(np.nonzero(x.reshape(-1) if x.ndim == 0 else x), dtype=np.int64)]


register(OpKind.NONZERO, Category.GATHER, NonZeroAttrs, _infer_nonzero, _ref_nonzero, num_inputs=(1, 1))


def nonzero(x: Tensor, name: Optional[str] = None) -> Tensor:
    """np.nonzero(x) as one int64 [rank, count] tensor; count is known only after the run."""
    count = produced_var(f"{name or 'nonzero'}_count", prod(x.shape).upper)
    return make_op1(OpKind.NONZERO, [x], NonZeroAttrs(count, name or ""), name)
