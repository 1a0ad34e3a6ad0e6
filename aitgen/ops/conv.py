"""Convolution in NHWC with OHWI weights; transposed convolution."""
from __future__ import annotations

import dataclasses
import operator
from typing import Optional, Union

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import DTypeError, ShapeError
from ..ir.dims import Dim, shape_str
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .fused import MAX_EXTRA, Epilogue, with_epilogue_infer, with_epilogue_reference
from .registry import Category, check, make_op1, register

__all__ = ["Conv2dAttrs", "ConvTranspose2dAttrs", "conv2d", "conv_transpose2d"]

IntOr2 = Union[int, tuple[int, int]]
Padding = Union[int, tuple[int, int], tuple[int, int, int, int]]


@dataclasses.dataclass(frozen=True)
class Conv2dAttrs:
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    epilogue: Optional[Epilogue] = None  # fused element-wise DAG on the result (extras follow the bias)


@dataclasses.dataclass(frozen=True)
class ConvTranspose2dAttrs:
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    output_padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    epilogue: Optional[Epilogue] = None  # as Conv2dAttrs.epilogue


# -- argument normalisation (shared with pool.py) ------------------------------------------

def _as_int(v, what: str, op: str) -> int:
    if isinstance(v, bool):
        raise ShapeError(f"{op}: {what} must be an int, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise ShapeError(f"{op}: {what} must be an int, got {v!r}") from None


def pair_arg(v, what: str, op: str) -> tuple[int, int]:
    """An int or a pair of ints as (h, w)."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ShapeError(f"{op}: {what} must be an int or a pair (h, w), got {v!r}")
        return (_as_int(v[0], what, op), _as_int(v[1], what, op))
    n = _as_int(v, what, op)
    return (n, n)


def padding_arg(p, op: str) -> tuple[int, int, int, int]:
    """int, (ph, pw) or (top, bottom, left, right) as (top, bottom, left, right)."""
    if isinstance(p, (tuple, list)) and len(p) == 4:
        return tuple(_as_int(v, "padding", op) for v in p)  # type: ignore[return-value]
    if isinstance(p, (tuple, list)) and len(p) != 2:
        raise ShapeError(f"{op}: padding must be an int, (ph, pw) or (top, bottom, left, right), got {p!r}")
    ph, pw = pair_arg(p, "padding", op)
    return (ph, ph, pw, pw)


def check_window_attrs(stride, padding, dilation) -> None:
    """Strides and dilations >= 1, paddings >= 0 (attrs built by hand skip the builders)."""
    check(len(stride) == 2 and all(s >= 1 for s in stride), f"stride must be two ints >= 1, got {stride}")
    check(len(dilation) == 2 and all(d >= 1 for d in dilation), f"dilation must be two ints >= 1, got {dilation}")
    check(len(padding) == 4 and all(p >= 0 for p in padding),
          f"padding must be four ints >= 0 (top, bottom, left, right), got {padding}")


def static_kernel(w: Tensor, axes=(1, 2)) -> tuple[int, int]:
    for a in axes:
        check(w.shape[a].is_static, f"kernel dims must be static, got weight {shape_str(w.shape)}")
    return tuple(w.shape[a].value for a in axes)  # type: ignore[return-value]


def window_out(size: Dim, lo: int, hi: int, k: int, s: int, d: int, axis: str) -> Dim:
    """Sliding-window output size, floor((size + lo + hi - eff) / s) + 1, for a Dim or an int."""
    eff = d * (k - 1) + 1
    padded = size + lo + hi
    # A dynamic size is rejected only when even its upper bound cannot hold one window.
    biggest = padded.upper if isinstance(padded, Dim) else padded
    check(biggest >= eff, f"kernel {axis} (effective size {eff}) is larger than the padded input "
                          f"({size} + {lo + hi} = {padded})")
    return (padded - eff) // s + 1


def _check_operands(inputs) -> None:
    for i, t in enumerate(inputs[1:], start=1):
        if t.dtype != inputs[0].dtype:
            raise DTypeError(f"operand {i} has dtype {t.dtype}, x has {inputs[0].dtype}; they must match")
    x, w = inputs[:2]
    check(x.ndim == 4, f"x must be 4-D NHWC, got rank {x.ndim} {shape_str(x.shape)}")
    check(w.ndim == 4, f"weight must be 4-D, got rank {w.ndim} {shape_str(w.shape)}")


def _check_bias(inputs, channels: Dim) -> None:
    if len(inputs) == 3:
        b = inputs[2]
        check(b.ndim == 1 and b.shape[0] == channels,
              f"bias must have shape [{channels}] (output channels), got {shape_str(b.shape)}")


# -- conv2d ---------------------------------------------------------------------------------

def _infer_conv(inputs, attrs: Conv2dAttrs):
    _check_operands(inputs)
    check_window_attrs(attrs.stride, attrs.padding, attrs.dilation)
    x, w = inputs[:2]
    n, h, wd, c = x.shape
    o, _, _, cg = w.shape
    g = attrs.groups
    kh, kw = static_kernel(w)
    check(isinstance(g, int) and g >= 1, f"groups must be an int >= 1, got {g!r}")
    check(not c.is_static or c.value % g == 0, f"input channels {c} are not divisible by groups={g}")
    check(cg * g == c, f"weight (OHWI) has {cg} input channels per group; x has C={c}, groups={g}, "
                       f"so it needs C/groups")
    check(not o.is_static or o.value % g == 0, f"output channels {o} are not divisible by groups={g}")
    _check_bias(inputs, o)
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = attrs.stride, attrs.padding, attrs.dilation
    ho = window_out(h, pt, pb, kh, sh, dh, "height")
    wo = window_out(wd, pl, pr, kw, sw, dw, "width")
    return [((n, ho, wo, o), x.dtype)]


def conv2d_nhwc(x: np.ndarray, w: np.ndarray, stride, padding, dilation, groups: int) -> np.ndarray:
    """im2col + one GEMM (one per group): BLAS does the work, which keeps a ResNet-50 in seconds."""
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = stride, padding, dilation
    if any(padding):
        x = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if kh == kw == 1:
        cols = x[:, : (ho - 1) * sh + 1 : sh, : (wo - 1) * sw + 1 : sw, :]
    else:
        win = sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(1, 2))
        win = win[:, ::sh, ::sw, :, ::dh, ::dw][:, :ho, :wo]  # [N, HO, WO, C, KH, KW]
        cols = win.transpose(0, 1, 2, 4, 5, 3)                 # tap-major, C innermost like OHWI
    p = n * ho * wo
    if groups == 1:
        out = cols.reshape(p, kh * kw * c) @ w.reshape(o, kh * kw * c).T
    else:
        colsg = cols.reshape(p, kh * kw, groups, cg).transpose(2, 0, 1, 3).reshape(groups, p, kh * kw * cg)
        wg = w.reshape(groups, o // groups, kh * kw * cg).transpose(0, 2, 1)
        out = np.matmul(colsg, wg).transpose(1, 0, 2).reshape(p, o)
    return out.reshape(n, ho, wo, o)


def _ref_conv(args, attrs: Conv2dAttrs, ctx):
    out = conv2d_nhwc(args[0], args[1], attrs.stride, attrs.padding, attrs.dilation, attrs.groups)
    if len(args) == 3:
        out = out + args[2]
    return [out]


register(OpKind.CONV2D, Category.CONV, Conv2dAttrs, with_epilogue_infer(_infer_conv),
         with_epilogue_reference(_ref_conv), num_inputs=(2, 3 + MAX_EXTRA), float_only=True)


# -- conv_transpose2d -----------------------------------------------------------------------

def _infer_conv_t(inputs, attrs: ConvTranspose2dAttrs):
    _check_operands(inputs)
    check_window_attrs(attrs.stride, attrs.padding, attrs.dilation)
    x, w = inputs[:2]
    n, h, wd, c = x.shape
    ci, _, _, cog = w.shape
    g = attrs.groups
    kh, kw = static_kernel(w)
    check(isinstance(g, int) and g >= 1, f"groups must be an int >= 1, got {g!r}")
    check(ci == c, f"weight [C_in, KH, KW, C_out/groups] has C_in={ci}, x has C={c}")
    check(not c.is_static or c.value % g == 0, f"input channels {c} are not divisible by groups={g}")
    op_ = attrs.output_padding
    check(len(op_) == 2 and all(p >= 0 for p in op_), f"output_padding must be two ints >= 0, got {op_}")
    for p, s, d, axis in zip(op_, attrs.stride, attrs.dilation, ("height", "width")):
        # torch's rule: the extra rows must be ones a larger input could have produced.
        check(p < s or p < d, f"output_padding {p} ({axis}) must be smaller than the stride ({s}) "
                              f"or the dilation ({d})")
    co = cog * g
    _check_bias(inputs, co)
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = attrs.stride, attrs.padding, attrs.dilation
    ho = (h - 1) * sh - pt - pb + dh * (kh - 1) + op_[0] + 1
    wo = (wd - 1) * sw - pl - pr + dw * (kw - 1) + op_[1] + 1
    for size, axis in ((ho, "height"), (wo, "width")):
        check(size.upper >= 1, f"output {axis} {size} is not positive (padding too large)")
    return [((n, ho, wo, co), x.dtype)]


def conv_transpose2d_nhwc(x: np.ndarray, w: np.ndarray, stride, padding, output_padding, dilation,
                          groups: int) -> np.ndarray:
    """One GEMM per group into per-tap columns, then scatter-add (col2im) and crop the padding."""
    n, h, wd, c = x.shape
    _, kh, kw, cog = w.shape
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = stride, padding, dilation
    g, cig = groups, c // groups
    hf = (h - 1) * sh + dh * (kh - 1) + 1 + output_padding[0]
    wf = (wd - 1) * sw + dw * (kw - 1) + 1 + output_padding[1]
    xg = x.reshape(n * h * wd, g, cig).transpose(1, 0, 2)
    cols = np.matmul(xg, w.reshape(g, cig, kh * kw * cog)).reshape(g, n, h, wd, kh, kw, cog)
    full = np.zeros((n, hf, wf, g, cog), dtype=np.result_type(x, w))
    for i in range(kh):
        for j in range(kw):
            tap = cols[:, :, :, :, i, j, :].transpose(1, 2, 3, 0, 4)
            full[:, i * dh: i * dh + (h - 1) * sh + 1: sh, j * dw: j * dw + (wd - 1) * sw + 1: sw] += tap
    full = full.reshape(n, hf, wf, g * cog)
    return full[:, pt: hf - pb, pl: wf - pr, :]


def _ref_conv_t(args, attrs: ConvTranspose2dAttrs, ctx):
    out = conv_transpose2d_nhwc(args[0], args[1], attrs.stride, attrs.padding, attrs.output_padding,
                                attrs.dilation, attrs.groups)
    if len(args) == 3:
        out = out + args[2]
    return [out]


register(OpKind.CONV_TRANSPOSE2D, Category.CONV, ConvTranspose2dAttrs, with_epilogue_infer(_infer_conv_t),
         with_epilogue_reference(_ref_conv_t), num_inputs=(2, 3 + MAX_EXTRA), float_only=True)


# -- builders -------------------------------------------------------------------------------

def _inputs(x, weight, bias):
    return [x, weight] if bias is None else [x, weight, bias]


def conv2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOr2 = 1,
           padding: Padding = 0, dilation: IntOr2 = 1, groups: int = 1, name=None) -> Tensor:
    """x [N, H, W, C], weight [O, KH, KW, C/groups] (OHWI), bias [O] -> [N, HO, WO, O]."""
    op = "conv2d"
    attrs = Conv2dAttrs(pair_arg(stride, "stride", op), padding_arg(padding, op),
                        pair_arg(dilation, "dilation", op), _as_int(groups, "groups", op))
    return make_op1(OpKind.CONV2D, _inputs(x, weight, bias), attrs, name)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOr2 = 1,
                     padding: Padding = 0, output_padding: IntOr2 = 0, dilation: IntOr2 = 1,
                     groups: int = 1, name=None) -> Tensor:
    """x [N, H, W, C_in], weight [C_in, KH, KW, C_out/groups] (torch's [Cin, Cout/g, kH, kW] permuted
    (0, 2, 3, 1)), bias [C_out] -> [N, HO, WO, C_out]."""
    op = "conv_transpose2d"
    attrs = ConvTranspose2dAttrs(pair_arg(stride, "stride", op), padding_arg(padding, op),
                                 pair_arg(output_padding, "output_padding", op),
                                 pair_arg(dilation, "dilation", op), _as_int(groups, "groups", op))
    return make_op1(OpKind.CONV_TRANSPOSE2D, _inputs(x, weight, bias), attrs, name)
