"""ONNX Resize (nearest, linear, cubic; antialias; every coordinate transformation) and Upsample.

Choice: Resize decomposes into existing IR ops; no resize op was added. Interpolation is
separable, so each resized axis is a 1-D resample, and with static sizes every index and weight
of that resample is known while importing. Per axis this module computes, in float64, the taps
of each output position (the neighbouring input indices, clamped like ONNX's edge padding, and
their coefficients), then emits
  - nearest (one-hot coefficients): one gather along the axis, exact for every dtype;
  - linear / cubic / antialias: sum over taps t of gather(x, idx[:, t]) * w[:, t], which is the
    ONNX reference's arithmetic (a weighted sum of the same input elements) in the input's type;
  - tf_crop_and_resize: a where() that puts extrapolation_value at positions outside the input.
Only the resized axes of the input must be static. The cost is one gather per tap (2 linear,
4 cubic, more with antialias downscaling) per resized axis.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import prod
from ...ir.tensor import Tensor, constant
from ._dynamic import run_time, sizes_operand
from .ops_nn import like, norm_axis
from .ops_resize_runtime import resize_runtime
from .registry import NodeContext, onnx_op

_CTMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


# -- per-axis taps ---------------------------------------------------------------------------------

def _source_coords(ctm: str, n_in: int, n_out: int, scale: float, roi: Optional[tuple[float, float]]):
    """(x_ori per output position, mask of positions outside the input or None): ONNX's mapping of
    an output coordinate back into the input."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # the real-valued output length
    outside = None
    if ctm == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi
        x = (np.full(n_out, (hi - lo) * (n_in - 1) / 2) if width == 1
             else y * (hi - lo) * (n_in - 1) / (width - 1))
        x = x + lo * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric: the centre of the input maps to the centre of the output
        offset = n_in / 2 * (1 - n_out / width)
        x = offset + (y + 0.5) / scale - 0.5
    return x, outside


def _keys(d: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel (Keys) with coefficient a, at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _coeffs(mode: str, ratio: np.ndarray, scale: float, nearest_mode: str, cubic_a: float,
            antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """(offsets of the taps from the left neighbour, coefficients [n_out, taps]).

    `ratio` is in (0, 1]: x_ori - floor(x_ori), or 1 where x_ori is an integer (then the left
    neighbour is floor(x_ori) - 1 and the position itself the right one), as ONNX defines it."""
    r = ratio[:, None]
    if mode == "nearest":
        if nearest_mode == "round_prefer_floor":
            right = ratio > 0.5
        elif nearest_mode == "round_prefer_ceil":
            right = ratio >= 0.5
        elif nearest_mode == "floor":
            right = np.zeros_like(ratio, dtype=bool)
        else:
            right = np.ones_like(ratio, dtype=bool)
        right = right | (ratio == 1)  # an integer position is itself (the right tap)
        return np.array([0, 1]), np.stack([~right, right], axis=1).astype(np.float64)
    # Antialias stretches the kernel by 1/scale when downscaling; without it the kernel has its
    # own support: taps 0, 1 (linear) and -1..2 (cubic) around floor(x_ori).
    s = min(scale, 1.0) if antialias else 1.0
    support = 1 if mode == "linear" else 2
    start = int(math.floor(-support / s) + 1)
    taps = np.arange(start, 2 - start)
    d = (taps[None, :] - r) * s
    w = np.clip(1 - np.abs(d), 0, 1) if mode == "linear" else _keys(d, cubic_a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    return taps, w


def axis_taps(mode: str, n_in: int, n_out: int, scale: float, ctm: str, roi, nearest_mode: str,
              cubic_a: float, exclude_outside: bool, antialias: bool):
    """(indices [n_out, taps] into the input axis, weights [n_out, taps], outside mask or None)."""
    x, outside = _source_coords(ctm, n_in, n_out, scale, roi)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    offsets, w = _coeffs(mode, ratio, scale, nearest_mode, cubic_a, antialias)
    # Tap k sits at floor(x) + offsets[k], except where x is an integer: ratio is 1 there, so the
    # taps are counted from the left neighbour x - 1.
    left = (base - (x == base)).astype(np.int64)
    idx = left[:, None] + offsets[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        tot = w.sum(axis=1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    return np.clip(idx, 0, n_in - 1), w, outside


# -- the graph -------------------------------------------------------------------------------------

def _resample_axis(x: Tensor, axis: int, idx: np.ndarray, w: np.ndarray, outside, extrapolation: float) -> Tensor:
    n_out, taps = idx.shape
    bshape = [1] * x.ndim
    bshape[axis] = n_out
    keep = [t for t in range(taps) if np.any(w[:, t] != 0)] or [0]
    one_hot = np.all((w == 0) | (w == 1)) and np.all(np.sum(w == 1, axis=1) == 1)
    if one_hot:
        # Nearest (or a weight pattern that is one): pick the tap with weight 1 per position.
        pick = idx[np.arange(n_out), np.argmax(w, axis=1)]
        y = ops.gather(x, constant(pick.astype(np.int64)), axis)
    else:
        if not x.dtype.is_float:
            raise TypeError("interpolation of an integer tensor")
        y = None
        for t in keep:
            term = ops.mul(ops.gather(x, constant(idx[:, t].astype(np.int64)), axis),
                           like(w[:, t].reshape(bshape), x))
            y = term if y is None else ops.add(y, term)
    if outside is not None and outside.any():
        y = ops.where(constant(outside.reshape(bshape)), like(np.float32(extrapolation), x), y)
    return y


def _static_len(ctx: NodeContext, x: Tensor, a: int) -> int:
    d = x.shape[a]
    if not d.is_static:
        raise ctx.unsupported(f"resizing the dynamic dim {a} ({d}); resized dims must be static")
    return d.value


def _operand(ctx: NodeContext, i: int, what: str, floats: bool):
    """Optional input i as (its value, None) when constant, (None, the tensor) when only the run
    knows it, (None, None) when absent or empty."""
    if not ctx.has_input(i):
        return None, None
    if run_time(ctx, i):
        t = sizes_operand(ctx, i, what, floats=floats)
        return (None, None) if prod(t.shape).value == 0 else (None, t)
    v = ctx.require_const(i, what)
    return (None if v.size == 0 else v), None


def _as_tensor(v: Optional[np.ndarray], t: Optional[Tensor]) -> Optional[Tensor]:
    return t if t is not None else (None if v is None else constant(np.asarray(v).reshape(-1)))


def resize(ctx: NodeContext, x: Tensor, scales, sizes, roi, mode: str, ctm: str, nearest_mode: str,
           cubic_a: float, exclude_outside: bool, antialias: bool, extrapolation: float,
           axes: Optional[list[int]], policy: str) -> Tensor:
    r = x.ndim
    axes = list(range(r)) if axes is None else axes
    if (scales is None) == (sizes is None):
        raise ctx.malformed("exactly one of scales and sizes must be given")
    if roi is not None and roi.size not in (2 * len(axes), 2 * r):
        raise ctx.malformed(f"roi has {roi.size} values for {len(axes)} axes")
    full_roi = roi is not None and roi.size == 2 * r and len(axes) != r
    given = np.asarray(scales if scales is not None else sizes).reshape(-1)
    if given.size != len(axes):
        raise ctx.malformed(f"{'scales' if scales is not None else 'sizes'} has {given.size} values "
                            f"for {len(axes)} axes")
    n_in = {a: _static_len(ctx, x, a) for a in axes}
    if sizes is not None:
        out = {a: int(given[i]) for i, a in enumerate(axes)}
        sc = {a: out[a] / n_in[a] if n_in[a] else 1.0 for a in axes}
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(sc.values())
            sc = {a: s for a in axes}
            out = {a: int(s * n_in[a] + 0.5) for a in axes}
    else:
        sc = {a: float(given[i]) for i, a in enumerate(axes)}
        if any(not s > 0 for s in sc.values()):
            raise ctx.malformed(f"scales must be positive, got {given.tolist()}")
        out = {a: int(sc[a] * n_in[a]) for a in axes}
    y = x
    for i, a in enumerate(axes):
        if roi is None:
            ra = None
        elif full_roi:
            ra = (float(roi[a]), float(roi[r + a]))
        else:
            ra = (float(roi[i]), float(roi[len(axes) + i]))
        if math.isclose(sc[a], 1.0) and out[a] == n_in[a] and (ra is None or ctm != "tf_crop_and_resize"
                                                             or (ra[0] == 0 and ra[1] == 1)):
            continue  # nothing to resample along this axis
        if out[a] < 1 or n_in[a] < 1:
            raise ctx.unsupported(f"an empty input or output along axis {a}")
        if ctm == "tf_crop_and_resize" and ra is None:
            raise ctx.malformed("tf_crop_and_resize needs roi")
        idx, w, outside = axis_taps(mode, n_in[a], out[a], sc[a], ctm, ra, nearest_mode, cubic_a,
                                    exclude_outside, antialias)
        try:
            y = _resample_axis(y, a, idx, w, outside, extrapolation)
        except TypeError:
            raise ctx.unsupported(f"{mode} interpolation of a {x.dtype} tensor (only nearest is "
                                  "exact for integers)") from None
    return y


@onnx_op("Resize", min_opset=11)
def _resize(ctx: NodeContext):
    x = ctx.input(0, "X")
    mode = ctx.attr("mode", "nearest")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    antialias = bool(ctx.attr("antialias", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.malformed(f"mode {mode!r} is not nearest, linear or cubic")
    if ctm not in _CTMS:
        raise ctx.unsupported(f"coordinate_transformation_mode {ctm!r}")
    if nearest_mode not in _NEAREST:
        raise ctx.malformed(f"nearest_mode {nearest_mode!r} is not one of {list(_NEAREST)}")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.malformed(f"keep_aspect_ratio_policy {policy!r}")
    if antialias and mode == "nearest":
        antialias = False  # ONNX: antialias applies to linear and cubic only
    axes = ctx.attr("axes", None)
    if axes is not None:
        axes = [norm_axis(ctx, a, x.ndim, "axes entry") for a in axes]
        if len(set(axes)) != len(axes):
            raise ctx.malformed(f"axes {axes} repeats an axis")
    # roi matters to tf_crop_and_resize only: elsewhere it is not read, constant or not
    roi, roi_t = _operand(ctx, 1, "roi", True) if ctm == "tf_crop_and_resize" else (None, None)
    scales, scales_t = _operand(ctx, 2, "scales", True)
    sizes, sizes_t = _operand(ctx, 3, "sizes", False)
    args = (mode, ctm, nearest_mode, float(ctx.attr("cubic_coeff_a", -0.75)), bool(ctx.attr("exclude_outside", 0)),
            antialias, float(ctx.attr("extrapolation_value", 0.0)))
    if roi_t is not None or scales_t is not None or sizes_t is not None:
        if (scales is None and scales_t is None) == (sizes is None and sizes_t is None):
            raise ctx.malformed("exactly one of scales and sizes must be given")
        return resize_runtime(ctx, x, _as_tensor(scales, scales_t), _as_tensor(sizes, sizes_t),
                              _as_tensor(roi, roi_t), *args, list(range(x.ndim)) if axes is None else axes,
                              policy)
    return resize(ctx, x, scales, sizes, None if roi is None else roi.astype(np.float64), *args, axes, policy)


@onnx_op("Upsample", min_opset=7)
def _upsample(ctx: NodeContext):
    """Upsample (deprecated by Resize): asymmetric coordinates; nearest rounds down."""
    x = ctx.input(0, "X")
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise ctx.malformed(f"mode {mode!r}")
    if ctx.opset >= 9 and run_time(ctx, 1):
        return resize_runtime(ctx, x, sizes_operand(ctx, 1, "scales", floats=True), None, None,
                              "nearest" if mode == "nearest" else "linear", "asymmetric", "floor", -0.75,
                              False, False, 0.0, list(range(x.ndim)), "stretch")
    scales = np.asarray(ctx.attr("scales")) if ctx.opset < 9 else ctx.require_const(1, "scales")
    return resize(ctx, x, scales.astype(np.float64), None, None, "nearest" if mode == "nearest" else "linear",
                  "asymmetric", "floor", -0.75, False, False, 0.0, None, "stretch")
