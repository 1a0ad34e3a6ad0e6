"""3-D windows (Conv, ConvTranspose, MaxPool, AveragePool, LpPool over [N, C, D, H, W]) as the IR's
2-D ops plus slices along the depth.

The IR has no 3-D op: a 3-D window is the 2-D window over (H, W) summed (or maxed) over its KD depth
taps. The input runs NDHWC inside; the depth taps are strided slices of the (padded) depth axis,
and the depth folds into the batch ([N * D, H, W, C]) so that each tap is one IR conv2d / pool. For
a conv with one group the taps are concatenated along the channels instead, which makes the whole
3-D conv ONE oneDNN conv2d over KD * C input channels (weights [O, KH, KW, KD * C]). A transposed
conv inserts stride - 1 zeros between depth slices first, so that along the depth it is a plain
correlation with the kernel flipped. Depth and, for pools, every spatial dim must be static; the
batch may be dynamic.

Called from ops_nn.py's converters once they have read the window attributes.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ... import ops
from ...ir.op import OpKind
from ...ir.tensor import Tensor, constant
from ...ops.pool import Pool2dAttrs
from ...ops.registry import make_op1
from .registry import NodeContext


def _to_ndhwc(x: Tensor) -> Tensor:
    return ops.permute(x, [0, 2, 3, 4, 1])


def _to_ncdhw(y: Tensor) -> Tensor:
    return ops.permute(y, [0, 4, 1, 2, 3])


def _static(ctx: NodeContext, x: Tensor, axes: list[int], what: str) -> list[int]:
    dims = [x.shape[a] for a in axes]
    if not all(d.is_static for d in dims):
        raise ctx.unsupported(f"{what} over the dynamic spatial dims {[str(d) for d in dims]} of a 3-D "
                              "window (aitgen slices the depth at import time)")
    return [d.value for d in dims]


def _pad_axis(x: Tensor, axis: int, lo: int, hi: int, value: float = 0.0) -> Tensor:
    """x padded (lo, hi >= 0) or cropped (lo, hi < 0) along one axis."""
    if lo < 0 or hi < 0:
        n = x.shape[axis].value
        x = ops.slice(x, [max(-lo, 0)], [n - max(-hi, 0)], axes=[axis])
        lo, hi = max(lo, 0), max(hi, 0)
    if lo == 0 and hi == 0:
        return x
    pads = [(0, 0)] * x.ndim
    pads[axis] = (lo, hi)
    return ops.pad(x, pads, value=value)


def _depth_taps(x: Tensor, k: int, s: int, d: int, n_out: int) -> list[Tensor]:
    """x [N, D, ...]: for each depth tap kd, the n_out depth slices kd*d, kd*d + s, ..."""
    return [ops.slice(x, [kd * d], [kd * d + (n_out - 1) * s + 1], axes=[1], steps=[s]) for kd in range(k)]


def _fold(t: Tensor) -> Tensor:
    """[N, D, H, W, C] -> [N * D, H, W, C]."""
    return ops.reshape(t, [t.shape[0] * t.shape[1], *t.shape[2:]])


def _unfold(t: Tensor, n, d: int) -> Tensor:
    """[N * D, H, W, C] -> [N, D, H, W, C]."""
    return ops.reshape(t, [n, d, *t.shape[1:]])


def _weight_taps(ctx: NodeContext, i: int, x: Tensor) -> Callable[[Optional[int]], Tensor]:
    """Input i, an ONNX [A, B, KD, KH, KW] weight: fn(kd) gives depth tap kd as an IR [A, KH, KW, B]
    weight; fn(None) gives every tap along the last axis, [A, KH, KW, KD * B] (tap-major)."""
    val = ctx.const(i)
    if val is not None:
        if val.ndim != 5:
            raise ctx.malformed(f"weight has rank {val.ndim}, expected 5")
        return const_weight_taps(val, x)
    w = ctx.input(i, "W")
    if w.ndim != 5 or w.dtype != x.dtype:
        raise ctx.malformed(f"weight must be a 5-D {x.dtype} tensor, got {w.dtype}[{', '.join(map(str, w.shape))}]")

    def tap(k: Optional[int]) -> Tensor:
        if k is None:
            p = ops.permute(w, [0, 3, 4, 2, 1])
            return ops.reshape(p, [*p.shape[:3], p.shape[3] * p.shape[4]])
        t = ops.squeeze(ops.slice(w, [k], [k + 1], axes=[2]), [2])
        return ops.permute(t, [0, 2, 3, 1])
    return tap


def const_weight_taps(val: np.ndarray, x: Tensor) -> Callable[[Optional[int]], Tensor]:
    """_weight_taps of a constant [A, B, KD, KH, KW] weight (sliced here, once)."""
    a, b, kd = val.shape[:3]

    def const_tap(k: Optional[int]) -> Tensor:
        if k is None:
            w = val.transpose(0, 3, 4, 2, 1).reshape(a, val.shape[3], val.shape[4], kd * b)
        else:
            w = val[:, :, k].transpose(0, 2, 3, 1)
        return _like(np.ascontiguousarray(w), x)
    return const_tap


def _like(arr: np.ndarray, x: Tensor) -> Tensor:
    """A constant with x's dtype (ops_nn.like; ops_nn imports this module, so not from there)."""
    return constant(np.asarray(arr, dtype=np.float32) if x.dtype.is_float else np.asarray(arr), dtype=x.dtype)


def conv3d(ctx: NodeContext, x: Tensor, kernel: list[int], groups: int, strides: list[int],
           dilations: list[int], begin: list[int], end: list[int], bias: Optional[Tensor]) -> Tensor:
    (depth,) = _static(ctx, x, [2], "Conv")
    kd, sd, dd = kernel[0], strides[0], dilations[0]
    n_out = (depth + begin[0] + end[0] - dd * (kd - 1) - 1) // sd + 1
    if n_out < 1:
        raise ctx.malformed(f"the depth window ({kernel[0]}, dilation {dd}) is larger than the padded depth")
    xn = _pad_axis(_to_ndhwc(x), 1, begin[0], end[0])
    taps = _depth_taps(xn, kd, sd, dd, n_out)
    w_tap = _weight_taps(ctx, 1, x)
    hw = dict(stride=tuple(strides[1:]), padding=(begin[1], end[1], begin[2], end[2]),
              dilation=tuple(dilations[1:]), groups=groups)
    if groups == 1:  # one conv over the taps side by side: the channel order matches w_tap(None)
        y = ops.conv2d(_fold(ops.concat(taps, axis=4) if kd > 1 else taps[0]), w_tap(None), bias, **hw)
    else:
        y = None
        for k, t in enumerate(taps):
            part = ops.conv2d(_fold(t), w_tap(k), bias if k == 0 else None, **hw)
            y = part if y is None else ops.add(y, part)
    return _to_ncdhw(_unfold(y, x.shape[0], n_out))


def conv_transpose3d(ctx: NodeContext, x: Tensor, kernel: list[int], groups: int, strides: list[int],
                     dilations: list[int], begin: list[int], end: list[int], out_pad: list[int],
                     bias: Optional[Tensor], weight: Optional[np.ndarray] = None) -> Tensor:
    """Along the depth: y[o] = sum over (i, k) with o = i*s + k*d - begin of x[i] W[k], which is a
    correlation, with the kernel flipped, of x with s - 1 zeros between slices, padded by
    d * (K - 1) - begin before and d * (K - 1) - end + output_padding after."""
    (depth,) = _static(ctx, x, [2], ctx.op_type)
    kd, sd, dd = kernel[0], strides[0], dilations[0]
    xn = _to_ndhwc(x)
    if sd > 1:  # zero insertion: [N, D, 1, ...] padded to [N, D, s, ...], flattened, tail cut
        up = ops.pad(ops.unsqueeze(xn, [2]), [(0, 0), (0, 0), (0, sd - 1), (0, 0), (0, 0), (0, 0)])
        up = ops.reshape(up, [xn.shape[0], depth * sd, *xn.shape[2:]])
        xn = ops.slice(up, [0], [(depth - 1) * sd + 1], axes=[1])
    reach = dd * (kd - 1)
    xn = _pad_axis(xn, 1, reach - begin[0], reach - end[0] + out_pad[0])
    n_out = xn.shape[1].value - reach
    if n_out < 1:
        raise ctx.malformed(f"pads {begin + end} leave no output depth")
    taps = _depth_taps(xn, kd, 1, dd, n_out)
    # ONNX [C_in, C_out/g, KD, KH, KW]: IR [C_in, KH, KW, C_out/g]; `weight`: a constant of the caller's
    w_tap = _weight_taps(ctx, 1, x) if weight is None else const_weight_taps(weight, x)
    hw = dict(stride=tuple(strides[1:]), padding=(begin[1], end[1], begin[2], end[2]),
              output_padding=tuple(out_pad[1:]), dilation=tuple(dilations[1:]), groups=groups)
    try:
        if groups == 1 and kd > 1:
            # Input channels side by side: tap j reads kernel slice kd - 1 - j.
            cat = ops.concat(taps, axis=4)
            w = ops.concat([w_tap(kd - 1 - j) for j in range(kd)], axis=0)
            y = ops.conv_transpose2d(_fold(cat), w, bias, **hw)
        else:
            y = None
            for j, t in enumerate(taps):
                part = ops.conv_transpose2d(_fold(t), w_tap(kd - 1 - j), bias if j == 0 else None, **hw)
                y = part if y is None else ops.add(y, part)
    except ValueError as e:
        if "output_padding" in str(e):
            raise ctx.unsupported(str(e)) from None
        raise
    return _to_ncdhw(_unfold(y, x.shape[0], n_out))


def pool_geometry(ctx: NodeContext, x: Tensor, kernel, strides, dilations, begin, end, ceil: bool):
    """Per spatial axis of x [N, C, ...]: (input size, output size, extra rows after the end pad
    that ceil mode's last window reads), by ONNX's rule (a last window must start inside the input
    or the begin pad). MaxPool's Indices (_pool_indices.py) use it for any spatial rank."""
    sizes = _static(ctx, x, list(range(2, x.ndim)), ctx.op_type)
    outs, extra = [], []
    for n, k, s, d, lo, hi in zip(sizes, kernel, strides, dilations, begin, end):
        eff = d * (k - 1) + 1
        span = n + lo + hi - eff
        if span < 0:
            raise ctx.malformed(f"the window {kernel} (dilations {dilations}) is larger than the padded "
                                f"input {sizes}")
        o = -(-span // s) + 1 if ceil else span // s + 1
        if ceil and (o - 1) * s >= n + lo:
            o -= 1
        outs.append(o)
        extra.append(max(0, (o - 1) * s + eff - (n + lo + hi)))
    return sizes, outs, extra


def _padded(x: Tensor, begin, end, extra, value: float) -> Tensor:
    """NDHWC x padded explicitly on every spatial axis (the IR's pools refuse pads over half a window)."""
    pads = [(0, 0)] + [(b, e + x_) for b, e, x_ in zip(begin, end, extra)] + [(0, 0)]
    return ops.pad(x, pads, value=value) if any(p != (0, 0) for p in pads) else x


def pool3d(ctx: NodeContext, x: Tensor, kind: str, kernel: list[int], strides: list[int],
           dilations: list[int], begin: list[int], end: list[int], ceil: bool,
           include_pad: bool = False, p: int = 2) -> Tensor:
    """kind 'max', 'avg' or 'lp' over the last three dims of x [N, C, D, H, W]."""
    sizes, outs, extra = pool_geometry(ctx, x, kernel, strides, dilations, begin, end, ceil)
    if kind == "max":
        low = float("-inf") if x.dtype.is_float else float(np.iinfo(x.dtype.np).min)
        xp = _padded(_to_ndhwc(x), begin, end, extra, low)
    else:
        src = ops.abs(x) if kind == "lp" else x
        if kind == "lp" and p != 1:
            src = ops.mul(src, src) if p == 2 else ops.pow(src, _like(np.float32(p), x))
        xp = _padded(_to_ndhwc(src), begin, end, extra, 0.0)
    k_hw, s_hw, d_hw = tuple(kernel[1:]), tuple(strides[1:]), tuple(dilations[1:])
    folded = _fold(xp)
    if kind == "max":
        hw = ops.max_pool2d(folded, k_hw, s_hw, 0, dilation=d_hw)
    else:  # a mean over every tap of the explicitly padded input; the divisor is fixed below
        hw = make_op1(OpKind.AVG_POOL2D, [folded], Pool2dAttrs(k_hw, s_hw, (0, 0, 0, 0), d_hw, False, True))
    hw = _unfold(hw, x.shape[0], xp.shape[1].value)
    taps = _depth_taps(hw, kernel[0], strides[0], dilations[0], outs[0])
    y = taps[0]
    for t in taps[1:]:
        y = ops.maximum(y, t) if kind == "max" else ops.add(y, t)
    if kind == "avg":
        # sum over taps = y * KH * KW; ONNX divides by the taps inside the input (or inside the
        # padded input, with count_include_pad): per axis a count, and the 3-D count is their product.
        scale = np.float32(kernel[1] * kernel[2]) / _tap_counts(sizes, outs, kernel, strides, dilations, begin,
                                                                end, include_pad)
        y = ops.mul(y, _like(scale.reshape(1, *outs, 1), x))
    elif kind == "lp":
        y = ops.mul(y, _like(np.float32(kernel[1] * kernel[2]), x))
        y = y if p == 1 else ops.sqrt(y) if p == 2 else ops.pow(y, _like(np.float32(1.0 / p), x))
    return _to_ncdhw(y)


def _tap_counts(sizes, outs, kernel, strides, dilations, begin, end, include_pad: bool) -> np.ndarray:
    counts = np.ones((), np.float32)
    for n, o, k, s, d, lo, hi in zip(sizes, outs, kernel, strides, dilations, begin, end):
        pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d  # in padded coordinates
        inside = (pos < n + lo + hi) if include_pad else (pos >= lo) & (pos < lo + n)
        c = np.maximum(inside.sum(axis=1), 1).astype(np.float32)  # an all-pad window averages nothing
        counts = np.multiply.outer(counts, c)
    return counts
