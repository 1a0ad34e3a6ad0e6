"""Views and memory ops: reshape (flatten, squeeze, unsqueeze), permute (transpose), concat, split,
slice with steps, pad, expand, and Python indexing sugar (Tensor.__getitem__).

Dynamic dims: every output size is a symbolic Dim that holds for *every* value of the IntVars within
their bounds. Where an op's result on a dynamic dim would depend on clamping that differs between
values (a slice end beyond the lower bound, a negative start deeper than the lower bound, splitting
`batch` into equal parts), the builder raises ShapeError instead of guessing.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import operator
from typing import Optional, Sequence, Union

import numpy as np

from ..errors import AitgenError, DTypeError, ShapeError, UnsupportedOpError
from ..ir.dims import Dim, IntImm, as_dim, ceil_div, prod, shape_str
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .registry import Category, _desc, check, make_op, make_op1, normalize_axis, register

__all__ = ["ReshapeAttrs", "PermuteAttrs", "ConcatAttrs", "SplitAttrs", "SliceAttrs", "PadAttrs",
           "ExpandAttrs", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose",
           "concat", "split", "slice", "pad", "expand", "getitem"]


@dataclasses.dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[Dim, ...]  # fully resolved (no -1)


@dataclasses.dataclass(frozen=True)
class PermuteAttrs:
    perm: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ConcatAttrs:
    axis: int  # non-negative


@dataclasses.dataclass(frozen=True)
class SplitAttrs:
    axis: int
    sizes: tuple[Dim, ...]


@dataclasses.dataclass(frozen=True)
class SliceAttrs:
    """Per dim of the input: start, stop, step, already clamped to the dim (negative steps allowed).

    Static dims hold 0 <= start, stop <= size; an empty slice is (0, 0, 1). stop None runs to the
    end in the step's direction (for a negative step that is "through index 0", which no
    non-negative stop can say). Dynamic dims may also hold negative start/stop, counted from the
    end at run time (size + v); the builder admits them only when no clamping is needed for any
    size within the IntVar's bounds.
    """
    starts: tuple[int, ...]
    # None = to the end in the step's direction (dynamic dims); a Dim = a symbolic end counted from
    # 0 (a static table cut to a dynamic length: positions[:seq]), positive steps only.
    stops: tuple[Optional[Union[int, Dim]], ...]
    steps: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PadAttrs:
    pads: tuple[tuple[int, int], ...]  # (before, after) per dim
    mode: str = "constant"             # constant, reflect, edge
    value: float = 0.0


@dataclasses.dataclass(frozen=True)
class ExpandAttrs:
    shape: tuple[Dim, ...]


_PAD_MODES = ("constant", "reflect", "edge")


# -- error labelling ------------------------------------------------------------------------
# Inference errors are labelled by make_op; builders do their own pre-processing (resolving -1,
# normalising axes) and label errors from it the same way, so every message names the op.

def _label(what: Union[OpKind, str], name) -> str:
    w = what.value if isinstance(what, OpKind) else what
    return w + (f" '{name}'" if name else "")


@contextlib.contextmanager
def _building(what, name, *xs):
    """Check the operands are Tensors, then label errors raised in the block."""
    for x in xs:
        if not isinstance(x, Tensor):
            raise DTypeError(f"{_label(what, name)}: operand is a {type(x).__name__}, not a Tensor")
    try:
        yield
    except AitgenError as e:
        ops = ", ".join(_desc(t) for t in xs)
        raise type(e)(f"{_label(what, name)}: {e} (operands: {ops})") from None


def _is_minus_one(d) -> bool:
    if isinstance(d, Dim):
        return d.is_static and d.value == -1
    return not isinstance(d, bool) and hasattr(d, "__index__") and operator.index(d) == -1


def _size(d) -> Dim:
    d = as_dim(d)
    if d.is_static and d.value < 0:
        raise ShapeError(f"negative size {d.value}")
    return d


def _axes(axes, ndim: int) -> list[int]:
    if isinstance(axes, int):
        axes = [axes]
    out = [normalize_axis(int(a), ndim) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {list(axes)}")
    return out


# -- reshape --------------------------------------------------------------------------------

def _infer_reshape(inputs, a: ReshapeAttrs):
    (x,) = inputs
    shape = tuple(_size(d) for d in a.shape)
    if prod(shape) != prod(x.shape):
        raise ShapeError(f"cannot reshape {shape_str(x.shape)} ({prod(x.shape)} elements) to "
                         f"{shape_str(shape)} ({prod(shape)} elements)")
    return [(shape, x.dtype)]


register(OpKind.RESHAPE, Category.VIEW, ReshapeAttrs, _infer_reshape,
         lambda args, a, ctx: [args[0].reshape(ctx.out_shapes[0]).copy()])


def reshape(x: Tensor, shape: Sequence[Union[int, Dim]], name=None) -> Tensor:
    """One -1 allowed; sizes may be IntVars/expressions; the element count must match exactly."""
    with _building(OpKind.RESHAPE, name, x):
        if isinstance(shape, (int, Dim)):
            shape = (shape,)
        out: list[Optional[Dim]] = []
        for d in shape:
            if _is_minus_one(d):
                if None in out:
                    raise ShapeError(f"only one -1 is allowed in the target shape {list(map(str, shape))}")
                out.append(None)
            else:
                out.append(_size(d))
        if None in out:
            total = prod(x.shape)
            known = prod(d for d in out if d is not None)
            q = None if known == 0 else total.exact_div(known)
            if q is None:
                target = "[" + ", ".join("-1" if d is None else str(d) for d in out) + "]"
                raise ShapeError(f"cannot infer -1 in {target}: {shape_str(x.shape)} has {total} elements, "
                                 f"not provably a multiple of {known}")
            out[out.index(None)] = q
    return make_op1(OpKind.RESHAPE, [x], ReshapeAttrs(tuple(out)), name)


def flatten(x: Tensor, start: int = 0, end: int = -1, name=None) -> Tensor:
    """torch.flatten: dims start..end (inclusive) merge into one; a rank-0 tensor becomes [1]."""
    with _building(OpKind.RESHAPE, name, x):
        if x.ndim == 0:
            return reshape(x, [1], name=name)
        s, e = normalize_axis(start, x.ndim, "start"), normalize_axis(end, x.ndim, "end")
        if s > e:
            raise ShapeError(f"flatten start {start} comes after end {end}")
    return reshape(x, x.shape[:s] + (prod(x.shape[s:e + 1]),) + x.shape[e + 1:], name=name)


def squeeze(x: Tensor, axes=None, name=None) -> Tensor:
    """Drop size-1 dims: all static 1s when axes is None (dynamic dims stay), else exactly `axes`."""
    with _building(OpKind.RESHAPE, name, x):
        if axes is None:
            drop = {i for i, d in enumerate(x.shape) if d == 1}
        else:
            drop = set(_axes(axes, x.ndim))
            for i in sorted(drop):
                if x.shape[i] != 1:
                    raise ShapeError(f"cannot squeeze dim {i} of size {x.shape[i]} (not 1)")
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in drop], name=name)


def unsqueeze(x: Tensor, axes, name=None) -> Tensor:
    """Insert size-1 dims; axes index the output (ONNX Unsqueeze), negative ones from its end."""
    with _building(OpKind.RESHAPE, name, x):
        n_new = 1 if isinstance(axes, int) else len(axes)
        new = set(_axes(axes, x.ndim + n_new))
    rest = iter(x.shape)
    return reshape(x, [IntImm(1) if i in new else next(rest) for i in range(x.ndim + n_new)], name=name)


# -- permute --------------------------------------------------------------------------------

def _infer_permute(inputs, a: PermuteAttrs):
    (x,) = inputs
    check(sorted(a.perm) == list(range(x.ndim)),
          f"perm {list(a.perm)} is not a permutation of the {x.ndim} dims of {shape_str(x.shape)}")
    return [(tuple(x.shape[p] for p in a.perm), x.dtype)]


register(OpKind.PERMUTE, Category.MEMORY, PermuteAttrs, _infer_permute,
         lambda args, a, ctx: [np.ascontiguousarray(np.transpose(args[0], a.perm))])


def permute(x: Tensor, perm: Sequence[int], name=None) -> Tensor:
    with _building(OpKind.PERMUTE, name, x):
        if len(perm) != x.ndim:
            raise ShapeError(f"perm {list(perm)} has {len(perm)} entries for rank {x.ndim}")
        p = tuple(_axes(list(perm), x.ndim))
    return make_op1(OpKind.PERMUTE, [x], PermuteAttrs(p), name)


def transpose(x: Tensor, a: int, b: int, name=None) -> Tensor:
    with _building(OpKind.PERMUTE, name, x):
        a, b = normalize_axis(a, x.ndim), normalize_axis(b, x.ndim)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return make_op1(OpKind.PERMUTE, [x], PermuteAttrs(tuple(perm)), name)


# -- concat / split -------------------------------------------------------------------------

def _infer_concat(inputs, a: ConcatAttrs):
    x0 = inputs[0]
    check(0 <= a.axis < x0.ndim, f"axis {a.axis} is out of range for rank {x0.ndim}")
    for i, t in enumerate(inputs[1:], 1):
        check(t.dtype == x0.dtype, f"operand {i} is {t.dtype}, operand 0 is {x0.dtype}", DTypeError)
        check(t.ndim == x0.ndim, f"operand {i} has rank {t.ndim}, operand 0 has rank {x0.ndim}")
        for d in range(x0.ndim):
            check(d == a.axis or t.shape[d] == x0.shape[d],
                  f"dim {d} differs: operand {i} has {t.shape[d]}, operand 0 has {x0.shape[d]}")
    out = list(x0.shape)
    out[a.axis] = sum((t.shape[a.axis] for t in inputs[1:]), x0.shape[a.axis])
    return [(tuple(out), x0.dtype)]


register(OpKind.CONCAT, Category.MEMORY, ConcatAttrs, _infer_concat,
         lambda args, a, ctx: [np.concatenate(args, axis=a.axis)], num_inputs=(1, 1 << 20))


def concat(tensors: Sequence[Tensor], axis: int = 0, name=None) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise ShapeError(f"{_label(OpKind.CONCAT, name)}: needs at least one tensor")
    with _building(OpKind.CONCAT, name, *tensors):
        ax = normalize_axis(axis, tensors[0].ndim)
    return make_op1(OpKind.CONCAT, tensors, ConcatAttrs(ax), name)


def _infer_split(inputs, a: SplitAttrs):
    (x,) = inputs
    check(0 <= a.axis < x.ndim, f"axis {a.axis} is out of range for rank {x.ndim}")
    check(len(a.sizes) > 0, "needs at least one part")
    sizes = [_size(s) for s in a.sizes]
    total = sum(sizes[1:], sizes[0])
    check(total == x.shape[a.axis],
          f"sizes {[str(s) for s in sizes]} sum to {total}, dim {a.axis} is {x.shape[a.axis]}")
    return [(x.shape[:a.axis] + (s,) + x.shape[a.axis + 1:], x.dtype) for s in sizes]


def _ref_split(args, a: SplitAttrs, ctx):
    offsets = np.cumsum([s[a.axis] for s in ctx.out_shapes])[:-1]
    return [p.copy() for p in np.split(args[0], offsets, axis=a.axis)]


register(OpKind.SPLIT, Category.MEMORY, SplitAttrs, _infer_split, _ref_split)


def split(x: Tensor, sizes_or_sections, axis: int = 0, name=None) -> list[Tensor]:
    """An int splits into that many equal parts; a list gives the sizes.

    Note the int means a number of parts (numpy.split, ONNX num_outputs), not torch.split's chunk size.
    """
    with _building(OpKind.SPLIT, name, x):
        ax = normalize_axis(axis, x.ndim)
        n = x.shape[ax]
        if isinstance(sizes_or_sections, (int, np.integer)) and not isinstance(sizes_or_sections, bool):
            k = int(sizes_or_sections)
            if k <= 0:
                raise ShapeError(f"number of sections must be positive, got {k}")
            q = n.exact_div(k)
            if q is None:
                raise ShapeError(f"dim {ax} of size {n} does not split into {k} equal parts")
            sizes = (q,) * k
        else:
            sizes = tuple(_size(s) for s in sizes_or_sections)
    return make_op(OpKind.SPLIT, [x], SplitAttrs(ax, sizes), name)


# -- slice ----------------------------------------------------------------------------------

def _slice_len(n: Dim, s: int, e: Optional[int], st: int) -> Dim:
    """Output size of one axis; ShapeError unless the slice is in range for every size of n."""
    if st == 0:
        raise ShapeError("slice step cannot be 0")
    pos = lambda v: v if isinstance(v, Dim) else as_dim(v) if v >= 0 else n + v  # noqa: E731 - negative counts from the end
    sp = pos(s)
    if st > 0:
        ep = n if e is None else pos(e)
        ok = sp.lower >= 0 and (ep - sp).lower >= 0 and (n - ep).lower >= 0
        length = ep - sp
    else:
        ep = IntImm(-1) if e is None else pos(e)
        ok = (ep + 1).lower >= 0 and (sp - ep).lower >= 0 and (n - 1 - sp).lower >= 0
        length = sp - ep
    if not ok:
        rng = f" for some {n} in [{n.lower}, {n.upper}]" if not n.is_static else ""
        raise ShapeError(f"slice {s}:{'' if e is None else e}:{st} of a dim of size {n} "
                         f"needs clamping{rng}, which a static shape cannot express")
    return length if builtins.abs(st) == 1 else ceil_div(length, builtins.abs(st))


def _infer_slice(inputs, a: SliceAttrs):
    (x,) = inputs
    check(len(a.starts) == len(a.stops) == len(a.steps) == x.ndim,
          f"starts/stops/steps need {x.ndim} entries each")
    out = tuple(_slice_len(n, s, e, st) for n, s, e, st in zip(x.shape, a.starts, a.stops, a.steps))
    return [(out, x.dtype)]


def _ref_slice(args, a: SliceAttrs, ctx):
    x = args[0]
    idx = []
    for n, s, e, st in zip(x.shape, a.starts, a.stops, a.steps):
        s = s + n if s < 0 else s
        if isinstance(e, Dim):
            e = e.evaluate(ctx.env)
        e = None if e is None else (e + n if e < 0 else e)
        idx.append(builtins.slice(s, e, st))
    return [x[tuple(idx)].copy()]


register(OpKind.SLICE, Category.MEMORY, SliceAttrs, _infer_slice, _ref_slice)


def _onnx_static(n: int, s: int, e: int, st: int) -> tuple[int, Optional[int], int]:
    """ONNX Slice clamping on a static dim, in SliceAttrs form."""
    if st > 0:
        s = min(max(s + n if s < 0 else s, 0), n)
        e = min(max(e + n if e < 0 else e, 0), n)
        length = -(-(e - s) // st)
    else:
        s = min(max(s + n if s < 0 else s, 0), n - 1)
        e = min(max(e + n if e < 0 else e, -1), n - 1)
        length = -(-(s - e) // -st)
    if length <= 0:
        return 0, 0, 1
    return s, (None if e < 0 else e), st


def _dynamic(n: Dim, s, e, st: int) -> tuple[int, Optional[int], int]:
    """SliceAttrs form on a dynamic dim; s/e None = the default for the step's direction.

    Bounds beyond the IntVar's upper bound clamp the same way for every size, so they become "the
    end"; anything else is kept and checked by _slice_len.
    """
    ub = n.upper
    if isinstance(e, Dim):
        if st > 0 and e == n:
            e = None
        elif e.is_static:
            e = e.value
        else:
            raise ShapeError(f"slice end {e} on a dim of size {n} is not expressible")
    if st > 0:
        s = 0 if s is None or s <= -ub else s
        e = None if e is None or e >= ub else e
    else:
        s = -1 if s is None or s >= ub - 1 else s
        e = None if e is None or e <= -ub - 1 else e
    return s, e, st


def _full(n: Dim) -> tuple[int, Optional[int], int]:
    return (0, n.value, 1) if n.is_static else (0, None, 1)


def _make_slice(x: Tensor, specs, name) -> Tensor:
    starts, stops, steps = zip(*specs) if specs else ((), (), ())
    return make_op1(OpKind.SLICE, [x], SliceAttrs(tuple(starts), tuple(stops), tuple(steps)), name)


def _int(v, what: str) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise ShapeError(f"{what} must be an integer, got {v!r}")
    if what == "step" and operator.index(v) == 0:
        raise ShapeError("slice step cannot be 0")
    return operator.index(v)


def slice(x: Tensor, starts: Sequence[int], ends: Sequence[int], axes: Optional[Sequence[int]] = None,  # noqa: A001
          steps: Optional[Sequence[int]] = None, name=None) -> Tensor:
    """ONNX Slice semantics (clamping, negative indices, negative steps).

    On a dynamic dim: a full-range slice keeps the IntVar, and starts/ends within the lower bound
    (or beyond the upper bound, meaning "the end") give exact symbolic sizes such as `seq - 1`;
    a slice whose clamping would depend on the run-time size raises ShapeError. An end may also be
    the dim itself (`ends=[seq]`).
    """
    with _building(OpKind.SLICE, name, x):
        starts, ends = list(starts), list(ends)
        axes = list(range(len(starts))) if axes is None else list(axes)
        steps = [1] * len(starts) if steps is None else list(steps)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ShapeError(f"starts {starts}, ends {ends}, axes {axes}, steps {steps} differ in length")
        specs = [_full(n) for n in x.shape]
        for ax, s, e, st in zip(_axes(axes, x.ndim), starts, ends, steps):
            st, s, n = _int(st, "step"), _int(s, "start"), x.shape[ax]
            if n.is_static and isinstance(e, Dim) and not e.is_static:
                if st <= 0 or e.upper > n.value:
                    raise ShapeError(f"a symbolic end {e} needs a positive step and an upper bound "
                                     f"within the dim ({n})")
                specs[ax] = (_onnx_static(n.value, s, n.value, st)[0], e, st)
            elif n.is_static:
                specs[ax] = _onnx_static(n.value, s, _int(e, "end"), st)
            else:
                specs[ax] = _dynamic(n, s, e if isinstance(e, Dim) and not e.is_static else _int(e, "end"), st)
    return _make_slice(x, specs, name)


def getitem(x: Tensor, idx) -> Tensor:
    """Basic indexing: ints, slices with steps, None, Ellipsis -> slice + reshape.

    Python's slice semantics on static dims (x[-10::-1] of 5 is empty, unlike ONNX). A Tensor,
    list or bool index (advanced indexing) raises UnsupportedOpError; use ops.gather.
    """
    items = idx if isinstance(idx, tuple) else (idx,)
    with _building("getitem", None, x):
        for it in items:
            if isinstance(it, (Tensor, list, np.ndarray, bool, np.bool_)):
                raise UnsupportedOpError(f"advanced indexing with a {type(it).__name__} is not supported; "
                                         "use ops.gather")
        if sum(it is Ellipsis for it in items) > 1:
            raise ShapeError("an index can only have a single ellipsis")
        used = sum(it is not None and it is not Ellipsis for it in items)
        if used > x.ndim:
            raise ShapeError(f"too many indices ({used}) for rank {x.ndim}")
        if Ellipsis not in items:
            items = items + (Ellipsis,)
        k = items.index(Ellipsis)
        items = items[:k] + (builtins.slice(None),) * (x.ndim - used) + items[k + 1:]
        specs, plan = [], []  # plan: the sliced axis each output dim comes from, None for a new one
        for it in items:
            if it is None or isinstance(it, builtins.slice):
                plan.append(None if it is None else len(specs))
            if it is not None:
                specs.append(_index_spec(x.shape[len(specs)], it, len(specs)))
    y = x if all(sp == _full(n) for sp, n in zip(specs, x.shape)) else _make_slice(x, specs, None)
    if len(plan) == y.ndim and None not in plan:
        return y
    return reshape(y, [IntImm(1) if p is None else y.shape[p] for p in plan])


def _index_spec(n: Dim, it, axis: int) -> tuple[int, Optional[int], int]:
    """SliceAttrs form of one Python index item, an int or a slice, on a dim of size n."""
    if isinstance(it, builtins.slice):
        st = 1 if it.step is None else _int(it.step, "step")
        a = None if it.start is None else _int(it.start, "slice start")
        if not n.is_static:  # a stop may name the dim itself: x[:, :seq]
            b = it.stop if it.stop is None or isinstance(it.stop, Dim) else _int(it.stop, "slice stop")
            return _dynamic(n, a, b, st)
        b = None if it.stop is None else _int(it.stop, "slice stop")
        s, e, st = builtins.slice(a, b, st).indices(n.value)
        return (0, 0, 1) if len(range(s, e, st)) == 0 else (s, None if e < 0 else e, st)
    i = _int(it, "index")
    if n.is_static:
        if not -n.value <= i < n.value:
            raise ShapeError(f"index {i} is out of range for dim {axis} of size {n}")
        i %= n.value
    return i, (None if i == -1 else i + 1), 1


# -- pad ------------------------------------------------------------------------------------

def _infer_pad(inputs, a: PadAttrs):
    (x,) = inputs
    check(a.mode in _PAD_MODES, f"mode {a.mode!r} is not one of {list(_PAD_MODES)}")
    check(len(a.pads) == x.ndim, f"pads {list(a.pads)} has {len(a.pads)} pairs for rank {x.ndim}")
    out = []
    for i, ((lo, hi), n) in enumerate(zip(a.pads, x.shape)):
        check(lo >= 0 and hi >= 0, f"negative pads {(lo, hi)} on dim {i} are not supported (use slice)")
        if a.mode == "reflect" and (lo or hi):
            check(builtins.max(lo, hi) <= n.lower - 1,
                  f"reflect pads {(lo, hi)} on dim {i} must be smaller than its size {n}")
        if a.mode == "edge" and (lo or hi):
            check(n.lower >= 1, f"edge padding of dim {i} needs a non-empty dim, size is {n}")
        out.append(n + lo + hi)
    return [(tuple(out), x.dtype)]


def _ref_pad(args, a: PadAttrs, ctx):
    kw = {"constant_values": a.value} if a.mode == "constant" else {}
    return [np.pad(args[0], a.pads, mode=a.mode, **kw)]


register(OpKind.PAD, Category.MEMORY, PadAttrs, _infer_pad, _ref_pad)


def pad(x: Tensor, pads, mode: str = "constant", value: float = 0.0, name=None) -> Tensor:
    """pads: (before, after) per dim from the first, or a flat list in torch order for the last dims.

    Nested pairs must cover every dim: ((0, 0), (1, 2)). A flat list [l0, r0, l1, r1, ...] pads the
    last dim by (l0, r0), the one before by (l1, r1), ... (torch.nn.functional.pad). Negative pads
    (cropping) raise ShapeError; mode 'replicate' is accepted as 'edge'.
    """
    with _building(OpKind.PAD, name, x):
        mode = "edge" if mode == "replicate" else mode
        arr = np.asarray(pads, dtype=object)
        if arr.ndim == 2 and arr.shape[1] == 2:
            pairs = [(_int(lo, "pad"), _int(hi, "pad")) for lo, hi in arr]
        elif arr.ndim == 1 and len(arr) % 2 == 0 and len(arr) // 2 <= x.ndim:
            flat = [_int(p, "pad") for p in arr]  # last dim first
            pairs = [(0, 0)] * (x.ndim - len(flat) // 2)
            pairs += [(flat[j], flat[j + 1]) for j in range(len(flat) - 2, -1, -2)]
        else:
            raise ShapeError(f"pads {pads!r} is neither one (before, after) pair per dim nor a flat "
                             f"even-length list for at most {x.ndim} dims")
    return make_op1(OpKind.PAD, [x], PadAttrs(tuple(pairs), mode, float(value)), name)


# -- expand ---------------------------------------------------------------------------------

def _infer_expand(inputs, a: ExpandAttrs):
    (x,) = inputs
    lead = len(a.shape) - x.ndim
    check(lead >= 0, f"target {shape_str(a.shape)} has fewer dims than the input")
    out = []
    for i, d in enumerate(a.shape):
        d = _size(d)
        if i >= lead:
            src = x.shape[i - lead]
            check(src == d or src == 1, f"dim {i - lead} of size {src} cannot expand to {d}")
        out.append(d)
    return [(tuple(out), x.dtype)]


register(OpKind.EXPAND, Category.MEMORY, ExpandAttrs, _infer_expand,
         lambda args, a, ctx: [np.broadcast_to(args[0], ctx.out_shapes[0]).copy()])


def expand(x: Tensor, shape, name=None) -> Tensor:
    """numpy broadcast_to; -1 keeps the input's size."""
    with _building(OpKind.EXPAND, name, x):
        shape = list(shape)
        lead = len(shape) - x.ndim
        if lead < 0:
            raise ShapeError(f"target {list(map(str, shape))} has fewer dims than the input")
        if any(_is_minus_one(d) for d in shape[:lead]):
            raise ShapeError(f"-1 at a new leading dim of {list(map(str, shape))}")
        out = [x.shape[i - lead] if _is_minus_one(d) else _size(d) for i, d in enumerate(shape)]
    return make_op1(OpKind.EXPAND, [x], ExpandAttrs(tuple(out)), name)
