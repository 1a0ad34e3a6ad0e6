"""int8 GEMM and conv (issue 14): what passes/quantize_int8.py turns a float32 GEMM/conv with a
constant weight into, and what the CPU backend runs as one oneDNN int8 primitive.

Operands: [x (float32), w (int8), x_scale (float32 [1]), w_scale (float32 [N] or [O]), bias?
(float32)] + the fused epilogue's extras. Semantics (the oracle below, and the kernel):

    q   = clip(rint(x / x_scale), lo, hi)      in float32; rint is round-half-even; lo, hi of act
    acc = q @ w (or conv(q, w))                 int32, exact
    y   = epilogue(float32(acc) * (x_scale * w_scale[n]) + bias[n])

`act` is int8 (symmetric, [-127, 127]: -128 is left out so that -x quantises to -q) or uint8
(x >= 0 by calibration, [0, 255], zero point 0). No zero points: oneDNN's int8 kernels then run
their plain (fast) form on every ISA. The float part differs from the kernel by rounding only
(oneDNN may scale acc in another order), a few ulps of the output.

Requantisation (quantize_int8 fuses it where every reader is an int8 op that quantises the result
the same way, or reads it as a quantised epilogue operand): with `out_act` set, the result after the
epilogue is stored quantised, clip(rint(y / out_scale)) over the type's whole range (int8: -128..127,
where oneDNN's store saturates), out_scale the last own operand, and an x already of type `act` is
read as it is (no quantisation).

Quantised epilogue operands: `extra_scales[j]` > 0 says extra j is int8/uint8 holding
extra / extra_scales[j] (a requantised residual); the epilogue reads float32(q) * scale.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..errors import DTypeError
from ..ir.dims import shape_str
from ..ir.dtype import DType
from ..ir.op import OpKind
from .conv import Conv2dAttrs, _infer_conv, conv2d_nhwc
from .fused import MAX_EXTRA, Epilogue, split_operands, with_epilogue_infer
from .operand_views import StridedView, with_views_infer, with_views_reference
from .registry import Category, check, register

__all__ = ["QGemmAttrs", "QConv2dAttrs", "quantize_activation", "own_parts", "extra_scales", "ACT_RANGES"]

# The integer range each activation type is quantised into (int8 symmetric: -127..127).
ACT_RANGES = {DType.int8: (-127, 127), DType.uint8: (0, 255)}
# A requantised result saturates to its type's whole range, as oneDNN's dst conversion does (an s8
# result below -127.5 * out_scale is -128; its readers take it as it is).
REQUANT_RANGES = {DType.int8: (-128, 127), DType.uint8: (0, 255)}


@dataclasses.dataclass(frozen=True)
class QGemmAttrs:
    """C[M,N] = dequant(quant(A) @ W) (+ bias) -> epilogue. W is int8 [N, K] (trans_b) or [K, N]."""
    trans_b: bool = True
    act: DType = DType.int8
    epilogue: Optional[Epilogue] = None
    operand_views: Optional[tuple[Optional[StridedView], ...]] = None  # as GemmAttrs's (a only)
    out_act: Optional[DType] = None   # the result (after the epilogue) requantised to int8 / uint8 by out_scale
    extra_scales: tuple[float, ...] = ()   # per epilogue extra: 0 (float) or the scale of a quantised one


@dataclasses.dataclass(frozen=True)
class QConv2dAttrs:
    """conv2d (NHWC x, OHWI int8 weight) with the same quantisation as QGemmAttrs."""
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    act: DType = DType.int8
    epilogue: Optional[Epilogue] = None
    out_act: Optional[DType] = None   # as QGemmAttrs.out_act
    extra_scales: tuple[float, ...] = ()   # as QGemmAttrs.extra_scales


def quantize_activation(x: np.ndarray, scale: float, act: DType) -> np.ndarray:
    """x quantised as the kernel does it: float32 division, round-half-even, saturation; an x that
    is already integer (a requantised producer's) as it is."""
    if np.asarray(x).dtype.kind in "iu":
        return np.asarray(x).astype(np.int32)
    lo, hi = ACT_RANGES[act]
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale))
    return np.clip(q, lo, hi).astype(np.int32)


def own_parts(own, attrs):
    """(x, w, x_scale, w_scale, bias or None, out_scale or None) of the op's own operands."""
    n_out = attrs.out_act is not None
    bias = own[4] if len(own) == 5 + n_out else None
    return own[0], own[1], own[2], own[3], bias, (own[-1] if n_out else None)


def _check_quant(inputs, n, attrs) -> None:
    n_out = attrs.out_act is not None
    check(len(inputs) in (4 + n_out, 5 + n_out), f"takes {4 + n_out} or {5 + n_out} own operands, got {len(inputs)}")
    x, w, xs, ws, bias, out_scale = own_parts(inputs, attrs)
    if attrs.act not in ACT_RANGES or (n_out and attrs.out_act not in ACT_RANGES):
        raise DTypeError(f"act and out_act must be int8 or uint8, got {attrs.act}, {attrs.out_act}")
    if x.dtype not in (DType.float32, attrs.act):
        raise DTypeError(f"x must be float32 or {attrs.act} (already quantised), got {x.dtype}")
    if w.dtype is not DType.int8:
        raise DTypeError(f"the weight must be int8, got {w.dtype}")
    for what, t in (("x_scale", xs), ("w_scale", ws), ("bias", bias), ("out_scale", out_scale)):
        if t is not None and t.dtype is not DType.float32:
            raise DTypeError(f"{what} must be float32, got {t.dtype}")
    for what, t in (("x_scale", xs), ("out_scale", out_scale)):
        if t is not None:
            check(t.ndim == 1 and t.shape[0] == 1, f"{what} must have shape [1], got {shape_str(t.shape)}")
    check(ws.ndim == 1 and ws.shape[0] == n, f"w_scale must have shape [{n}], got {shape_str(ws.shape)}")
    if bias is not None:
        check(bias.ndim == 1 and bias.shape[0] == n, f"bias must have shape [{n}], got {shape_str(bias.shape)}")


def _dequant(acc: np.ndarray, args, attrs) -> np.ndarray:
    """float32(acc) * (x_scale * w_scale) + bias, the order oneDNN computes it in (the epilogue
    and the requantisation come after: _with_quant_epilogue)."""
    _, _, xs, ws, bias, _ = own_parts(args, attrs)
    scale = (xs.astype(np.float32)[0] * ws.astype(np.float32)).astype(np.float32)
    out = acc.astype(np.float32) * scale
    if bias is not None:
        out = out + bias
    return out.astype(np.float32)


def extra_scales(attrs, n: int) -> tuple[float, ...]:
    """Per epilogue extra of a QGEMM / QCONV2D: 0 (float) or the scale of a quantised one."""
    s = tuple(attrs.extra_scales)
    return s if s else (0.0,) * n


def _with_quant_infer(infer):
    """The epilogue's rules with each quantised extra standing in as float32; the result is
    out_act when requantised, else what the epilogue gives."""
    def wrapped(inputs, attrs):
        own, extra = split_operands(inputs, attrs)
        scales = extra_scales(attrs, len(extra))
        check(len(scales) == len(extra), f"extra_scales has {len(scales)} entries for {len(extra)} epilogue operands")
        stand = []
        for t, sc in zip(extra, scales):
            if sc:
                if t.dtype not in ACT_RANGES or not sc > 0:
                    raise DTypeError(f"quantised epilogue operand '{t.name}' must be int8 or uint8 with a "
                                     f"positive scale, got {t.dtype} and {sc}")
                from ..ir.tensor import Tensor
                t = Tensor(t.shape, DType.float32)
            stand.append(t)
        ((shape, dtype),) = with_epilogue_infer(infer)(own + stand, attrs)
        return [(shape, attrs.out_act or dtype)]
    return wrapped


def _with_quant_epilogue(ref):
    """dequantised result -> epilogue (quantised extras read as float32(q) * scale) -> requantised
    by out_scale when out_act is set."""
    def wrapped(args, attrs, ctx):
        own, extra = split_operands(args, attrs)
        (out,) = ref(own, attrs, ctx)
        ep = attrs.epilogue
        if ep is not None:
            deq = [np.asarray(x).astype(np.float32) * np.float32(sc) if sc else x
                   for x, sc in zip(extra, extra_scales(attrs, len(extra)))]
            (out,) = ep.expr.evaluate([out] + deq)
            out = np.broadcast_to(out, ctx.out_shapes[0]).astype(np.float32)
        out_scale = own_parts(own, attrs)[5]
        if out_scale is not None:
            lo, hi = REQUANT_RANGES[attrs.out_act]
            return [np.clip(np.rint(out / np.float32(out_scale[0])), lo, hi).astype(np.int32)]
        return [out]
    return wrapped


# -- qgemm ----------------------------------------------------------------------------------

def _infer_qgemm(inputs, attrs: QGemmAttrs):
    a, w = inputs[:2]
    check(a.ndim >= 2, f"a must have rank >= 2 [..., M, K], got {shape_str(a.shape)}")
    check(w.ndim == 2, f"the weight must be 2-D, got {shape_str(w.shape)}")
    n, k = w.shape if attrs.trans_b else w.shape[::-1]
    check(a.shape[-1] == k, f"reduction dims differ: a has K={a.shape[-1]}, the weight has K={k}")
    _check_quant(inputs, n, attrs)
    return [(tuple(a.shape[:-1]) + (n,), attrs.out_act or DType.float32)]


def _ref_qgemm(args, attrs: QGemmAttrs, ctx):
    a, w = args[0], args[1].astype(np.int32)
    q = quantize_activation(a, float(args[2][0]), attrs.act)
    if not attrs.trans_b:
        w = w.T
    rows = int(np.prod(q.shape[:-1]))
    # int64 products: numpy's integer matmul is exact (no BLAS), as int32 accumulation is for K < 2^17
    acc = (q.reshape(rows, q.shape[-1]).astype(np.int64) @ w.T.astype(np.int64))
    acc = acc.reshape(q.shape[:-1] + (w.shape[0],))
    return [_dequant(acc, args, attrs)]


register(OpKind.QGEMM, Category.GEMM, QGemmAttrs, with_views_infer(_with_quant_infer(_infer_qgemm)),
         with_views_reference(_with_quant_epilogue(_ref_qgemm)), num_inputs=(4, 6 + MAX_EXTRA))


# -- qconv2d --------------------------------------------------------------------------------

def _conv_attrs(attrs: QConv2dAttrs) -> Conv2dAttrs:
    return Conv2dAttrs(attrs.stride, attrs.padding, attrs.dilation, attrs.groups)


def _infer_qconv(inputs, attrs: QConv2dAttrs):
    x, w = inputs[:2]
    _check_quant(inputs, w.shape[0], attrs)
    # conv2d's shape rules, on float32 stand-ins (its own check wants x and w alike)
    from ..ir.tensor import Tensor
    bias = own_parts(inputs, attrs)[4]
    stand = [Tensor(x.shape, DType.float32), Tensor(w.shape, DType.float32)] + ([bias] if bias is not None else [])
    ((shape, _),) = _infer_conv(stand, _conv_attrs(attrs))
    return [(shape, attrs.out_act or DType.float32)]


def _ref_qconv(args, attrs: QConv2dAttrs, ctx):
    q = quantize_activation(args[0], float(args[2][0]), attrs.act)
    # float64 im2col + BLAS is exact for these integers: |sum| < 2^53
    acc = conv2d_nhwc(q.astype(np.float64), args[1].astype(np.float64), attrs.stride, attrs.padding,
                      attrs.dilation, attrs.groups)
    return [_dequant(np.rint(acc).astype(np.int64), args, attrs)]


register(OpKind.QCONV2D, Category.CONV, QConv2dAttrs, _with_quant_infer(_infer_qconv),
         _with_quant_epilogue(_ref_qconv), num_inputs=(4, 6 + MAX_EXTRA))
