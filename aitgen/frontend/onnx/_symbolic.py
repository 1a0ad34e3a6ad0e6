"""Import-time arithmetic on shape values that hold dynamic dims.

`Shape(x)` of a tensor whose batch is an IntVar is the object array [batch, 128, 768] of Dims.
What exporters do with it next (Gather an entry, Unsqueeze, Concat with constants, multiply two
entries, Cast to int64) is evaluated here with numpy on object arrays, where Dim arithmetic keeps
the result exact; a Reshape then receives `[batch, 128, 12, 64]` and no shape op reaches the graph.
An op not covered here (or a case whose answer depends on the run-time size, such as
`Equal(batch, 1)`) returns None, and the converter runs instead (and reports what it cannot do).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ...ir.dims import Dim, IntImm
from ._proto import onnx_module
from .registry import Folded, NodeContext


def normalize_symbolic(v: np.ndarray) -> np.ndarray:
    """Dims everywhere; int64 when every entry is static."""
    flat = [x if isinstance(x, Dim) else IntImm(int(x)) for x in v.reshape(-1)]
    if all(d.is_static for d in flat):
        return np.array([d.value for d in flat], dtype=np.int64).reshape(v.shape)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(v.shape)


def _dims(v) -> np.ndarray:
    """An input as an object array of Dims (ints become IntImms)."""
    v = np.asarray(v)
    if v.dtype != object and v.dtype.kind not in "iu":
        raise _NotFoldable
    return normalize_symbolic(v) if v.dtype == object else _obj(v)


def _obj(v: np.ndarray) -> np.ndarray:
    out = np.empty(v.size, dtype=object)
    out[:] = [IntImm(int(x)) for x in v.reshape(-1)]
    return out.reshape(v.shape)


class _NotFoldable(Exception):
    pass


def _int_attr_or_input(ctx: NodeContext, i: int, attr: str, opset_from: int) -> Optional[list[int]]:
    if ctx.opset >= opset_from:
        return ctx.ints(i, attr)
    a = ctx.attr(attr, None)
    return None if a is None else [int(x) for x in a]


def _gather(ctx, x):
    if x.ndim == 0:
        raise _NotFoldable
    return np.take(x, np.asarray(ctx.require_const(1, "indices")).astype(np.int64), axis=ctx.attr("axis", 0))


def _slice(ctx, x, *_):
    if ctx.opset >= 10:
        if any(_has_dynamic_dim(ctx.value(j)) for j in range(1, min(ctx.num_inputs, 5))):
            # A length only the run knows (BERT's position_ids[:, :seq] with seq dynamic): not shape
            # arithmetic; the Slice converter cuts the tensor with that Dim as its end.
            raise _NotFoldable
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
        axes, steps = ctx.ints(3, "axes"), ctx.ints(4, "steps")
    else:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes", None), None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        idx[a % x.ndim] = slice(s, e, st)  # Python's clamping is ONNX's
    return x[tuple(idx)]


def _has_dynamic_dim(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object and any(
        isinstance(d, Dim) and not d.is_static for d in v.reshape(-1))


def _concat(ctx, *xs):
    return np.concatenate([np.atleast_1d(x) for x in xs], axis=ctx.attr("axis"))


def _unsqueeze(ctx, x, *_):
    axes = _int_attr_or_input(ctx, 1, "axes", 13)
    r = x.ndim + len(axes)
    for a in sorted(a % r for a in axes):
        x = np.expand_dims(x, a)
    return x


def _squeeze(ctx, x, *_):
    axes = _int_attr_or_input(ctx, 1, "axes", 13)
    if axes is None:
        return x.reshape([n for n in x.shape if n != 1])
    return np.squeeze(x, axis=tuple(a % x.ndim for a in axes))


def _reshape(ctx, x, *_):
    shape = [int(s) for s in ctx.require_const(1, "shape").reshape(-1)]
    if not ctx.attr("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _cast(ctx, x):
    onnx_to = ctx.attr("to")
    name = onnx_module().TensorProto.DataType.Name(onnx_to)
    if name not in ("INT64", "INT32"):
        raise _NotFoldable  # a dim as a float is data the graph would have to compute
    return x


def _div(a: Dim, b: Dim) -> Dim:
    if a.is_static and b.is_static:
        q = abs(a.value) // abs(b.value) if b.value else 0  # ONNX integer Div truncates
        return IntImm(q if (a.value >= 0) == (b.value >= 0) else -q)
    q = a.exact_div(b)
    if q is not None:
        return q
    if b.is_static and b.value > 0 and a.lower >= 0:
        return a // b
    raise _NotFoldable


def _definite_eq(a: Dim, b: Dim) -> bool:
    if a == b:
        return True
    d = a - b
    if d.lower > 0 or d.upper < 0:
        return False
    raise _NotFoldable  # equal for some sizes, not for others


def _binary(fn: Callable[[Dim, Dim], object]):
    def run(ctx, a, b):
        out = np.frompyfunc(fn, 2, 1)(_dims(a), _dims(b))
        return np.asarray(out, dtype=object)
    return run


def _max_min(pick_max: bool):
    def fn(a: Dim, b: Dim) -> Dim:
        d = a - b
        if d.lower >= 0:
            return a if pick_max else b
        if d.upper <= 0:
            return b if pick_max else a
        raise _NotFoldable
    return fn


def _where(ctx, c, a, b):
    c = np.asarray(c)
    if c.dtype == object:
        raise _NotFoldable
    return np.where(c, _dims(a), _dims(b))


def _equal(ctx, a, b):
    out = np.frompyfunc(_definite_eq, 2, 1)(_dims(a), _dims(b))
    return np.asarray(out, dtype=bool)


def _variadic(fn):
    def run(ctx, *xs):
        acc = _dims(xs[0])
        for x in xs[1:]:
            acc = np.asarray(np.frompyfunc(fn, 2, 1)(acc, _dims(x)), dtype=object)
        return acc
    return run


_SYMBOLIC = {
    "Identity": lambda ctx, x: x,
    "Cast": _cast,
    "Gather": _gather,
    "Slice": _slice,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Add": _binary(lambda a, b: a + b),
    "Sub": _binary(lambda a, b: a - b),
    "Mul": _binary(lambda a, b: a * b),
    "Div": _binary(_div),
    "Equal": _equal,
    "Where": _where,
    "Max": _variadic(_max_min(True)),
    "Min": _variadic(_max_min(False)),
}


def fold_symbolic(ctx: NodeContext) -> Optional[list[Folded]]:
    """The node's outputs when it is shape arithmetic on import-time values, else None."""
    fn = _SYMBOLIC.get(ctx.op_type)
    if fn is None:
        return None
    args = []
    for i in range(ctx.num_inputs):
        v = ctx.value(i)
        args.append(None if v is None else np.asarray(v))
    # Optional trailing inputs (Slice's axes, Squeeze's axes) are read through ctx by the rule.
    n_data = {"Gather": 1, "Slice": 1, "Unsqueeze": 1, "Squeeze": 1, "Reshape": 1}.get(ctx.op_type)
    data = args[:n_data] if n_data else [a for a in args if a is not None]
    try:
        out = fn(ctx, *data)
    except _NotFoldable:
        return None
    except (ValueError, IndexError, TypeError):
        return None  # let the converter report the problem with its own words
    return [Folded(normalize_symbolic(np.asarray(out, dtype=object)) if np.asarray(out).dtype == object
                   else np.asarray(out))]
