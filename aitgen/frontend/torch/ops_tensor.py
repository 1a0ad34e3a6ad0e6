"""Shape and memory ATen ops (view, permute, expand, cat, split, slice, select, pad, index) and the
factories (arange, full, zeros, ones, scalar_tensor, *_like), which become constants.

permute/transpose/t only change a Value's layout: no op is emitted until something needs torch's
order. A factory whose size is dynamic becomes a constant broadcast to it (full) or a constant
table cut to it (arange(seq) is arange(seq.upper)[:seq]).
"""
from __future__ import annotations

import builtins

import numpy as np

from ... import ops
from ...ir.dims import Dim, IntImm
from ...ir.dtype import DType
from ...ir.op import OpKind
from ._value import Value, compose, norm_perm
from .ops_elementwise import scalar
from .registry import aten

_INT64_MAX = (1 << 63) - 1

# -- views and layouts ----------------------------------------------------------------------------


@aten("permute.default")
def _permute(cx, a):
    v = a["self"]
    perm = norm_perm([int(d) % v.ndim for d in a["dims"]])
    return Value(v.t, compose(perm, v.perm, v.ndim), v.views if perm is None else {})


@aten("transpose.int", "t.default", "numpy_T.default")
def _transpose(cx, a):
    v = a["self"]
    if v.ndim < 2:
        return v
    d0, d1 = (int(a["dim0"]) % v.ndim, int(a["dim1"]) % v.ndim) if "dim0" in a else (0, 1)
    p = list(range(v.ndim))
    p[d0], p[d1] = p[d1], p[d0]
    return Value(v.t, compose(tuple(p), v.perm, v.ndim))


def _same_shape(v: Value, dims) -> bool:
    return len(dims) == v.ndim and all(d == s for d, s in zip(dims, v.shape))


@aten("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default")
def _view(cx, a):
    v = a["self"]
    dims = [-1 if isinstance(d, int) and d == -1 else cx.dim(d) for d in a["size"]]
    if -1 not in dims and _same_shape(v, dims):
        return v
    if v.perm is not None:
        kept = _view_in_layout(v, cx.dims(cx.out_fake().shape))
        if kept is not None:
            return kept
    x = cx.tensor(v)
    p = x.producer
    if p is not None and p.kind is OpKind.RESHAPE:
        # a view of a view reads the first one's input: torch's [B, H, S, S] -> [B*H, S, S] -> [B, H, S, S]
        # around a bmm then leaves no reshape at all, and attention stays recognisable
        x = p.inputs[0]
        if -1 not in dims and len(dims) == x.ndim and all(d == s for d, s in zip(dims, x.shape)):
            return x
    return ops.reshape(x, dims)


def _is_one(d: Dim) -> bool:
    return d.is_static and d.value == 1


def _view_in_layout(v: Value, target: list[Dim]):
    """A view of a permuted Value done on the stored tensor, when the view only merges or splits
    dims that are stored next to each other and in order: NHWC [N, C, H, W] -> [N, C, H*W] is the
    stored [N, H, W, C] -> [N, H*W, C], still permuted, and no data moves. None when it is not."""
    src = list(v.shape)
    big_s = [i for i, d in enumerate(src) if not _is_one(d)]
    big_t = [j for j, d in enumerate(target) if not _is_one(d)]
    groups, i, j = [], 0, 0  # (source dims, target dims) with equal products
    while i < len(big_s) or j < len(big_t):
        if i >= len(big_s) or j >= len(big_t):
            return None
        gs, gt = [big_s[i]], [big_t[j]]
        ps, pt = src[big_s[i]], target[big_t[j]]
        i, j = i + 1, j + 1
        while ps != pt:
            # grow the side whose product is provably the smaller part of the other
            if pt.exact_div(ps) is not None and i < len(big_s):
                gs.append(big_s[i])
                ps = ps * src[big_s[i]]
                i += 1
            elif ps.exact_div(pt) is not None and j < len(big_t):
                gt.append(big_t[j])
                pt = pt * target[big_t[j]]
                j += 1
            else:
                return None
        groups.append((gs, gt))
    stored = [p for p in v.perm if not _is_one(src[p])]  # source dims in stored order
    order: list[int] = []
    for gs, gt in groups:
        at = stored.index(gs[0])
        if stored[at:at + len(gs)] != gs:  # not stored together and in order: data must move
            return None
    for p in stored:
        for gs, gt in groups:
            if gs[0] == p:
                order += gt
    order += [j for j, d in enumerate(target) if _is_one(d)]  # new unit dims: anywhere will do
    t = ops.reshape(v.t, [target[j] for j in order])
    # stored axis k holds target dim order[k]
    return Value(t, norm_perm(order))


@aten("unsqueeze.default")
def _unsqueeze(cx, a):
    v = a["self"]
    kept = _view_in_layout(v, cx.dims(cx.out_fake().shape)) if v.perm is not None else None
    return kept if kept is not None else ops.unsqueeze(cx.tensor(v), int(a["dim"]) % (v.ndim + 1))


@aten("squeeze.dim", "squeeze.dims", "squeeze.default")
def _squeeze(cx, a):
    v = a["self"]
    dims = a.get("dim")
    if dims is None:
        dims = range(v.ndim)
    dims = [dims] if isinstance(dims, int) else dims
    # torch leaves a dim that is not 1 in place (no error); a dynamic dim is never squeezed
    drop = [d % max(v.ndim, 1) for d in dims if v.ndim and v.shape[d % v.ndim] == 1]
    if not drop:
        return v
    kept = _view_in_layout(v, cx.dims(cx.out_fake().shape)) if v.perm is not None else None
    return kept if kept is not None else ops.squeeze(cx.tensor(v), drop)


@aten("expand.default", "expand_copy.default")
def _expand(cx, a):
    v = a["self"]
    size = list(a["size"])
    lead = len(size) - v.ndim
    dims = [v.shape[i - lead] if (isinstance(d, int) and d == -1) else cx.dim(d) for i, d in enumerate(size)]
    if _same_shape(v, dims):
        return v  # torch's expand of bmm operands to their own shape: nothing to do, layout kept
    return ops.expand(cx.tensor(v), dims)


@aten("cat.default", "concat.default")
def _cat(cx, a):
    vs = [v for v in a["tensors"] if not (v.ndim == 1 and v.shape[0] == 0)]  # torch skips legacy empties
    dim = int(a["dim"]) % vs[0].ndim
    perm = vs[0].perm
    if perm is not None and all(v.perm == perm for v in vs):  # concat in the shared layout (NHWC)
        return Value(ops.concat([v.t for v in vs], axis=perm.index(dim)), perm)
    return ops.concat([cx.tensor(v) for v in vs], axis=dim)


@aten("split_with_sizes.default", "split.Tensor", "split_with_sizes_copy.default", "split_copy.Tensor")
def _split(cx, a):
    v = a["self"]
    dim = int(a["dim"]) % v.ndim
    n = v.shape[dim]
    if "split_sizes" in a:
        sizes = cx.dims(a["split_sizes"])
    else:  # chunks of split_size, the last one smaller
        step = scalar(cx, a["split_size"])
        if not n.is_static:
            cx.fail(f"split of dynamic dim {n} into chunks of {step}")
        sizes = [IntImm(min(step, n.value - i)) for i in range(0, n.value, step)] or [IntImm(0)]
    if len(sizes) == 1:
        return (v,)
    ax = dim if v.perm is None else v.perm.index(dim)  # split the stored axis: the layout stays
    return tuple(Value(t, v.perm) for t in ops.split(v.t, sizes, axis=ax))


@aten("unbind.int")
def _unbind(cx, a):
    v = a["self"]
    dim = int(a["dim"]) % v.ndim
    parts = ops.split(cx.tensor(v), v.shape[dim].value, axis=dim) if v.shape[dim] != 1 else [cx.tensor(v)]
    return tuple(ops.squeeze(p, [dim]) for p in parts)


def _index(i):
    """A start/end bound as an int or a Dim (negative ints count from the end, as in Python)."""
    if i is None:
        return None
    if isinstance(i, Dim) and i.is_static:
        i = i.value
    return i


@aten("slice.Tensor", "slice_copy.Tensor")
def _slice(cx, a):
    v = a["self"]
    dim = int(a["dim"]) % v.ndim
    n = v.shape[dim]
    start, end, step = _index(a["start"]), _index(a["end"]), int(a["step"])
    if isinstance(end, int) and end >= _INT64_MAX // 2:
        end = None
    if (start in (None, 0)) and (end is None or (isinstance(end, Dim) and end == n)) and step == 1:
        return v  # the whole dim
    ax = dim if v.perm is None else v.perm.index(dim)  # slice the stored axis: the layout stays
    if isinstance(end, Dim) and n.is_static or isinstance(start, Dim):
        if isinstance(start, Dim):
            cx.fail(f"a slice starting at the dynamic position {start}")
        return Value(ops.slice(v.t, [start or 0], [end], [ax], [step]), v.perm)
    idx = (builtins.slice(None),) * ax + (builtins.slice(start, end, step),)
    return Value(ops.getitem(v.t, idx), v.perm)


@aten("select.int", "select_copy.int")
def _select(cx, a):
    v = a["self"]
    dim, index = int(a["dim"]) % v.ndim, a["index"]
    if isinstance(index, Dim):
        if not index.is_static:
            cx.fail(f"select at the dynamic index {index}")
        index = index.value
    if v.perm is not None:  # pick from the stored axis; the other dims keep their stored order
        ax = v.perm.index(dim)
        rest = [p - (p > dim) for p in v.perm if p != dim]
        return Value(ops.getitem(v.t, (builtins.slice(None),) * ax + (int(index),)), norm_perm(rest))
    return ops.getitem(cx.tensor(v), (builtins.slice(None),) * dim + (int(index),))


@aten("index_select.default")
def _index_select(cx, a):
    v = a["self"]
    return ops.gather(cx.tensor(v), cx.tensor(a["index"]), axis=int(a["dim"]) % v.ndim)


@aten("index.Tensor")
def _index_tensor(cx, a):
    idx = list(a["indices"])
    given = [i for i, t in enumerate(idx) if t is not None]
    if len(given) != 1:
        cx.fail(f"advanced indexing with {len(given)} index tensors (one is supported)")
    k = given[0]
    it = idx[k]
    if it.dtype == DType.bool:
        cx.fail("indexing with a boolean mask (its result size depends on the data)")
    return ops.gather(cx.tensor(a["self"]), cx.tensor(it), axis=k)


@aten("constant_pad_nd.default")
def _pad(cx, a):
    pads = [int(p) for p in a["pad"]]
    x = cx.tensor(a["self"])
    value = float(scalar(cx, a["value"]))
    if any(p < 0 for p in pads):  # torch crops on a negative pad: a slice first, then the rest
        starts, ends, axes = [], [], []
        for j in range(0, len(pads), 2):
            ax = x.ndim - 1 - j // 2
            lo, hi = pads[j], pads[j + 1]
            if lo < 0 or hi < 0:
                starts.append(-lo if lo < 0 else 0)
                ends.append(hi if hi < 0 else _INT64_MAX)
                axes.append(ax)
        x = ops.slice(x, starts, ends, axes)
        pads = [max(p, 0) for p in pads]
    return ops.pad(x, pads, mode="constant", value=value) if any(pads) else x


@aten("reflection_pad1d.default", "reflection_pad2d.default", "replication_pad1d.default",
      "replication_pad2d.default")
def _pad_mode(cx, a):
    mode = "reflect" if cx.node.target._opname.startswith("reflection") else "edge"
    return ops.pad(cx.tensor(a["self"]), [int(p) for p in a["padding"]], mode=mode)


@aten("flip.default")
def _flip(cx, a):
    v = a["self"]
    dims = [int(d) % v.ndim for d in a["dims"]]
    return ops.slice(cx.tensor(v), [-1] * len(dims), [-_INT64_MAX] * len(dims), dims, [-1] * len(dims))


@aten("repeat.default")
def _repeat(cx, a):
    reps = [int(scalar(cx, r)) for r in a["repeats"]]
    x = cx.tensor(a["self"])
    x = ops.reshape(x, [1] * (len(reps) - x.ndim) + list(x.shape)) if len(reps) > x.ndim else x
    # each dim d -> [r, d] broadcast, then merged: tile semantics
    inter = []
    for d in x.shape:
        inter += [IntImm(1), d]
    y = ops.reshape(x, inter)
    big = []
    for r, d in zip(reps, x.shape):
        big += [IntImm(r), d]
    y = ops.expand(y, big)
    return ops.reshape(y, [d * r for r, d in zip(reps, x.shape)])


@aten("tril.default", "triu.default")
def _tri(cx, a):
    x = cx.tensor(a["self"])
    r, c = x.shape[-2], x.shape[-1]
    if not (r.is_static and c.is_static):
        cx.fail("tril/triu of a matrix with dynamic size")
    k = int(a["diagonal"])
    keep = np.tri(r.value, c.value, k, dtype=bool)
    if cx.node.target._opname == "triu":
        keep = ~np.tri(r.value, c.value, k - 1, dtype=bool)
    return ops.where(cx.const(keep, DType.bool), x, cx.const(0, x.dtype))


# -- factories --------------------------------------------------------------------------------------

def _filled(cx, size, value):
    dt = cx.out_dtype()
    dims = cx.dims(size)
    value = scalar(cx, value)
    if all(d.is_static for d in dims):
        return cx.const(np.full([d.value for d in dims], value), dt)
    return ops.expand(cx.const(value, dt), dims)


@aten("full.default", "new_full.default")
def _full(cx, a):
    return _filled(cx, a["size"], a["fill_value"])


@aten("zeros.default", "new_zeros.default", "empty.memory_format", "new_empty.default", "empty_strided.default",
      "ones.default", "new_ones.default")
def _zeros_ones(cx, a):
    return _filled(cx, a["size"], 1 if "ones" in cx.node.target._opname else 0)


@aten("full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default")
def _like(cx, a):
    name = cx.node.target._opname
    value = a["fill_value"] if name == "full_like" else (1 if name == "ones_like" else 0)
    return _filled(cx, a["self"].shape, value)


@aten("fill.Scalar")
def _fill(cx, a):
    return _filled(cx, a["self"].shape, a["value"])


@aten("scalar_tensor.default")
def _scalar_tensor(cx, a):
    return cx.const(scalar(cx, a["s"]), cx.out_dtype())


@aten("arange.start_step", "arange.default", "arange.start")
def _arange(cx, a):
    start, step = a.get("start", 0), a.get("step", 1)
    end = a["end"]
    dt = cx.out_dtype()
    start, step = scalar(cx, start), scalar(cx, step)
    if isinstance(end, Dim) and not end.is_static:
        if start != 0 or step != 1:
            cx.fail(f"arange({start}, {end}, {step}) with a dynamic end (only arange(n) is)")
        table = cx.const(np.arange(end.upper), dt)  # the longest it can be, cut to n at run time
        return ops.slice(table, [0], [end], [0])
    end = scalar(cx, end)
    return cx.const(np.arange(start, end, step), dt)

