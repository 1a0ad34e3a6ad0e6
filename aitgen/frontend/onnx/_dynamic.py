"""Shape, repeats, K or range operands that arrive as run-time tensors (graph inputs, computed
values): the converters' side of data-dependent sizes (aitgen/ops/dynamic.py).

Each size read from a value becomes a produced IntVar bound by a BIND_DIMS kernel during the run.
Its upper bound comes from the input bounds where the op gives one (a Reshape's sizes are at most
x's element count, TopK's K at most the axis); a size that only the value sets (a fill's shape,
Expand's new dims, Tile's repeats, Range's length) is bounded by an element budget shared by the
dims of one tensor, VALUE_ELEMENTS, so that buffers planned at the bounds stay allocatable. A run
that asks for more is refused with RuntimeInputError naming the node.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import Dim, IntImm, IntVar, prod
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import bind_dims, produced_var
from .registry import NodeContext

VALUE_ELEMENTS = 2 ** 20  # elements of a tensor whose sizes only values set, at the bounds


def value_bound(rank: int) -> int:
    """The bound of each of `rank` value-set sizes of one tensor: together within VALUE_ELEMENTS."""
    return max(1, int(VALUE_ELEMENTS ** (1.0 / max(rank, 1)) + 1e-9))


def run_time(ctx: NodeContext, i: int) -> bool:
    """Input i is a tensor whose value only the run knows (not a constant, not a folded shape)."""
    v = ctx.value(i)
    return isinstance(v, Tensor) and not v.is_constant


def sizes_operand(ctx: NodeContext, i: int, what: str, floats: bool = False) -> Tensor:
    """Input i as a run-time size operand: a tensor of a static element count, integer (or float)."""
    t = ctx.input(i, what)
    if not all(d.is_static for d in t.shape):
        raise ctx.unsupported(f"input {i} ({what}, '{ctx.input_names[i]}') has a dynamic element count "
                              f"{[str(d) for d in t.shape]}: the number of sizes it gives must be static")
    if t.ndim > 1:
        raise ctx.malformed(f"input {i} ({what}) must be 0-D or 1-D, got rank {t.ndim}")
    if not (t.dtype.is_int or (floats and t.dtype.is_float)):
        raise ctx.malformed(f"input {i} ({what}) must be an integer tensor, got {t.dtype}")
    return t


def _vars(ctx: NodeContext, n: int, ub: int, tag: str = "") -> list[IntVar]:
    return [produced_var(f"{ctx.name}{tag}:{j}", ub) for j in range(n)]


def reshape(ctx: NodeContext, x: Tensor, i: int) -> Tensor:
    s = sizes_operand(ctx, i, "shape")
    r = prod(s.shape).value
    numel = prod(x.shape)
    # Each size is at most x's element count, unless x may be empty: then any size times a 0 fits.
    out = _vars(ctx, r, numel.upper if numel.lower > 0 else max(numel.upper, value_bound(r)))
    return bind_dims(x, [s], "reshape", out, shape=out, known=list(x.shape),
                     allowzero=bool(ctx.attr("allowzero", 0)), name=ctx.name)


def expand(ctx: NodeContext, x: Tensor, i: int) -> Tensor:
    s = sizes_operand(ctx, i, "shape")
    r = prod(s.shape).value
    rank = max(r, x.ndim)
    lead = rank - x.ndim
    new = [j for j in range(rank) if j < lead or x.shape[j - lead] == 1]
    bound = value_bound(len(new))
    # x's dims that are not 1 stay (the target may only repeat them or give 1); the rest are produced.
    slots: list[Dim] = [produced_var(f"{ctx.name}:{j}", bound) if j in new else x.shape[j - lead]
                        for j in range(rank)]
    y = bind_dims(x, [s], "expand", slots, known=list(x.shape), name=ctx.name)
    return y if tuple(slots) == tuple(x.shape) else ops.expand(y, slots)


def fill(ctx: NodeContext, i: int, val: np.ndarray) -> Tensor:
    """ConstantOfShape of a run-time shape: one element broadcast to the sizes the run reads."""
    s = sizes_operand(ctx, i, "shape")
    r = prod(s.shape).value
    one = constant(val.reshape([1] * r))
    if r == 0:
        return constant(val.reshape(()))
    dims = _vars(ctx, r, value_bound(r))
    return ops.expand(bind_dims(one, [s], "values", dims, name=ctx.name), dims)


def tile(ctx: NodeContext, x: Tensor, i: int) -> Tensor:
    s = sizes_operand(ctx, i, "repeats")
    if prod(s.shape).value != x.ndim:
        raise ctx.malformed(f"repeats holds {prod(s.shape).value} entries for rank {x.ndim}")
    if x.ndim == 0:
        return x
    reps = _vars(ctx, x.ndim, value_bound(x.ndim))
    y = bind_dims(x, [s], "values", reps, name=ctx.name)
    # [d0, d1] -> [1, d0, 1, d1] -> expand [r0, d0, r1, d1] -> [r0*d0, r1*d1], as the static Tile
    inter = [v for d in x.shape for v in (IntImm(1), d)]
    big = [v for r, d in zip(reps, x.shape) for v in (r, d)]
    return ops.reshape(ops.expand(ops.reshape(y, inter), big), [d * r for d, r in zip(x.shape, reps)])


def arange(ctx: NodeContext) -> Tensor:
    """Range(start, limit, delta) of run-time scalars: start + delta * [0, n), n bound by the run."""
    start, limit, delta = (sizes_operand(ctx, j, w, floats=True) for j, w in
                           enumerate(("start", "limit", "delta")))
    for t, w in ((start, "start"), (limit, "limit"), (delta, "delta")):
        if prod(t.shape).value != 1:
            raise ctx.malformed(f"{w} must be a scalar, got shape {[str(d) for d in t.shape]}")
        if t.dtype != start.dtype:
            raise ctx.malformed(f"{w} is {t.dtype}, start is {start.dtype}")
    (n,) = _vars(ctx, 1, VALUE_ELEMENTS)
    ones = bind_dims(constant(np.ones([1], np.int64)), [start, limit, delta], "range", [n], name=ctx.name)
    # 0, 1, ..., n-1 by an exclusive running sum of ones: the iota whose length the run just bound
    iota = ops.cumsum(ops.expand(ones, [n]), 0, exclusive=True)
    dt = start.dtype
    s0, d0 = (ops.reshape(t, []) if t.ndim else t for t in (start, delta))
    if dt.is_int:
        return ops.cast(ops.add(ops.cast(s0, DType.int64), ops.mul(iota, ops.cast(d0, DType.int64))), dt)
    ct = DType.float64 if dt is DType.float64 else DType.float32
    out = ops.add(ops.cast(s0, ct), ops.mul(ops.cast(iota, ct), ops.cast(d0, ct)))
    return out if ct is dt else ops.cast(out, dt)


def top_k_input(ctx: NodeContext, x: Tensor, axis: int) -> tuple[Tensor, IntVar]:
    """x passed through a binding of K (checked to be at most the axis size), and K as a size."""
    s = sizes_operand(ctx, 1, "K")
    if prod(s.shape).value != 1:
        raise ctx.malformed(f"K must hold one integer, got shape {[str(d) for d in s.shape]}")
    n = x.shape[axis]
    (k,) = _vars(ctx, 1, n.upper)
    return bind_dims(x, [s], "values", [k], known=[n], name=ctx.name), k


def reduce_input(ctx: NodeContext, x: Tensor, i: int, keep: bool):
    """A reduction over run-time axes as one over static ones: x viewed as [kept_0, red_0, ...]
    (ops/dynamic.py's reduce rule; each pair is (d, 1) or (1, d) by the axes), permuted to
    [kept..., red...]. Returns (that tensor, the static axes to reduce, the shape to view the
    result [kept...] as when not keepdims, else None)."""
    s = sizes_operand(ctx, i, "axes")
    c, r = prod(s.shape).value, x.ndim
    if c > r:
        raise ctx.malformed(f"{c} axes for rank {r}")
    kept = [produced_var(f"{ctx.name}:kept{j}", max(d.upper, 1)) for j, d in enumerate(x.shape)]
    red = [produced_var(f"{ctx.name}:reduced{j}", max(d.upper, 1)) for j, d in enumerate(x.shape)]
    out = [] if keep else [produced_var(f"{ctx.name}:out{k}", max(d.upper for d in x.shape[k:k + c + 1]))
                           for k in range(r - c)]
    pairs = [v for kd in zip(kept, red) for v in kd]
    y = bind_dims(x, [s], "reduce", kept + red + out, shape=pairs, known=list(x.shape), allowzero=keep,
                  name=ctx.name)
    y = ops.permute(y, list(range(0, 2 * r, 2)) + list(range(1, 2 * r, 2)))
    return y, list(range(r, 2 * r)), (None if keep else out)


def view(y: Tensor, shape: list, name: str) -> Tensor:
    """y's bytes under `shape`, whose sizes the run has bound (checked to hold y's elements)."""
    return bind_dims(y, [], "view", [], shape=shape, known=shape, name=name)


def along_axis(ctx: NodeContext, x: Tensor, i: int):
    """x viewed as [outer, n, inner] for the run-time axis in input i: an op along axis 1 of that
    view is the op along the axis; `view(result, list(x.shape), ...)` gives x's shape back."""
    s = sizes_operand(ctx, i, "axis")
    if prod(s.shape).value != 1:
        raise ctx.malformed(f"axis must be one integer, got shape {[str(d) for d in s.shape]}")
    n = max(prod(x.shape).upper, 1)
    dims = [produced_var(f"{ctx.name}:{w}", n) for w in ("outer", "axis", "inner")]
    return bind_dims(x, [s], "axis", dims, shape=dims, known=list(x.shape), name=ctx.name)


def unsqueeze(ctx: NodeContext, x: Tensor, i: int, squeeze: bool) -> Tensor:
    s = sizes_operand(ctx, i, "axes")
    c = prod(s.shape).value
    r = x.ndim - c if squeeze else x.ndim + c
    if r < 0:
        raise ctx.malformed(f"{c} axes to squeeze from rank {x.ndim}")
    ub = max([d.upper for d in x.shape] + [1])
    dims = [produced_var(f"{ctx.name}:{j}", ub) for j in range(r)]
    return bind_dims(x, [s], "squeeze" if squeeze else "unsqueeze", dims, shape=dims, known=list(x.shape),
                     name=ctx.name)


def positions(ctx: NodeContext, i: int, dtype: DType, what: str = "depth") -> tuple[Tensor, Tensor]:
    """0, 1, ..., n-1 (dtype) for a count n fed as data in input i (OneHot's depth, a window's
    size; any numeric type, truncated), and n itself as a scalar of dtype."""
    t = sizes_operand(ctx, i, what, floats=True)
    if prod(t.shape).value != 1:
        raise ctx.malformed(f"{what} must be a scalar, got shape {[str(d) for d in t.shape]}")
    n64 = ops.reshape(t if t.dtype is DType.int64 else ops.cast(t, DType.int64), [1])
    (n,) = _vars(ctx, 1, VALUE_ELEMENTS)
    ones = bind_dims(constant(np.ones([1], np.int64)), [n64], "values", [n], name=ctx.name)
    iota = ops.cumsum(ops.expand(ones, [n]), 0, exclusive=True)
    return ops.cast(iota, dtype), ops.cast(ops.reshape(n64, []), dtype)


def split(ctx: NodeContext, x: Tensor, i: int, axis: int) -> list[Tensor]:
    """Split with its sizes fed as data: part j gathers offset_j + [0, size_j) along the axis,
    offsets being the sizes' running sum (data), sizes the run binds (checked to add up)."""
    s = sizes_operand(ctx, i, "split")
    k = prod(s.shape).value
    if k != ctx.num_outputs:
        raise ctx.malformed(f"{k} split sizes for {ctx.num_outputs} outputs")
    n = x.shape[axis]
    sizes = _vars(ctx, k, max(n.upper, 0))
    s64 = ops.reshape(s if s.dtype is DType.int64 else ops.cast(s, DType.int64), [k])
    ones = bind_dims(constant(np.ones([1], np.int64)), [s64], "split", sizes, known=[n], name=ctx.name)
    offsets = ops.cumsum(s64, 0, exclusive=True)
    parts = []
    for j, size in enumerate(sizes):
        iota = ops.cumsum(ops.expand(ones, [size]), 0, exclusive=True)
        off = ops.reshape(ops.slice(offsets, [j], [j + 1], [0]), [])
        parts.append(ops.gather(x, ops.add(iota, off), axis))
    return parts


def slice_(ctx: NodeContext, x: Tensor) -> Tensor:
    """Slice whose starts/ends/axes/steps include run-time tensors: one kernel clamps them by
    ONNX's rules, binds the output dims (each at most x's) and copies the slice."""
    names = ["starts", "ends"] + [w for j, w in ((3, "axes"), (4, "steps")) if ctx.has_input(j)]
    idx = [1, 2] + [j for j, w in ((3, "axes"), (4, "steps")) if ctx.has_input(j)]
    vals = []
    for j, w in zip(idx, names):
        t = sizes_operand(ctx, j, w)
        vals.append(ops.reshape(t, [prod(t.shape)]) if t.ndim == 0 else t)
    if x.ndim == 0:
        raise ctx.malformed("cannot slice a scalar")
    dims = [produced_var(f"{ctx.name}:{j}", d.upper) for j, d in enumerate(x.shape)]
    return bind_dims(x, vals, "slice", dims, shape=dims, known=list(x.shape), name=ctx.name, operands=names)


def pad(ctx: NodeContext, x: Tensor, mode: str) -> Tensor:
    """Pad whose pads (or axes) are run-time tensors: one kernel reads them, binds the output
    dims and fills them (constant, edge, reflect or wrap)."""
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ctx.unsupported(f"mode {mode!r}")
    if x.ndim == 0:
        raise ctx.malformed("cannot pad a scalar")
    p = sizes_operand(ctx, 1, "pads")
    names, vals = ["pads"], [p]
    k = prod(p.shape).value // 2
    if ctx.opset >= 18 and ctx.has_input(3):
        a = sizes_operand(ctx, 3, "axes")
        names.append("axes")
        vals.append(a)
        if prod(a.shape).value != k:
            raise ctx.malformed(f"{2 * k} pads for {prod(a.shape).value} axes")
    elif k != x.ndim or prod(p.shape).value % 2:
        raise ctx.malformed(f"{prod(p.shape).value} pads for rank {x.ndim}")
    if ctx.has_input(2):
        v = ctx.input(2, "constant_value")
        if prod(v.shape) != 1 or v.dtype != x.dtype:
            raise ctx.malformed(f"constant_value must be one {x.dtype}, got {v.dtype}{[str(d) for d in v.shape]}")
        v = ops.reshape(v, [1])
    else:
        v = constant(np.zeros([1], x.dtype.np))
    # A pad may crop (negative pads), so each size is at most x's plus the value budget.
    dims = [produced_var(f"{ctx.name}:{j}", d.upper + value_bound(x.ndim)) for j, d in enumerate(x.shape)]
    return bind_dims(x, [*vals, v], "pad", dims, shape=dims, known=list(x.shape), name=ctx.name,
                     operands=[*names, "value", f"mode:{mode}"])


def center_crop_pad(ctx: NodeContext, x: Tensor, axes: list) -> Tensor:
    """CenterCropPad to a run-time shape: per axis a centred crop (slice rule) then a centred
    zero pad (pad rule), their starts and pads computed as data from the target sizes."""
    s = sizes_operand(ctx, 1, "shape")
    if prod(s.shape).value != len(axes):
        raise ctx.malformed(f"shape holds {prod(s.shape).value} sizes for axes {axes}")
    if not all(x.shape[a].is_static for a in axes):
        raise ctx.unsupported(f"CenterCropPad of dynamic dims {[str(x.shape[a]) for a in axes]}")
    i64 = DType.int64
    t = ops.reshape(s if s.dtype is i64 else ops.cast(s, i64), [len(axes)])
    d = constant(np.array([x.shape[a].value for a in axes], np.int64))
    zero, two = constant(np.int64(0)), constant(np.int64(2))
    crop, grow = ops.maximum(ops.sub(d, t), zero), ops.maximum(ops.sub(t, d), zero)
    starts = ops.div(crop, two)   # non-negative: floor and truncation agree
    ends = ops.add(starts, ops.minimum(t, d))
    ax = constant(np.array(axes, np.int64))
    mid = [produced_var(f"{ctx.name}:crop{j}", dd.upper) for j, dd in enumerate(x.shape)]
    y = bind_dims(x, [starts, ends, ax], "slice", mid, shape=mid, known=list(x.shape), name=ctx.name,
                  operands=["starts", "ends", "axes"])
    before = ops.div(grow, two)
    pads = ops.concat([before, ops.sub(grow, before)], 0)
    out = [produced_var(f"{ctx.name}:{j}", dd.upper + value_bound(x.ndim)) for j, dd in enumerate(x.shape)]
    return bind_dims(y, [pads, ax, constant(np.zeros([1], x.dtype.np))], "pad", out, shape=out, known=mid,
                     name=ctx.name, operands=["pads", "axes", "value", "mode:constant"])


def bind_values(ctx: NodeContext, i: int, slots: list, what: str) -> tuple[Tensor, Tensor]:
    """The k integers of input i bound to `slots` (produced IntVars the run binds; a Dim where
    the graph already fixes that entry, checked equal at run time). Returns (a [1] int64 tensor
    of ones that reads after the binding, to `iota` from; the values as int64 [k])."""
    s = sizes_operand(ctx, i, what)
    k = prod(s.shape).value
    if k != len(slots):
        raise ctx.malformed(f"input {i} ({what}) holds {k} values, expected {len(slots)}")
    s64 = ops.reshape(s if s.dtype is DType.int64 else ops.cast(s, DType.int64), [k])
    ones = bind_dims(constant(np.ones([1], np.int64)), [s64], "values", slots, name=ctx.name)
    return ones, s64


def iota(ones: Tensor, n: Dim) -> Tensor:
    """0, 1, ..., n-1 (int64) for a size n bound by the binding that produced `ones`."""
    return ops.cumsum(ops.expand(ones, [n]), 0, exclusive=True)


def entry(v: Tensor, j: int) -> Tensor:
    """Element j of a 1-D tensor as a scalar."""
    return ops.reshape(ops.slice(v, [j], [j + 1], [0]), [])
