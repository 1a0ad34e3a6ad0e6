"""ONNX Resize whose scales, sizes or roi arrive as run-time tensors (graph inputs, computed values).

ops_resize.py computes every tap of a static Resize while importing. Here the same arithmetic
runs in the graph instead, in float64 as the static path computes it:
  - the output length of each resized axis is a produced IntVar (aitgen/ops/dynamic.py), bound by
    one BIND_DIMS from floor(scale * n) (scales), the sizes themselves (sizes, stretch) or
    floor(s * n + 0.5) with s the min/max ratio (keep_aspect_ratio_policy);
  - per axis, an iota of that length maps to source coordinates by the coordinate transformation;
    floor/ratio give the left neighbour, the taps and their coefficients (nearest: one index; linear:
    2 taps; cubic: 4), and the resample is sum_t gather(x, idx_t, axis) * w_t, as in the static path.
Antialias stretches the kernel by 1/scale when downscaling, so its tap count depends on the scale:
with a run-time scale the taps cover scales down to AA_MIN_SCALE (zero weights beyond the kernel's
support keep the sum exact), and a run with a smaller scale is refused (RuntimeInputError naming
the node) rather than computed with too few taps.
Buffers are planned at the bounds: the output of each axis may grow to MAX_GROWTH times the input's
element count (or VALUE_ELEMENTS for tiny inputs); a run asking for more is refused. Constant
scales/sizes keep the static path, which has no such limit.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import prod
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import bind_dims, produced_var
from ._dynamic import VALUE_ELEMENTS
from .registry import NodeContext

MAX_GROWTH = 16        # output elements at the bounds, as a multiple of the input's
AA_MIN_SCALE = 0.25    # the smallest run-time scale antialiased taps cover
F64 = DType.float64


def _f64(t: Tensor) -> Tensor:
    return t if t.dtype is F64 else ops.cast(t, F64)


def _k(v: float) -> Tensor:
    return constant(np.array([v], np.float64), dtype=F64)


def _at(t: Tensor, i: int) -> Tensor:
    """Element i of a 1-D tensor, as shape [1]."""
    return ops.gather(t, constant(np.array([i], np.int64)), 0)


def _out_sizes(ctx: NodeContext, scales: Optional[Tensor], sizes: Optional[Tensor], n_in: list[int],
               policy: str) -> tuple[Tensor, Tensor]:
    """(float64 scale per axis [k], int64 output length per axis [k]), as the static path's."""
    n = constant(np.array(n_in, np.float64), dtype=F64)
    if sizes is not None:
        sz = _f64(sizes)
        sc = ops.div(sz, n)
        if policy == "stretch":
            return sc, sizes if sizes.dtype is DType.int64 else ops.cast(sizes, DType.int64)
        pick = ops.reduce_min if policy == "not_larger" else ops.reduce_max
        s = ops.expand(pick(sc, [0], keepdims=True), [len(n_in)])
        return s, ops.cast(ops.floor(ops.add(ops.mul(s, n), 0.5)), DType.int64)
    sc = _f64(scales)
    return sc, ops.cast(ops.floor(ops.mul(sc, n)), DType.int64)


def _iota(one: Tensor, n) -> Tensor:
    """0, 1, ..., n-1 (float64) for the produced length n; `one` comes out of n's binding, so the
    iota is ordered after it."""
    return _f64(ops.cumsum(ops.expand(one, [n]), 0, exclusive=True))


def _source(ctm: str, y: Tensor, n_in: int, sc: Tensor, n_out: Tensor, roi) -> tuple[Tensor, Optional[Tensor]]:
    """Source coordinate of each output position (ops_resize._source_coords on tensors)."""
    width = ops.mul(sc, float(n_in))
    unit = ops.equal(width, 1.0)
    # width - 1 where it divides (the unit-width branch of each where() does not read it)
    wm1 = ops.where(unit, 1.0, ops.sub(width, 1.0))
    outside = None
    if ctm == "align_corners":
        x = ops.where(unit, 0.0, ops.div(ops.mul(y, float(n_in - 1)), wm1))
    elif ctm == "asymmetric":
        x = ops.div(y, sc)
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi
        span = ops.sub(hi, lo)
        x = ops.where(unit, ops.div(ops.mul(span, float(n_in - 1)), 2.0),
                      ops.div(ops.mul(ops.mul(y, span), float(n_in - 1)), wm1))
        x = ops.add(x, ops.mul(lo, float(n_in - 1)))
        outside = ops.logical_or(ops.less(x, 0.0), ops.greater(x, float(n_in - 1)))
    elif ctm == "half_pixel_symmetric":  # the centre of the input maps to the centre of the output
        offset = ops.mul(ops.sub(1.0, ops.div(n_out, width)), n_in / 2)
        x = ops.sub(ops.add(offset, ops.div(ops.add(y, 0.5), sc)), 0.5)
    else:
        x = ops.sub(ops.div(ops.add(y, 0.5), sc), 0.5)
        if ctm == "pytorch_half_pixel":
            x = ops.where(unit, -0.5, x)
    return x, outside


def _keys(d: Tensor, a: float) -> Tensor:
    d = ops.abs(d)
    near = ops.add(ops.mul(ops.mul(ops.sub(ops.mul(d, a + 2), a + 3), d), d), 1.0)
    far = ops.sub(ops.mul(ops.add(ops.mul(ops.sub(ops.mul(d, a), 5 * a), d), 8 * a), d), 4 * a)
    return ops.where(ops.less_equal(d, 1.0), near, ops.where(ops.less(d, 2.0), far, 0.0))


def _like_x(w: Tensor, x: Tensor) -> Tensor:
    """A float64 weight in x's dtype, rounded as ops_nn.like rounds a constant (through float32)."""
    if x.dtype is F64:
        return w
    w = ops.cast(w, DType.float32)
    return w if x.dtype is DType.float32 else ops.cast(w, x.dtype)


def _resample(ctx: NodeContext, x: Tensor, axis: int, xo: Tensor, outside: Optional[Tensor], sc: Tensor,
              mode: str, nearest_mode: str, cubic_a: float, exclude_outside: bool, antialias: bool,
              extrapolation: float) -> Tensor:
    n_in = x.shape[axis].value
    base = ops.floor(xo)
    on = ops.equal(xo, base)
    ratio = ops.where(on, 1.0, ops.sub(xo, base))
    left = ops.cast(ops.sub(base, ops.cast(on, F64)), DType.int64)
    bshape = [1] * x.ndim
    bshape[axis] = xo.shape[0]

    def clip(i: Tensor) -> Tensor:
        return ops.minimum(ops.maximum(i, 0), max(n_in - 1, 0))

    if mode == "nearest":
        # The right neighbour where the mode rounds up, and always at an integer position (ratio 1)
        right = ops.equal(ratio, 1.0)
        if nearest_mode == "round_prefer_floor":
            right = ops.logical_or(right, ops.greater(ratio, 0.5))
        elif nearest_mode == "round_prefer_ceil":
            right = ops.logical_or(right, ops.greater_equal(ratio, 0.5))
        pick = ops.add(left, 1) if nearest_mode == "ceil" else ops.add(left, ops.cast(right, DType.int64))
        y = ops.gather(x, clip(pick), axis)
    else:
        if not x.dtype.is_float:
            raise ctx.unsupported(f"{mode} interpolation of a {x.dtype} tensor (only nearest is exact "
                                  "for integers)")
        support = 1 if mode == "linear" else 2
        s = ops.minimum(sc, 1.0) if antialias else _k(1.0)
        start = int(math.floor(-support / (AA_MIN_SCALE if antialias else 1.0)) + 1)
        taps = list(range(start, 2 - start))
        ws, idxs = [], []
        for t in taps:
            d = ops.mul(ops.sub(float(t), ratio), s)
            w = (ops.maximum(ops.minimum(ops.sub(1.0, ops.abs(d)), 1.0), 0.0) if mode == "linear"
                 else _keys(d, cubic_a))
            ws.append(w)
            idxs.append(ops.add(left, t))
        if antialias:
            tot = ws[0]
            for w in ws[1:]:
                tot = ops.add(tot, w)
            ws = [ops.div(w, tot) for w in ws]
        if exclude_outside:
            ws = [ops.where(ops.logical_or(ops.less(i, 0), ops.greater_equal(i, n_in)), 0.0, w)
                  for w, i in zip(ws, idxs)]
            tot = ws[0]
            for w in ws[1:]:
                tot = ops.add(tot, w)
            tot = ops.where(ops.equal(tot, 0.0), 1.0, tot)
            ws = [ops.div(w, tot) for w in ws]
        y = None
        for w, i in zip(ws, idxs):
            term = ops.mul(ops.gather(x, clip(i), axis), ops.reshape(_like_x(w, x), bshape))
            y = term if y is None else ops.add(y, term)
    if outside is not None:
        fill = constant(np.array(extrapolation, np.float64 if x.dtype is F64 else np.float32), dtype=x.dtype)
        y = ops.where(ops.reshape(outside, bshape), fill, y)
    return y


def resize_runtime(ctx: NodeContext, x: Tensor, scales: Optional[Tensor], sizes: Optional[Tensor],
                   roi: Optional[Tensor], mode: str, ctm: str, nearest_mode: str, cubic_a: float,
                   exclude_outside: bool, antialias: bool, extrapolation: float, axes: list[int],
                   policy: str) -> Tensor:
    """Resize of x with the given operands as float64/int64 tensors (constants where they were)."""
    r, k = x.ndim, len(axes)
    given = scales if scales is not None else sizes
    if prod(given.shape).value != k:
        raise ctx.malformed(f"{'scales' if scales is not None else 'sizes'} has {prod(given.shape).value} "
                            f"values for {k} axes")
    if roi is not None and prod(roi.shape).value not in (2 * k, 2 * r):
        raise ctx.malformed(f"roi has {prod(roi.shape).value} values for {k} axes")
    if ctm == "tf_crop_and_resize" and roi is None:
        raise ctx.malformed("tf_crop_and_resize needs roi")
    n_in = []
    for a in axes:
        d = x.shape[a]
        if not d.is_static or d.value < 1:
            raise ctx.unsupported(f"resizing dim {a} ({d}); resized dims must be static and non-empty")
        n_in.append(d.value)
    sc, out = _out_sizes(ctx, scales, sizes, n_in, policy)
    numel = max(prod(x.shape).upper, 1)
    budget = max(MAX_GROWTH * numel, VALUE_ELEMENTS)
    grow = max(2, int((budget / numel) ** (1.0 / k) + 1e-9))
    dims = [produced_var(f"{ctx.name}:{a}", n * grow) for a, n in zip(axes, n_in)]
    sizes_t, slots = out, list(dims)
    if antialias and mode != "nearest":
        # ceil(1 / min(scale, 1)) per axis, bound at most 1/AA_MIN_SCALE: the run refuses a scale
        # too small for the taps built here.
        inv = ops.cast(ops.ceil(ops.div(1.0, ops.minimum(sc, 1.0))), DType.int64)
        sizes_t = ops.concat([out, inv], 0)
        slots += [produced_var(f"{ctx.name}:inverse_scale_{a}", int(1 / AA_MIN_SCALE)) for a in axes]
    ones = bind_dims(constant(np.ones([len(slots)], np.int64)), [sizes_t], "values", slots, name=ctx.name)
    roi64 = None if roi is None else _f64(ops.reshape(roi, [prod(roi.shape).value]))
    y = x
    for i, a in enumerate(axes):
        if roi64 is None:
            ra = None
        elif prod(roi.shape).value == 2 * r and k != r:
            ra = (_at(roi64, a), _at(roi64, r + a))
        else:
            ra = (_at(roi64, i), _at(roi64, k + i))
        sc_a = _at(sc, i)
        yo = _iota(_at(ones, i), dims[i])
        xo, outside = _source(ctm, yo, n_in[i], sc_a, _f64(_at(out, i)), ra)
        y = _resample(ctx, y, a, xo, outside, sc_a, mode, nearest_mode, cubic_a, exclude_outside, antialias,
                      extrapolation)
    return y
