"""ONNX shape and data-movement ops: Shape/Size/Constant/Identity, reshapes, Transpose, Concat,
Split, Slice, Expand, Tile, Pad, Range, ConstantOfShape, Dropout (inference), DepthToSpace/SpaceToDepth.
Indexing ops (Gather*, Scatter*, OneHot, Trilu, ...) are in ops_index.py.

Shape values (targets of Reshape/Expand, ends of Slice, ...) are read with `ctx.shape_value`, so
they may hold dynamic dims computed at import time from Shape nodes.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...errors import ShapeError
from ...ir.dims import Dim, IntImm, prod
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ._proto import elem_dtype
from . import _dynamic
from .registry import NodeContext, onnx_op

_INT_MAX = 2 ** 62


def _axes_arg(ctx: NodeContext, i: int, from_opset: int = 13):
    """Axes given as an attribute before `from_opset` and as an optional input from it on."""
    if ctx.opset >= from_opset:
        return ctx.ints(i, "axes")
    a = ctx.attr("axes", None)
    return None if a is None else [int(v) for v in a]


def _norm(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.malformed(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _shape_arg(ctx: NodeContext, i: int, what: str) -> list[Dim]:
    s = ctx.shape_value(i)
    if s is None:
        if ctx.has_input(i) and ctx.const(i) is None:
            raise ctx.unsupported(ctx.needs_value(i, what))
        raise ctx.malformed(f"input {i} ({what}) must be a 1-D integer tensor")
    return s


# -- values known at import time ------------------------------------------------------------------

@onnx_op("Shape", min_opset=1)
def _shape(ctx: NodeContext):
    v = ctx.value(0)
    shape = list(v.shape) if isinstance(v, (Tensor, np.ndarray)) else None
    if shape is None:
        raise ctx.malformed("input 0 is required")
    r = len(shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", r)
    s, e = (min(max(x + r if x < 0 else x, 0), r) for x in (start, end))
    return ctx.shape_result(shape[s:e])


@onnx_op("Size", min_opset=1)
def _size(ctx: NodeContext):
    v = ctx.value(0)
    n = prod(v.shape) if isinstance(v, Tensor) else IntImm(int(np.asarray(v).size))
    return ctx.constant_value(np.int64(n.value)) if n.is_static else ctx.constant_value(np.asarray(n, dtype=object))


@onnx_op("Constant", min_opset=1)
def _constant(ctx: NodeContext):
    for key, conv in (("value", np.asarray), ("value_float", lambda v: np.float32(v)),
                      ("value_floats", lambda v: np.asarray(v, np.float32)),
                      ("value_int", lambda v: np.int64(v)), ("value_ints", lambda v: np.asarray(v, np.int64))):
        if ctx.has_attr(key):
            return ctx.constant_value(np.asarray(conv(ctx.attr(key))))
    for key in ("value_string", "value_strings", "sparse_value"):
        if ctx.has_attr(key):
            raise ctx.unsupported(f"a Constant with '{key}' is not supported")
    raise ctx.malformed("a Constant needs one of value, value_float(s), value_int(s)")


@onnx_op("Identity", "Dropout", min_opset=1)
def _identity(ctx: NodeContext):
    x = ctx.input(0)
    if ctx.op_type == "Dropout":
        if ctx.opset >= 12 and ctx.has_input(2):
            train = ctx.require_const(2, "training_mode")
            if bool(np.asarray(train).reshape(-1)[0]):
                raise ctx.unsupported("training_mode=True (random dropout) is not supported")
        if ctx.num_outputs > 1 and ctx.node.output[1]:
            return [x, ops.expand(constant(np.ones([1] * x.ndim, bool)), x.shape)]
    return x


@onnx_op("ConstantOfShape", min_opset=9)
def _constant_of_shape(ctx: NodeContext):
    v = ctx.attr("value", None)
    val = np.zeros(1, np.float32) if v is None else np.asarray(v).reshape(-1)
    if val.size != 1:
        raise ctx.malformed(f"value must hold one element, got {val.size}")
    if _dynamic.run_time(ctx, 0):
        return _dynamic.fill(ctx, 0, val)
    dims = _shape_arg(ctx, 0, "shape")
    if all(d.is_static for d in dims):
        return ctx.constant_value(np.full([d.value for d in dims], val[0], dtype=val.dtype))
    # A dynamic fill: one element broadcast at run time.
    return ops.expand(constant(val.reshape([1] * len(dims))), dims)


@onnx_op("Range", min_opset=11)
def _range(ctx: NodeContext):
    start, limit, delta = (ctx.const(i) for i in range(3))
    if any(_dynamic.run_time(ctx, i) for i in range(3)) and ctx.shape_value(1) is None:
        return _dynamic.arange(ctx)
    if start is not None and limit is not None and delta is not None:
        if start.size != 1 or limit.size != 1 or delta.size != 1:
            raise ctx.malformed("start, limit and delta must be scalars")
        start, limit, delta = (v.reshape(()) for v in (start, limit, delta))
        if float(delta) == 0:
            raise ctx.malformed("delta is 0")
        n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
        return ctx.constant_value((start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype))
    lim = ctx.shape_value(1)
    if start is None or delta is None or lim is None or len(lim) != 1 or int(delta) != 1:
        raise ctx.unsupported("only Range(start, n, 1) with a constant start and a limit known at "
                              "import time (possibly a dynamic dim) is supported")
    # arange(s, L) for a dynamic L: a table over L's whole range, cut to length L - s at run time.
    s, length = int(start), lim[0] - int(start)
    if length.lower < 0:
        raise ctx.unsupported(f"the length {length} of Range may be negative")
    table = constant(np.arange(s, s + length.upper, dtype=start.dtype))
    return ops.slice(table, [0], [length], [0])


# -- reshapes -------------------------------------------------------------------------------------

@onnx_op("Reshape", min_opset=5)
def _reshape(ctx: NodeContext):
    x = ctx.input(0)
    if _dynamic.run_time(ctx, 1):
        return _dynamic.reshape(ctx, x, 1)
    target = _shape_arg(ctx, 1, "shape")
    if ctx.attr("allowzero", 0) == 0:
        target = [x.shape[i] if d.is_static and d.value == 0 and i < x.ndim else d
                  for i, d in enumerate(target)]
    if sum(d.is_static and d.value == -1 for d in target) > 1:
        raise ctx.malformed("more than one -1 in the target shape")
    return ops.reshape(x, target)


@onnx_op("Flatten", min_opset=1)
def _flatten(ctx: NodeContext):
    x = ctx.input(0)
    axis = ctx.attr("axis", 1)
    if not -x.ndim <= axis <= x.ndim:
        raise ctx.malformed(f"axis {axis} is out of range for rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    return ops.reshape(x, [prod(x.shape[:axis]), prod(x.shape[axis:])])


@onnx_op("Squeeze", min_opset=1)
def _squeeze(ctx: NodeContext):
    x = ctx.input(0)
    if ctx.opset >= 13 and _dynamic.run_time(ctx, 1):  # axes fed as data: dims the run binds
        return _dynamic.unsqueeze(ctx, x, 1, squeeze=True)
    axes = _axes_arg(ctx, 1)
    if axes is None:
        maybe_one = [str(d) for d in x.shape if not d.is_static and d.lower <= 1]
        if maybe_one:  # whether they go depends on the run-time size
            raise ctx.unsupported(f"Squeeze without axes of dynamic dims {maybe_one} that may be 1")
        return ops.squeeze(x)
    return ops.squeeze(x, [_norm(ctx, a, x.ndim) for a in axes])


@onnx_op("Unsqueeze", min_opset=1)
def _unsqueeze(ctx: NodeContext):
    x = ctx.input(0)
    if ctx.opset >= 13 and _dynamic.run_time(ctx, 1):  # axes fed as data: dims the run binds
        return _dynamic.unsqueeze(ctx, x, 1, squeeze=False)
    axes = _axes_arg(ctx, 1)
    if axes is None:
        raise ctx.malformed("axes are required")
    return ops.unsqueeze(x, axes)


@onnx_op("Transpose", min_opset=1)
def _transpose(ctx: NodeContext):
    x = ctx.input(0)
    perm = ctx.attr("perm", None)
    perm = list(range(x.ndim))[::-1] if perm is None else perm
    return x if list(perm) == list(range(x.ndim)) else ops.permute(x, perm)


@onnx_op("DepthToSpace", min_opset=1)
def _depth_to_space(ctx: NodeContext):
    x = ctx.input(0)
    b = ctx.attr("blocksize")
    if x.ndim != 4:
        raise ctx.malformed(f"needs a 4-D input, got rank {x.ndim}")
    n, c, h, w = x.shape
    cc = c // (b * b)
    if ctx.attr("mode", "DCR") == "DCR":
        y = ops.permute(ops.reshape(x, [n, b, b, cc, h, w]), [0, 3, 4, 1, 5, 2])
    else:
        y = ops.permute(ops.reshape(x, [n, cc, b, b, h, w]), [0, 1, 4, 2, 5, 3])
    return ops.reshape(y, [n, cc, h * b, w * b])


@onnx_op("SpaceToDepth", min_opset=1)
def _space_to_depth(ctx: NodeContext):
    x = ctx.input(0)
    b = ctx.attr("blocksize")
    if x.ndim != 4:
        raise ctx.malformed(f"needs a 4-D input, got rank {x.ndim}")
    n, c, h, w = x.shape
    mode = ctx.attr("mode", "DCR")  # opset 25 adds CRD: channel-major blocks
    if mode not in ("DCR", "CRD"):
        raise ctx.unsupported(f"mode '{mode}'")
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    y = ops.permute(ops.reshape(x, [n, c, h // b, b, w // b, b]), perm)
    return ops.reshape(y, [n, c * b * b, h // b, w // b])


# -- concat, split, slice -------------------------------------------------------------------------

@onnx_op("Concat", min_opset=4)
def _concat(ctx: NodeContext):
    xs = [ctx.input(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
    if not xs:
        raise ctx.malformed("needs at least one input")
    axis = _norm(ctx, ctx.attr("axis"), xs[0].ndim)
    # ONNX admits empty operands; the IR's concat does too, but a lone operand is just itself.
    return xs[0] if len(xs) == 1 else ops.concat(xs, axis)


@onnx_op("Split", min_opset=2)
def _split(ctx: NodeContext):
    x = ctx.input(0)
    axis = _norm(ctx, ctx.attr("axis", 0), x.ndim)
    if ctx.opset >= 13 and _dynamic.run_time(ctx, 1):
        return _dynamic.split(ctx, x, 1, axis)
    if ctx.opset >= 13:
        sizes = ctx.ints(1, "split")
    else:
        sizes = ctx.attr("split", None)
    k = ctx.num_outputs
    if sizes is None:
        n = x.shape[axis]
        if ctx.opset >= 18 and ctx.has_attr("num_outputs"):
            k = ctx.attr("num_outputs")
            if not n.is_static:
                if n.exact_div(k) is None:
                    raise ctx.unsupported(f"splitting dynamic dim {n} into {k} parts")
                return ops.split(x, k, axis)
            chunk = -(-n.value // k)  # ceil: the last part may be smaller
            sizes = [chunk] * (n.value // chunk) + ([n.value % chunk] if n.value % chunk else [])
        else:
            return ops.split(x, k, axis)
    if len(sizes) != ctx.num_outputs:
        raise ctx.malformed(f"{len(sizes)} split sizes for {ctx.num_outputs} outputs")
    return ops.split(x, [int(s) for s in sizes], axis)


@onnx_op("Slice", min_opset=1)
def _slice_attr(ctx: NodeContext):
    x = ctx.input(0)
    starts, ends = ctx.attr("starts"), ctx.attr("ends")
    return _do_slice(ctx, x, starts, [IntImm(e) for e in ends], ctx.attr("axes", None), None)


@onnx_op("Slice", min_opset=10)
def _slice(ctx: NodeContext):
    x = ctx.input(0)
    if any(_dynamic.run_time(ctx, j) for j in range(1, 5)):  # values only the run knows
        return _dynamic.slice_(ctx, x)
    starts = ctx.ints(1, "starts")
    ends = _shape_arg(ctx, 2, "ends")
    return _do_slice(ctx, x, starts, ends, ctx.ints(3, "axes"), ctx.ints(4, "steps"))


def _do_slice(ctx, x, starts, ends, axes, steps):
    if starts is None:
        raise ctx.malformed("starts are required")
    axes = list(range(len(starts))) if axes is None else [_norm(ctx, a, x.ndim) for a in axes]
    if len(set(axes)) != len(axes):
        raise ctx.malformed(f"repeated axes {axes}")
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.malformed("starts, ends, axes and steps differ in length")
    ends_ = []
    for e, a in zip(ends, axes):
        if e.is_static:
            v = e.value
            ends_.append(max(min(v, _INT_MAX), -_INT_MAX))
        elif e == x.shape[a]:
            ends_.append(_INT_MAX)  # to the end
        else:
            ends_.append(e)
    starts = [max(min(int(s), _INT_MAX), -_INT_MAX) for s in starts]
    if all(s == 0 and isinstance(e, int) and e >= _INT_MAX and st == 1 for s, e, st in zip(starts, ends_, steps)):
        return x
    return ops.slice(x, starts, ends_, axes, steps)


# -- expand, tile, pad ----------------------------------------------------------------------------

@onnx_op("Expand", min_opset=8)
def _expand(ctx: NodeContext):
    x = ctx.input(0)
    if _dynamic.run_time(ctx, 1):
        return _dynamic.expand(ctx, x, 1)
    target = _shape_arg(ctx, 1, "shape")
    try:
        out = ops.broadcast_shapes(x.shape, tuple(target))
    except ShapeError as e:
        raise ctx.malformed(f"cannot expand {[str(d) for d in x.shape]} to {[str(d) for d in target]}: {e}") from None
    return x if tuple(out) == tuple(x.shape) else ops.expand(x, out)


@onnx_op("Tile", min_opset=6)
def _tile(ctx: NodeContext):
    x = ctx.input(0)
    if _dynamic.run_time(ctx, 1):
        return _dynamic.tile(ctx, x, 1)
    reps = ctx.ints(1, "repeats")
    if reps is None or len(reps) != x.ndim or any(r < 0 for r in reps):
        raise ctx.malformed(f"repeats {reps} must hold {x.ndim} non-negative entries")
    if all(r == 1 for r in reps):
        return x
    # [d0, d1] -> [1, d0, 1, d1] -> expand [r0, d0, r1, d1] -> [r0*d0, r1*d1]: the copies repeat
    # the whole dim, as np.tile does.
    inter = [v for d in x.shape for v in (IntImm(1), d)]
    big = [v for r, d in zip(reps, x.shape) for v in (IntImm(r), d)]
    y = ops.expand(ops.reshape(x, inter), big)
    return ops.reshape(y, [d * r for d, r in zip(x.shape, reps)])


@onnx_op("Pad", min_opset=2)
def _pad_attr(ctx: NodeContext):
    x = ctx.input(0)
    return _do_pad(ctx, x, ctx.attr("pads"), ctx.attr("mode", "constant"), ctx.attr("value", 0.0), None)


@onnx_op("Pad", min_opset=11)
def _pad(ctx: NodeContext):
    x = ctx.input(0)
    if _dynamic.run_time(ctx, 1) or (ctx.opset >= 18 and _dynamic.run_time(ctx, 3)):
        return _dynamic.pad(ctx, x, ctx.attr("mode", "constant"))
    pads = ctx.ints(1, "pads")
    value, run_value = 0.0, None
    if ctx.has_input(2):
        v = ctx.const(2)
        if v is None:
            run_value = ctx.input(2)  # a run-time fill: pad with 0, then select (below)
        else:
            value = v.reshape(-1)[0].item() if v.size else 0.0
    axes = ctx.ints(3, "axes") if ctx.opset >= 18 else None
    y = _do_pad(ctx, x, pads, ctx.attr("mode", "constant"), value, axes)
    if run_value is None or ctx.attr("mode", "constant") != "constant" or y is x:
        return y
    if not all(d.is_static for d in y.shape):
        raise ctx.unsupported("a run-time constant_value needs static shapes")
    # The border: every element of y outside the (possibly cropped) copy of x.
    before, after = _pad_pairs(ctx, x.ndim, pads, axes)
    inner = tuple(slice(max(b, 0), d.value - max(a, 0)) for b, a, d in zip(before, after, y.shape))
    border = np.ones([d.value for d in y.shape], bool)
    border[inner] = False
    return ops.where(constant(border), ops.cast(ops.reshape(run_value, []), y.dtype), y)


def _pad_pairs(ctx, ndim: int, pads, axes) -> tuple[list[int], list[int]]:
    """ONNX pads ([begins..., ends...] over `axes`) as per-dim before/after lists."""
    axes = list(range(ndim)) if axes is None else [_norm(ctx, a, ndim) for a in axes]
    if pads is None or len(pads) != 2 * len(axes):
        raise ctx.malformed(f"pads {pads} must hold 2 x {len(axes)} entries")
    before, after = [0] * ndim, [0] * ndim
    for j, a in enumerate(axes):
        before[a], after[a] = int(pads[j]), int(pads[j + len(axes)])
    return before, after


def _do_pad(ctx, x, pads, mode, value, axes):
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.unsupported(f"pad mode '{mode}' is not supported (constant, reflect, edge, wrap are)")
    before, after = _pad_pairs(ctx, x.ndim, pads, axes)
    if any(p < 0 for p in before + after):  # negative pads crop: a slice first
        starts = [max(-p, 0) for p in before]
        ends = [(p if p < 0 else _INT_MAX) for p in after]
        x = ops.slice(x, starts, ends, list(range(x.ndim)))
        before, after = [max(p, 0) for p in before], [max(p, 0) for p in after]
    if not any(before + after):
        return x
    if mode == "wrap":
        return _wrap_pad(ctx, x, before, after)
    if not x.dtype.is_float and float(value) != int(value):
        raise ctx.malformed(f"pad value {value} for a {x.dtype} tensor")
    return ops.pad(x, list(zip(before, after)), mode=mode, value=float(value))


def _wrap_pad(ctx, x, before, after):
    """Pad mode 'wrap' (circular, as numpy's): output index i of a padded axis reads input index
    (i - before) mod n, one gather of constant indices per padded axis (pads may pass n)."""
    for a, (b, e) in enumerate(zip(before, after)):
        if not b and not e:
            continue
        n = x.shape[a]
        if not n.is_static or n.value == 0:
            raise ctx.unsupported(f"wrap padding of dim {a} needs a static, non-empty size, got {n}")
        idx = (np.arange(-b, n.value + e, dtype=np.int64) % n.value).astype(np.int64)
        x = ops.gather(x, constant(idx), a)
    return x


@onnx_op("CenterCropPad", min_opset=18)
def _center_crop_pad(ctx: NodeContext):
    # Per axis: a centred crop (start floor(d/2)) or a centred zero pad (before floor(d/2)).
    x = ctx.input(0)
    axes = ctx.attr("axes", None)
    axes = list(range(x.ndim)) if axes is None else [_norm(ctx, a, x.ndim) for a in axes]
    if _dynamic.run_time(ctx, 1):  # the target fed as data: sizes the run binds
        return _dynamic.center_crop_pad(ctx, x, axes)
    target = ctx.ints(1, "shape")
    if target is None or len(target) != len(axes):
        raise ctx.malformed(f"shape {target} must hold one size per axis {axes}")
    starts, ends, pads = [], [], [(0, 0)] * x.ndim
    for a, t in zip(axes, target):
        n = x.shape[a]
        if not n.is_static:
            raise ctx.unsupported(f"CenterCropPad of dynamic dim {n}")
        d = abs(n.value - t)
        if t < n.value:
            starts.append(d // 2)
            ends.append(d // 2 + t)
        elif t > n.value:
            starts.append(0)
            ends.append(_INT_MAX)
            pads[a] = (d // 2, d - d // 2)
        else:
            starts.append(0)
            ends.append(_INT_MAX)
    y = ops.slice(x, starts, ends, axes) if any(s or e != _INT_MAX for s, e in zip(starts, ends)) else x
    return ops.pad(y, pads) if any(p != (0, 0) for p in pads) else y


def _window(ctx: NodeContext, fn):
    if _dynamic.run_time(ctx, 0):  # a size fed as data: n positions the run binds, then fn on tensors
        dt = elem_dtype(ctx.attr("output_datatype", 1), f"{ctx.label}: output_datatype")
        k, n = _dynamic.positions(ctx, 0, DType.float32, "size")
        denom = n if ctx.attr("periodic", 1) else ops.sub(n, constant(np.float32(1)))
        zero = ops.equal(denom, constant(np.float32(0)))
        r = ops.where(zero, constant(np.float32(0)), ops.div(k, ops.where(zero, constant(np.float32(1)), denom)))
        return ops.cast(fn(r, _TensorMath), dt)
    size = ctx.require_const(0, "size").reshape(-1)
    if size.size != 1 or size[0] < 0:
        raise ctx.malformed(f"size must be one non-negative integer, got {size.tolist()}")
    n = int(size[0])
    dt = elem_dtype(ctx.attr("output_datatype", 1), f"{ctx.label}: output_datatype")
    denom = n if ctx.attr("periodic", 1) else n - 1
    k = np.arange(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ctx.constant_value(fn(k / denom if denom else k * 0, np).astype(dt.np))


class _TensorMath:
    """numpy's sin/cos for the windows' formulas on tensors (float32)."""
    pi = np.float32(np.pi)
    sin = staticmethod(ops.sin)
    cos = staticmethod(ops.cos)


@onnx_op("HannWindow", min_opset=17)
def _hann(ctx: NodeContext):
    return _window(ctx, lambda r, m: m.sin(r * m.pi) * m.sin(r * m.pi))


@onnx_op("HammingWindow", min_opset=17)
def _hamming(ctx: NodeContext):
    return _window(ctx, lambda r, m: m.cos(r * (2 * m.pi)) * (-21 / 46) + 25 / 46)


@onnx_op("BlackmanWindow", min_opset=17)
def _blackman(ctx: NodeContext):
    return _window(ctx, lambda r, m: m.cos(r * (2 * m.pi)) * -0.5 + m.cos(r * (4 * m.pi)) * 0.08 + 0.42)
