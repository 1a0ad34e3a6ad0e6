"""Pooling over NHWC: max, average (padding, ceil mode, count_include_pad), global average."""
from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np

from ..errors import DTypeError
from ..ir.dims import Dim, shape_str
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .conv import check_window_attrs, padding_arg, pair_arg, window_out
from .registry import Category, check, make_op1, register

__all__ = ["Pool2dAttrs", "GlobalPoolAttrs", "max_pool2d", "avg_pool2d", "global_avg_pool"]

IntOr2 = Union[int, tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Pool2dAttrs:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = True  # average pooling only


@dataclasses.dataclass(frozen=True)
class GlobalPoolAttrs:
    keepdims: bool = True  # [N, 1, 1, C] (True) or [N, C]


# -- inference ------------------------------------------------------------------------------

def _pool_out(size: Dim, lo: int, hi: int, k: int, s: int, d: int, ceil_mode: bool, axis: str) -> Dim:
    eff = d * (k - 1) + 1
    # torch's limit; it also guarantees that every window starts inside the input or the left
    # padding, so no max window is all padding and no count_include_pad=False divisor is zero.
    check(lo <= eff // 2 and hi <= eff // 2,
          f"padding ({lo}, {hi}) along {axis} must be at most half the effective kernel size {eff}")
    floor_size = window_out(size, lo, hi, k, s, d, axis)
    if not ceil_mode:
        return floor_size
    # Ceil mode keeps a last partial window only when it starts before size + lo (torch's rule):
    # last start = min(ceil((size + lo + hi - eff) / s), floor((size + lo - 1) / s)). Which term is
    # smaller does not depend on size (it is the sign of hi - eff + s), so a dynamic size gets
    # one exact expression.
    return (size + lo - 1 + min(hi - eff + s, 0)) // s + 1


def _infer_pool(inputs, attrs: Pool2dAttrs):
    (x,) = inputs
    check(x.ndim == 4, f"x must be 4-D NHWC, got rank {x.ndim} {shape_str(x.shape)}")
    if x.dtype == DType.bool:
        raise DTypeError("needs a numeric operand, got bool")
    check(len(attrs.kernel) == 2 and all(k >= 1 for k in attrs.kernel),
          f"kernel must be two ints >= 1, got {attrs.kernel}")
    check_window_attrs(attrs.stride, attrs.padding, attrs.dilation)
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = attrs.kernel, attrs.stride, attrs.padding, attrs.dilation
    ho = _pool_out(h, pt, pb, kh, sh, dh, attrs.ceil_mode, "height")
    wo = _pool_out(w, pl, pr, kw, sw, dw, attrs.ceil_mode, "width")
    return [((n, ho, wo, c), x.dtype)]


# -- references -----------------------------------------------------------------------------

def _taps(x: np.ndarray, attrs: Pool2dAttrs, ho: int, wo: int, fill):
    """One strided [N, HO, WO, C] view per kernel tap over x padded with `fill`.

    Padding reaches as far as the last (ceil-mode) window needs, so every tap is a plain slice.
    """
    _, h, w, _ = x.shape
    (kh, kw), (sh, sw), (pt, _, pl, _), (dh, dw) = attrs.kernel, attrs.stride, attrs.padding, attrs.dilation
    bottom = max((ho - 1) * sh + dh * (kh - 1) + 1 - h - pt, 0)
    right = max((wo - 1) * sw + dw * (kw - 1) + 1 - w - pl, 0)
    xp = np.pad(x, ((0, 0), (pt, bottom), (pl, right), (0, 0)), constant_values=fill)
    for i in range(kh):
        for j in range(kw):
            yield xp[:, i * dh: i * dh + (ho - 1) * sh + 1: sh, j * dw: j * dw + (wo - 1) * sw + 1: sw, :]


def _ref_max(args, attrs: Pool2dAttrs, ctx):
    (x,) = args
    _, ho, wo, _ = ctx.out_shapes[0]
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    out = None
    for tap in _taps(x, attrs, ho, wo, fill):
        out = tap.copy() if out is None else np.maximum(out, tap, out=out)
    return [out]


def _counts(size: int, lo: int, hi: int, k: int, s: int, d: int, n_out: int, include_pad: bool) -> np.ndarray:
    """Divisor per output row (or column); the 2-D divisor is the outer product."""
    pos = (np.arange(n_out) * s - lo)[:, None] + np.arange(k)[None, :] * d
    # torch counts padding but never the ceil-mode overhang past it.
    valid = pos < size + hi if include_pad else (pos >= 0) & (pos < size)
    return np.maximum(valid.sum(axis=1), 1).astype(np.float32)


def _ref_avg(args, attrs: Pool2dAttrs, ctx):
    (x,) = args
    _, h, w, _ = x.shape
    _, ho, wo, _ = ctx.out_shapes[0]
    acc = np.zeros(ctx.out_shapes[0], dtype=np.float64 if x.dtype == np.float64 else np.float32)
    for tap in _taps(x, attrs, ho, wo, 0):
        acc += tap
    (kh, kw), (sh, sw), (pt, pb, pl, pr), (dh, dw) = attrs.kernel, attrs.stride, attrs.padding, attrs.dilation
    ch = _counts(h, pt, pb, kh, sh, dh, ho, attrs.count_include_pad)
    cw = _counts(w, pl, pr, kw, sw, dw, wo, attrs.count_include_pad)
    return [acc / (ch[:, None] * cw[None, :])[None, :, :, None]]


register(OpKind.MAX_POOL2D, Category.POOL, Pool2dAttrs, _infer_pool, _ref_max, num_inputs=(1, 1))
register(OpKind.AVG_POOL2D, Category.POOL, Pool2dAttrs, _infer_pool, _ref_avg, num_inputs=(1, 1),
         float_only=True)


def _infer_global(inputs, attrs: GlobalPoolAttrs):
    (x,) = inputs
    check(x.ndim == 4, f"x must be 4-D NHWC, got rank {x.ndim} {shape_str(x.shape)}")
    n, _, _, c = x.shape
    return [((n, 1, 1, c) if attrs.keepdims else (n, c), x.dtype)]


def _ref_global(args, attrs: GlobalPoolAttrs, ctx):
    dt = np.float64 if args[0].dtype == np.float64 else np.float32  # float64 averages in float64
    return [args[0].mean(axis=(1, 2), keepdims=attrs.keepdims, dtype=dt)]


register(OpKind.GLOBAL_AVG_POOL, Category.POOL, GlobalPoolAttrs, _infer_global, _ref_global,
         num_inputs=(1, 1), float_only=True)


# -- builders -------------------------------------------------------------------------------

def _attrs(op: str, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad) -> Pool2dAttrs:
    kernel = pair_arg(kernel_size, "kernel_size", op)
    return Pool2dAttrs(kernel, kernel if stride is None else pair_arg(stride, "stride", op),
                       padding_arg(padding, op), pair_arg(dilation, "dilation", op), bool(ceil_mode),
                       bool(count_include_pad))


def max_pool2d(x: Tensor, kernel_size: IntOr2, stride: Optional[IntOr2] = None, padding=0,
               dilation: IntOr2 = 1, ceil_mode: bool = False, name=None) -> Tensor:
    """x [N, H, W, C]; padding int, (ph, pw) or (top, bottom, left, right); stride defaults to kernel."""
    attrs = _attrs("max_pool2d", kernel_size, stride, padding, dilation, ceil_mode, True)
    return make_op1(OpKind.MAX_POOL2D, [x], attrs, name)


def avg_pool2d(x: Tensor, kernel_size: IntOr2, stride: Optional[IntOr2] = None, padding=0,
               ceil_mode: bool = False, count_include_pad: bool = True, name=None) -> Tensor:
    """x [N, H, W, C]; torch semantics for the divisor (count_include_pad, ceil-mode overhang)."""
    attrs = _attrs("avg_pool2d", kernel_size, stride, padding, 1, ceil_mode, count_include_pad)
    return make_op1(OpKind.AVG_POOL2D, [x], attrs, name)


def global_avg_pool(x: Tensor, keepdims: bool = True, name=None) -> Tensor:
    """Mean over H and W of x [N, H, W, C]: [N, 1, 1, C] (keepdims) or [N, C]."""
    return make_op1(OpKind.GLOBAL_AVG_POOL, [x], GlobalPoolAttrs(bool(keepdims)), name)
