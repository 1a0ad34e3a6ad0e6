"""ONNX indexing ops: Gather, GatherElements, GatherND, ScatterElements/ScatterND, MaxUnpool,
TensorScatter, Compress, NonZero (import-time only), ReverseSequence, Trilu, OneHot, EyeLike.

The IR has one indexing op, gather. GatherElements and GatherND become a gather from the
flattened data at linear indices computed from the (possibly run-time) indices; the scatters,
Compress and ReverseSequence with import-time indices become constant index tables: out =
where(written, gather(updates, source), data) (every backend runs those); scatters with run-time
indices, MaxUnpool and TensorScatter (KV-cache writes) become the scatter_nd op. Every
decomposition is exact.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import Dim, IntVar, prod
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import bind_dims
from ._proto import elem_dtype
from . import _dynamic
from .ops_shape import _norm
from .registry import NodeContext, onnx_op


@onnx_op("Gather", min_opset=1)
def _gather(ctx: NodeContext):
    x, idx = ctx.input(0), ctx.input(1)
    if idx.dtype not in (DType.int32, DType.int64):
        raise ctx.malformed(f"indices must be int32 or int64, got {idx.dtype}")
    return ops.gather(x, idx, _norm(ctx, ctx.attr("axis", 0), x.ndim))


def _static_shape(ctx: NodeContext, t: Tensor, what: str) -> list[int]:
    if not all(d.is_static for d in t.shape):
        raise ctx.unsupported(f"{what} with dynamic dims {[str(d) for d in t.shape]}")
    return [d.value for d in t.shape]


def _wrap(idx: Tensor, n) -> Tensor:
    """Negative indices count from the end."""
    return ops.where(ops.less(idx, 0), ops.add(idx, n), idx)


@onnx_op("GatherElements", min_opset=11)
def _gather_elements(ctx: NodeContext):
    # out[i..] = x[i.. with i_axis replaced by idx[i..]]: one gather from the flattened data at
    # linear index base[i..] + idx[i..] * stride_axis, with base a constant of the static shapes.
    # base does not vary along the axis, so the indices may have a dynamic length there (BERT's
    # token types gathered at position_ids[:, :seq] in a dynamic-seq export): base broadcasts.
    x, idx = ctx.input(0), ctx.input(1)
    xs = _static_shape(ctx, x, "GatherElements data")
    if len(xs) != idx.ndim:
        raise ctx.malformed(f"data rank {len(xs)} and indices rank {idx.ndim} differ")
    axis = _norm(ctx, ctx.attr("axis", 0), len(xs))
    if not all(d.is_static for j, d in enumerate(idx.shape) if j != axis):
        raise ctx.unsupported(f"GatherElements indices with dynamic dims {[str(d) for d in idx.shape]} "
                              f"other than the gathered axis {axis}")
    ish = [1 if j == axis else d.value for j, d in enumerate(idx.shape)]
    strides = np.cumprod([1] + xs[::-1][:-1])[::-1]
    grid = np.indices(ish, dtype=np.int64)
    grid[axis] = 0
    base = np.tensordot(strides, grid, axes=1).astype(idx.dtype.np)
    lin = ops.add(ops.mul(_wrap(idx, xs[axis]), int(strides[axis])), constant(base))
    return ops.gather(ops.reshape(x, [-1]), lin, 0)


@onnx_op("GatherND", min_opset=11)
def _gather_nd(ctx: NodeContext):
    x, idx = ctx.input(0), ctx.input(1)
    b = ctx.attr("batch_dims", 0)
    if b == 0 and idx.ndim >= 1 and idx.shape[-1].is_static \
            and not all(d.is_static for d in list(x.shape) + list(idx.shape)):
        return _gather_nd_dynamic(ctx, x, idx)
    xs, ish = _static_shape(ctx, x, "GatherND data"), _static_shape(ctx, idx, "GatherND indices")
    k = ish[-1]
    if b + k > len(xs):
        raise ctx.malformed(f"index depth {k} + batch_dims {b} exceeds data rank {len(xs)}")
    # Rows of x: batch dims and the k indexed dims flattened; the slice below them stays whole.
    inner = xs[b + k:]
    bsize = int(np.prod(xs[:b], dtype=np.int64))
    strides = np.cumprod([1] + xs[b:b + k][::-1][:-1])[::-1].astype(np.int64)
    lin = None
    for j in range(k):
        part = ops.reshape(ops.slice(idx, [j], [j + 1], [len(ish) - 1]), ish[:-1])
        term = ops.mul(_wrap(part, xs[b + j]), int(strides[j]))
        lin = term if lin is None else ops.add(lin, term)
    if lin is None:
        lin = constant(np.zeros(ish[:-1], idx.dtype.np))
    nk = int(np.prod(xs[b:b + k], dtype=np.int64))
    if b:
        batch_base = (np.arange(bsize, dtype=np.int64) * nk).reshape(xs[:b] + [1] * (len(ish) - 1 - b))
        lin = ops.add(lin, constant(batch_base.astype(idx.dtype.np)))
    rows = ops.reshape(x, [bsize * nk] + inner)
    return ops.gather(rows, lin, 0)


def _dim_value(d: Dim) -> Tensor:
    """A dim's size as an int64 scalar tensor: for a dynamic d, the sum of a table of ones cut to d
    at run time (d is bounded, so the table is)."""
    if d.is_static:
        return constant(np.int64(d.value))
    return ops.reduce_sum(ops.slice(constant(np.ones(d.upper, np.int64)), [0], [d], [0]), axes=[0])


def _gather_nd_dynamic(ctx: NodeContext, x: Tensor, idx: Tensor) -> Tensor:
    """GatherND without batch dims over dynamic shapes (transformers' vmapped mask functions gather
    attention_mask[batch_idx, kv_idx] over [batch, seq]): the same linear index as the static path,
    with the strides of dynamic dims computed as int64 scalars in the graph."""
    k = idx.shape[-1].value
    if k == 0:
        raise ctx.unsupported("GatherND with index depth 0 over dynamic shapes")
    if k > x.ndim:
        raise ctx.malformed(f"index depth {k} exceeds data rank {x.ndim}")
    if idx.dtype not in (DType.int32, DType.int64):
        raise ctx.malformed(f"indices must be int32 or int64, got {idx.dtype}")
    lead = list(idx.shape[:-1])
    ind = ops.cast(idx, DType.int64) if idx.dtype is not DType.int64 else idx
    lin, stride = None, None
    for j in reversed(range(k)):  # stride of indexed dim j: the product of the indexed dims after it
        n = _dim_value(x.shape[j])
        part = ops.reshape(ops.slice(ind, [j], [j + 1], [idx.ndim - 1]), lead)
        term = _wrap(part, n)
        term = term if stride is None else ops.mul(term, stride)
        lin = term if lin is None else ops.add(lin, term)
        stride = n if stride is None else ops.mul(stride, n)
    rows = ops.reshape(x, [prod(list(x.shape[:k]))] + list(x.shape[k:]))
    return ops.gather(rows, lin, 0)


# -- masks and one-hots ---------------------------------------------------------------------------

def _positions(d: Dim) -> Tensor:
    """arange(d) as an int64 tensor; for a dynamic d, a table over d's whole range cut to d at run
    time (as Range does), so a causal mask over a dynamic [seq, seq] needs no static shape."""
    if d.is_static:
        return constant(np.arange(d.value, dtype=np.int64))
    return ops.slice(constant(np.arange(d.upper, dtype=np.int64)), [0], [d], [0])


@onnx_op("Trilu", min_opset=14)
def _trilu(ctx: NodeContext):
    x = ctx.input(0)
    if x.ndim < 2:
        raise ctx.malformed(f"the input must have rank 2 or more, got shape {[str(d) for d in x.shape]}")
    n, m = x.shape[-2], x.shape[-1]
    # Element (i, j) is kept when j - i >= k (upper) or <= k (lower); k may be a run-time scalar.
    if n.is_static and m.is_static:  # the common case: one constant table, nothing at run time
        diff = constant(np.arange(m.value, dtype=np.int64)[None, :] - np.arange(n.value, dtype=np.int64)[:, None])
    else:  # column index minus row index, broadcast from [1, m] and [n, 1]
        diff = ops.sub(ops.unsqueeze(_positions(m), [0]), ops.unsqueeze(_positions(n), [1]))
    if ctx.has_input(1):
        k = ctx.input(1)
        if k.dtype != DType.int64:
            raise ctx.malformed(f"k must be int64, got {k.dtype}")
        k = ops.reshape(k, [])
    else:
        k = 0
    keep = (ops.greater_equal if ctx.attr("upper", 1) else ops.less_equal)(diff, k)
    zero = False if x.dtype == DType.bool else 0
    return ops.where(keep, x, zero)


@onnx_op("OneHot", min_opset=9)
def _one_hot(ctx: NodeContext):
    idx = ctx.input(0)
    values = ctx.input(2)
    if idx.dtype.is_float:
        idx = ops.cast(idx, "int64")
    if not idx.dtype.is_int:
        raise ctx.malformed(f"indices must be numeric, got {idx.dtype}")
    axis = _norm(ctx, ctx.attr("axis", -1), idx.ndim + 1)
    shape = [1] * (idx.ndim + 1)
    if _dynamic.run_time(ctx, 1):  # depth fed as data: an output size the run binds
        pos, depth = _dynamic.positions(ctx, 1, idx.dtype)
        shape[axis] = pos.shape[0]
        pos = ops.reshape(pos, shape)
    else:
        depth = int(ctx.require_const(1, "depth").reshape(-1)[0])
        shape[axis] = depth
        pos = constant(np.arange(depth, dtype=idx.dtype.np).reshape(shape))
    hit = ops.equal(ops.unsqueeze(_wrap(idx, depth), [axis]), pos)
    off = ops.reshape(ops.slice(values, [0], [1], [0]), [])
    on = ops.reshape(ops.slice(values, [1], [2], [0]), [])
    return ops.where(hit, on, off)


@onnx_op("EyeLike", min_opset=9)
def _eye_like(ctx: NodeContext):
    x = ctx.input(0)
    if x.ndim != 2 or not all(d.is_static for d in x.shape):
        raise ctx.unsupported("EyeLike needs a 2-D input with static dims")
    dt = x.dtype if not ctx.has_attr("dtype") else elem_dtype(ctx.attr("dtype"), f"{ctx.label}: dtype")
    n, m = x.shape[0].value, x.shape[1].value
    return ctx.constant_value(np.eye(n, m, ctx.attr("k", 0), dtype=dt.np))


# -- scatters, compress, reverse: constant index tables ---------------------------------------------

def _flat_take(x: Tensor, idx: np.ndarray) -> Tensor:
    """x.flatten()[idx] for a constant index array (any shape)."""
    return ops.gather(ops.reshape(x, [-1]), constant(np.ascontiguousarray(idx, np.int64)), 0)


_REDUCE = {"add": ops.add, "mul": ops.mul, "max": ops.maximum, "min": ops.minimum}


def _scatter_rows(ctx: NodeContext, data: Tensor, updates: Tensor, dst: np.ndarray, row: list[int]) -> Tensor:
    """data viewed as rows of shape `row`; update row i (of updates viewed alike) goes to row dst[i].

    reduction 'none': a later update of the same row wins (ONNX leaves duplicates undefined).
    add/mul/max/min: row r becomes op(...op(op(data[r], u_1), u_2)..., u_m) over the updates that
    target it, in index order; pass j gathers each row's j-th update, or the data row itself
    (a no-op for every reduction but add/mul, which take a neutral element instead)."""
    red = ctx.attr("reduction", "none")
    if red not in ("none", *_REDUCE):
        raise ctx.unsupported(f"reduction '{red}'")
    ds = _static(ctx, data, "data")
    nrows = int(np.prod(ds, dtype=np.int64)) // max(int(np.prod(row, dtype=np.int64)), 1)
    rows = ops.reshape(data, [nrows] + row)
    upd = ops.reshape(updates, [len(dst)] + row)
    if red == "none":
        src = np.full(nrows, -1, np.int64)
        src[dst] = np.arange(len(dst))
        written = src >= 0
        picked = ops.gather(upd, constant(np.where(written, src, 0)), 0)
        mask = constant(written.reshape([nrows] + [1] * len(row)))
        return ops.reshape(ops.where(mask, picked, rows), ds)
    order: list[list[int]] = [[] for _ in range(nrows)]
    for i, r in enumerate(dst.tolist()):
        order[r].append(i)
    acc = rows
    for j in range(max((len(o) for o in order), default=0)):
        has = np.array([len(o) > j for o in order])
        src = np.array([o[j] if len(o) > j else 0 for o in order], np.int64)
        picked = ops.gather(upd, constant(src), 0)
        mask = constant(has.reshape([nrows] + [1] * len(row)))
        acc = ops.where(mask, _REDUCE[red](acc, picked), acc)
    return ops.reshape(acc, ds)


def _static(ctx: NodeContext, t: Tensor, what: str) -> list[int]:
    return _static_shape(ctx, t, f"{ctx.op_type} {what}")


def _runtime_scatter(ctx: NodeContext, data: Tensor, idx: Tensor, updates: Tensor) -> Tensor:
    """ScatterND through the scatter_nd op: indices that are data, checked by the kernel at run time."""
    red = ctx.attr("reduction", "none")
    if red not in ops.SCATTER_REDUCTIONS:
        raise ctx.unsupported(f"reduction '{red}'")
    if idx.dtype not in (DType.int32, DType.int64):
        raise ctx.malformed(f"indices must be int32 or int64, got {idx.dtype}")
    return ops.scatter_nd(data, idx, updates, red, name=ctx.name)


@onnx_op("ScatterElements", "Scatter", min_opset=9)  # Scatter (opsets 9-10): the same op, renamed
def _scatter_elements(ctx: NodeContext):
    data, updates = ctx.input(0), ctx.input(2)
    ds = _static(ctx, data, "data")
    axis = _norm(ctx, ctx.attr("axis", 0), len(ds))
    if ctx.const(1) is None:
        # Run-time indices: element i of updates goes to data[i with i_axis replaced by idx[i]],
        # i.e. a ScatterND whose index tuples are the constant coordinates of i with the axis
        # coordinate taken from idx (the kernel wraps and bounds-checks it).
        idx = ctx.input(1)
        ish = _static(ctx, idx, "indices")
        if ish != _static(ctx, updates, "updates") or len(ish) != len(ds):
            raise ctx.malformed(f"indices {ish}, updates and data (rank {len(ds)}) must agree in shape/rank")
        idx = ops.cast(idx, "int64") if idx.dtype == DType.int32 else idx
        grid = np.indices(ish, dtype=np.int64)
        cols = [ops.unsqueeze(idx if d == axis else constant(grid[d]), [len(ish)]) for d in range(len(ish))]
        return _runtime_scatter(ctx, data, ops.concat(cols, len(ish)), updates)
    idx = ctx.require_const(1, "indices").astype(np.int64)
    if idx.shape != tuple(_static(ctx, updates, "updates")):
        raise ctx.malformed(f"indices {list(idx.shape)} and updates differ in shape")
    if ((idx < -ds[axis]) | (idx >= ds[axis])).any():
        raise ctx.malformed(f"an index is out of range for axis {axis} of size {ds[axis]}")
    coords = list(np.indices(idx.shape, dtype=np.int64))
    coords[axis] = np.where(idx < 0, idx + ds[axis], idx)
    dst = np.ravel_multi_index(tuple(c.reshape(-1) for c in coords), ds)
    return _scatter_rows(ctx, data, updates, dst, [])


@onnx_op("ScatterND", min_opset=11)
def _scatter_nd(ctx: NodeContext):
    data, updates = ctx.input(0), ctx.input(2)
    if ctx.const(1) is None:  # run-time indices: the scatter_nd op (constant ones: index tables below)
        return _runtime_scatter(ctx, data, ctx.input(1), updates)
    idx = ctx.require_const(1, "indices").astype(np.int64)
    ds = _static(ctx, data, "data")
    k = idx.shape[-1]
    if k > len(ds):
        raise ctx.malformed(f"index depth {k} exceeds data rank {len(ds)}")
    lead = idx.reshape(-1, k)
    dims = np.asarray(ds[:k], np.int64)
    if ((lead < -dims) | (lead >= dims)).any():
        raise ctx.malformed("an index is out of range")
    lead = np.where(lead < 0, lead + dims, lead)
    dst = np.ravel_multi_index(tuple(lead.T), ds[:k]) if k else np.zeros(len(lead), np.int64)
    return _scatter_rows(ctx, data, updates, dst, ds[k:])


@onnx_op("Compress", min_opset=9)
def _compress(ctx: NodeContext):
    x = ctx.input(0)
    if ctx.const(1) is None and ctx.has_input(1):
        return _compress_run_time(ctx, x)
    cond = ctx.require_const(1, "condition").astype(bool).reshape(-1)
    if not ctx.has_attr("axis"):
        n = int(np.prod(_static(ctx, x, "input"), dtype=np.int64))
        return _flat_take(x, np.nonzero(cond[:n])[0])
    axis = _norm(ctx, ctx.attr("axis"), x.ndim)
    keep = np.nonzero(cond)[0]
    if x.shape[axis].is_static and len(keep) and keep[-1] >= x.shape[axis].value:
        raise ctx.malformed(f"condition selects index {keep[-1]} of an axis of size {x.shape[axis]}")
    return ops.gather(x, constant(keep.astype(np.int64)), axis)


def _compress_run_time(ctx: NodeContext, x):
    """A run-time condition: the kept indices are NonZero's (a size the run binds), then a gather."""
    cond = ctx.input(1, "condition")
    if cond.ndim != 1:
        raise ctx.malformed(f"condition must be 1-D, got rank {cond.ndim}")
    if cond.dtype != DType.bool:
        cond = ops.cast(cond, DType.bool)
    keep = ops.nonzero(cond, name=ctx.name)
    keep = ops.reshape(keep, [keep.shape[1]])
    if not ctx.has_attr("axis"):
        return ops.gather(ops.reshape(x, [prod(x.shape)]), keep, 0)
    return ops.gather(x, keep, _norm(ctx, ctx.attr("axis"), x.ndim))


@onnx_op("NonZero", min_opset=9)
def _nonzero(ctx: NodeContext):
    # Import-time data folds; run-time data has a count that the kernel binds during the run.
    v = ctx.const(0)
    if v is None:
        return ops.nonzero(ctx.input(0), name=ctx.name)
    return ctx.constant_value(np.array(np.nonzero(v), dtype=np.int64).reshape(max(v.ndim, 1), -1))


def _reverse_sequence_run_time(ctx: NodeContext, x):
    """Run-time lengths: the same index map as the constant table below, computed as data (the
    output's shape does not depend on them), then one flat gather."""
    xs = _static(ctx, x, "input")
    b_ax, t_ax = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
    lens = ctx.input(1, "sequence_lens")
    if {b_ax, t_ax} != {0, 1} or lens.ndim != 1 or lens.shape[0] != xs[b_ax] or not lens.dtype.is_int:
        raise ctx.malformed(f"batch_axis/time_axis must be 0 and 1 and sequence_lens hold {xs[b_ax]} integers")
    coords = list(np.indices(xs, dtype=np.int64))
    strides = np.array([int(np.prod(xs[k + 1:], dtype=np.int64)) for k in range(len(xs))], np.int64)
    t = constant(coords[t_ax])
    n = ops.gather(ops.cast(lens, DType.int64), constant(coords[b_ax]), 0)      # each element's length
    n = ops.minimum(ops.maximum(n, constant(np.int64(0))), constant(np.int64(xs[t_ax])))
    rev = ops.sub(ops.sub(n, constant(np.int64(1))), t)
    tt = ops.where(ops.less(t, n), rev, t)
    coords[t_ax] = np.zeros_like(coords[t_ax])
    base = constant(sum(c * st for c, st in zip(coords, strides)))              # the flat index at time 0
    flat = ops.add(base, ops.mul(tt, constant(np.int64(strides[t_ax]))))
    return ops.gather(ops.reshape(x, [int(np.prod(xs, dtype=np.int64))]), flat, 0)


@onnx_op("ReverseSequence", min_opset=10)
def _reverse_sequence(ctx: NodeContext):
    x = ctx.input(0)
    if ctx.const(1) is None and ctx.has_input(1):
        return _reverse_sequence_run_time(ctx, x)
    lens = ctx.require_const(1, "sequence_lens").astype(np.int64).reshape(-1)
    xs = _static(ctx, x, "input")
    b_ax, t_ax = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
    if {b_ax, t_ax} != {0, 1} or len(lens) != xs[b_ax]:
        raise ctx.malformed(f"batch_axis/time_axis must be 0 and 1 and sequence_lens hold {xs[b_ax]} entries")
    coords = list(np.indices(xs, dtype=np.int64))
    b, t = coords[b_ax], coords[t_ax]
    n = np.clip(lens[b], 0, xs[t_ax])
    coords[t_ax] = np.where(t < n, n - 1 - t, t)
    return _flat_take(x, np.ravel_multi_index(tuple(coords), xs))


@onnx_op("MaxUnpool", min_opset=9)
def _max_unpool(ctx: NodeContext):
    # Y (zeros of the inferred shape) with Y.flat[I] = X: a scatter_nd at run-time indices, which
    # the kernel bounds-checks; a larger output_shape keeps Y in its leading corner (onnx's reference).
    x, idx = ctx.input(0, "X"), ctx.input(1, "I")
    ks = ctx.attr("kernel_shape")
    nsp = len(ks)
    xs = _static(ctx, x, "X")
    if len(xs) != nsp + 2:
        raise ctx.malformed(f"X has rank {len(xs)}, kernel_shape {ks} wants {nsp + 2}")
    strides = ctx.attr("strides", [1] * nsp)
    pads = ctx.attr("pads", [0] * 2 * nsp)
    inferred = xs[:2] + [(xs[2 + d] - 1) * strides[d] - (pads[d] + pads[nsp + d]) + ks[d] for d in range(nsp)]
    if min(inferred) < 1:
        raise ctx.malformed(f"the inferred output shape {inferred} is empty")
    if idx.dtype != DType.int64 or _static(ctx, idx, "I") != xs:
        raise ctx.malformed(f"I must be int64 of X's shape {xs}")
    numel = int(np.prod(inferred, dtype=np.int64))
    zero = ops.expand(constant(np.zeros(1, x.dtype.np)), [numel])  # no numel-sized constant in the weights
    y = ops.reshape(ops.scatter_nd(zero, ops.reshape(idx, [-1, 1]), ops.reshape(x, [-1]), name=ctx.name), inferred)
    if ctx.has_input(2) and _dynamic.run_time(ctx, 2):
        return _unpool_to_run_time_shape(ctx, y, inferred)
    if ctx.has_input(2):
        out = [int(v) for v in ctx.require_const(2, "output_shape").reshape(-1)]
        if len(out) != len(inferred) or any(o < i for o, i in zip(out, inferred)):
            raise ctx.unsupported(f"output_shape {out} smaller than the inferred shape {inferred}")
        if out != inferred:
            y = ops.pad(y, [(0, o - i) for o, i in zip(out, inferred)])
    return y


def _unpool_to_run_time_shape(ctx: NodeContext, y: Tensor, inferred: list[int]) -> Tensor:
    """output_shape fed as data: y zero-padded at the end of each axis to it, by the pad rule
    (pads [0..., output_shape - inferred]). Each output dim is a produced size whose lower bound
    is the inferred one, so a smaller output_shape is a RuntimeInputError naming the node."""
    s = _dynamic.sizes_operand(ctx, 2, "output_shape")
    r = len(inferred)
    if prod(s.shape).value != r:
        raise ctx.malformed(f"output_shape holds {prod(s.shape).value} values for rank {r}")
    want = ops.reshape(s if s.dtype is DType.int64 else ops.cast(s, DType.int64), [r])
    pads = ops.concat([constant(np.zeros(r, np.int64)), ops.sub(want, constant(np.array(inferred, np.int64)))], 0)
    dims = [IntVar(f"{ctx.name}:{j}", d, d + _dynamic.value_bound(r), produced=True) for j, d in enumerate(inferred)]
    return bind_dims(y, [pads, constant(np.zeros([1], y.dtype.np))], "pad", dims, shape=dims, known=inferred,
                     name=ctx.name, operands=["pads", "value", "mode:constant"])


@onnx_op("TensorScatter", min_opset=24)
def _tensor_scatter(ctx: NodeContext):
    # A KV-cache write: update's position s along `axis` of prefix (b, ...) goes to cache position
    # write_indices[b] + s (mod the cache length when circular). One scatter_nd whose index tuples
    # are the constant prefix coordinates plus that run-time position.
    cache, upd = ctx.input(0, "past_cache"), ctx.input(1, "update")
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.malformed(f"mode '{mode}' is not linear or circular")
    cs, us = _static(ctx, cache, "past_cache"), _static(ctx, upd, "update")
    axis = _norm(ctx, ctx.attr("axis", -2), len(cs))
    if axis == 0 or len(us) != len(cs) or any(c != u for i, (c, u) in enumerate(zip(cs, us)) if i != axis) \
            or us[axis] > cs[axis]:
        raise ctx.malformed(f"update {us} must match past_cache {cs} except along axis {axis} (not 0), no longer there")
    grid = np.indices(us[:axis + 1], dtype=np.int64)                   # [axis + 1, *prefix, L]
    pos = constant(grid[axis])                                          # s
    if ctx.has_input(2):
        w = ctx.input(2, "write_indices")
        if w.dtype != DType.int64:
            raise ctx.malformed(f"write_indices must be int64, got {w.dtype}")
        pos = ops.add(pos, ops.gather(w, constant(grid[0]), 0))         # + write_indices[b]
    if mode == "circular":
        pos = ops.mod(pos, cs[axis])
    cols = [ops.unsqueeze(constant(grid[d]) if d < axis else pos, [axis + 1]) for d in range(axis + 1)]
    return ops.scatter_nd(cache, ops.concat(cols, axis + 1), upd, name=ctx.name)
@onnx_op("NonMaxSuppression", min_opset=10)
def _non_max_suppression(ctx: NodeContext):
    # The number of kept boxes depends on the scores: a size the kernel binds (ops/nms.py).
    boxes, scores = ctx.input(0, "boxes"), ctx.input(1, "scores")
    if boxes.dtype != DType.float32 or scores.dtype != DType.float32:
        raise ctx.unsupported(f"boxes/scores of {boxes.dtype}/{scores.dtype} (float32 only)")
    if boxes.ndim != 3 or scores.ndim != 3:
        raise ctx.malformed("boxes must be [batch, boxes, 4] and scores [batch, classes, boxes]")

    def scalar(i: int, what: str, dt: DType, default):
        if not ctx.has_input(i):
            return constant(np.array([default], dt.np))
        t = ctx.input(i, what)
        if t.dtype != dt or not all(d.is_static for d in t.shape) or int(np.prod([d.value for d in t.shape])) != 1:
            raise ctx.malformed(f"{what} must hold one {dt}, got {t.dtype}{[str(d) for d in t.shape]}")
        return ops.reshape(t, [1])
    args = [scalar(2, "max_output_boxes_per_class", DType.int64, 0), scalar(3, "iou_threshold", DType.float32, 0.0),
            scalar(4, "score_threshold", DType.float32, 0.0)]
    return ops.non_max_suppression(boxes, scores, *args, center_point_box=bool(ctx.attr("center_point_box", 0)),
                                   score_threshold=ctx.has_input(4), name=ctx.name)


@onnx_op("Unique", min_opset=11)
def _unique(ctx: NodeContext):
    # The number of distinct values depends on the data: a size the kernel binds (ops/unique.py).
    x = ctx.input(0, "X")
    if x.dtype == DType.bool:
        raise ctx.unsupported("Unique over bool")
    axis = ctx.attr("axis", None)
    if axis is not None:
        axis = _norm(ctx, axis, x.ndim)
    return list(ops.unique(x, axis, bool(ctx.attr("sorted", 1)), name=ctx.name))[:ctx.num_outputs]
