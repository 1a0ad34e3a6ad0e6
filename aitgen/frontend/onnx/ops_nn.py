"""ONNX convolution and pooling (NCHW at the edges, NHWC inside), Gemm, MatMul, Einsum, and the
softmax family.

Layout: the IR's conv and pooling are NHWC with OHWI weights. A converter permutes its NCHW input
to NHWC, runs the IR op and permutes the result back, so two convolutions in a row meet as
permute(permute(y)), which fuse_memory_ops collapses. Constant weights are transposed here, once
(OIHW -> OHWI); a weight computed at run time gets a permute op. 1-D windows run as 2-D ones with a
height of 1; 3-D windows run as 2-D ones over (H, W) summed or maxed over depth slices (ops_nn3d.py).

Norms live in ops_norm.py, Resize in ops_resize.py and reductions in ops_reduce.py; the shared
helpers at the top of this file serve them too.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import Dim, prod
from ...ir.dtype import DType
from ...ir.op import OpKind
from ...ir.tensor import Tensor, constant
from ...ops.pool import Pool2dAttrs
from ...ops.registry import make_op1
from . import ops_nn3d, qdq_fold
from ._pool_indices import max_pool_indices
from .registry import NodeContext, onnx_op

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# -- shared helpers -------------------------------------------------------------------------------

def norm_axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -rank <= axis < max(rank, 1):
        raise ctx.malformed(f"{what} {axis!r} is out of range for rank {rank}")
    return int(axis) % rank if rank else 0


def float_input(ctx: NodeContext, i: int, what: str) -> Tensor:
    x = ctx.input(i, what)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"input {i} ({what}) has dtype {x.dtype}; aitgen's {ctx.op_type} takes "
                              "a float dtype")
    return x


def like(arr: np.ndarray, x: Tensor) -> Tensor:
    """A constant with x's dtype (parameters of an op must match its operand), rounded as the
    oracle computes: through float32 for float32 and narrower types, float64 kept."""
    if x.dtype.is_float:
        arr = np.asarray(arr, dtype=np.float64 if x.dtype is DType.float64 else np.float32)
    return constant(np.asarray(arr), dtype=x.dtype)


def as_input(ctx: NodeContext, i: int, x: Tensor, what: str) -> Optional[Tensor]:
    """Optional input i (None when omitted), checked for x's dtype."""
    if not ctx.has_input(i):
        return None
    t = ctx.input(i, what)
    if t.dtype != x.dtype:
        raise ctx.malformed(f"input {i} ({what}) has dtype {t.dtype}, input 0 has {x.dtype}")
    return t


def to_nhwc(x: Tensor) -> Tensor:
    return ops.permute(x, [0, 2, 3, 1])


def to_nchw(x: Tensor) -> Tensor:
    return ops.permute(x, [0, 3, 1, 2])


def _ints_attr(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    v = ctx.attr(name, [default] * n)
    if len(v) != n or not all(isinstance(a, int) for a in v):
        raise ctx.malformed(f"attribute '{name}' must hold {n} ints, got {v!r}")
    return [int(a) for a in v]


def window_attrs(ctx: NodeContext, x: Tensor, kernel: list[int], is_pool: bool):
    """(strides, dilations, pads_begin, pads_end) of a sliding window over x's spatial dims."""
    nsp = len(kernel)
    strides = _ints_attr(ctx, "strides", nsp, 1)
    dilations = _ints_attr(ctx, "dilations", nsp, 1)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise ctx.malformed(f"strides {strides} and dilations {dilations} must be >= 1")
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto not in _AUTO_PADS:
        raise ctx.malformed(f"auto_pad {auto!r} is not one of {list(_AUTO_PADS)}")
    if auto == "NOTSET":
        pads = _ints_attr(ctx, "pads", 2 * nsp, 0)
        if any(p < 0 for p in pads):
            raise ctx.unsupported(f"negative pads {pads} are not supported")
        return strides, dilations, pads[:nsp], pads[nsp:]
    if auto == "VALID":
        return strides, dilations, [0] * nsp, [0] * nsp
    begin, end = [], []
    for i, (k, s, d) in enumerate(zip(kernel, strides, dilations)):
        # ONNX's pooling ignores the dilation in SAME padding (its reference does too).
        eff = k if is_pool else d * (k - 1) + 1
        size = x.shape[2 + i]
        if s == 1:
            total = eff - 1  # independent of the input size, so a dynamic dim is fine
        elif size.is_static:
            total = max(0, (-(-size.value // s) - 1) * s + eff - size.value)
        else:
            raise ctx.unsupported(f"auto_pad {auto} with stride {s} over the dynamic dim {size}")
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        begin.append(lo)
        end.append(total - lo)
    return strides, dilations, begin, end


def spatial_rank(ctx: NodeContext, x: Tensor) -> int:
    nsp = x.ndim - 2
    if nsp not in (1, 2, 3):
        raise ctx.unsupported(f"{nsp}-D spatial input {list(map(str, x.shape))}: aitgen supports 1-D, 2-D "
                              "and 3-D windows")
    return nsp


def _as_2d(vals: list[int], fill: int) -> tuple[int, int]:
    return (fill, vals[0]) if len(vals) == 1 else (vals[0], vals[1])


def _weight(ctx: NodeContext, i: int, x: Tensor, nsp: int) -> Tensor:
    """Input i, a [O, I, *k] weight, as a [O, KH, KW, I] tensor (a constant is transposed here)."""
    w_val = ctx.const(i)
    if w_val is not None:
        if w_val.ndim != nsp + 2:
            raise ctx.malformed(f"weight has rank {w_val.ndim}, expected {nsp + 2}")
        w4 = w_val.reshape(w_val.shape[:2] + (1,) + w_val.shape[2:]) if nsp == 1 else w_val
        return like(np.ascontiguousarray(w4.transpose(0, 2, 3, 1)), x)
    w = ctx.input(i, "W")
    if w.ndim != nsp + 2:
        raise ctx.malformed(f"weight has rank {w.ndim}, expected {nsp + 2}")
    if w.dtype != x.dtype:
        raise ctx.malformed(f"weight has dtype {w.dtype}, X has {x.dtype}")
    if nsp == 1:
        w = ops.unsqueeze(w, [2])
    return ops.permute(w, [0, 2, 3, 1])


def _kernel(ctx: NodeContext, w_shape, nsp: int) -> list[int]:
    ks = list(w_shape[2:])
    if not all(isinstance(k, Dim) and k.is_static or isinstance(k, (int, np.integer)) for k in ks):
        raise ctx.unsupported(f"the kernel size {ks} must be static")
    k = [int(v.value if isinstance(v, Dim) else v) for v in ks]
    given = ctx.attr("kernel_shape", None)
    if given is not None and list(given) != k:
        raise ctx.malformed(f"kernel_shape {given} disagrees with the weight's {k}")
    return k


def _w_shape(ctx: NodeContext, i: int):
    v = ctx.value(i)
    if v is None:
        raise ctx.malformed(f"input {i} (W) is required")
    return tuple(v.shape)


# -- Conv / ConvTranspose -------------------------------------------------------------------------

def _conv_operands(ctx: NodeContext):
    """X, its spatial rank, W's shape, the kernel window and `group`: what Conv and ConvTranspose share."""
    x = float_input(ctx, 0, "X")
    nsp = spatial_rank(ctx, x)
    w_shape = _w_shape(ctx, 1)
    if len(w_shape) != nsp + 2:
        raise ctx.malformed(f"W has rank {len(w_shape)}, X has {nsp} spatial dims")
    kernel = _kernel(ctx, w_shape, nsp)
    groups = ctx.attr("group", 1)
    return x, nsp, w_shape, kernel, groups


@onnx_op("Conv", min_opset=1)
def _conv(ctx: NodeContext):
    x, nsp, w_shape, kernel, groups = _conv_operands(ctx)
    strides, dilations, begin, end = window_attrs(ctx, x, kernel, is_pool=False)
    if nsp == 3:
        return ops_nn3d.conv3d(ctx, x, kernel, groups, strides, dilations, begin, end, as_input(ctx, 2, x, "B"))
    b = as_input(ctx, 2, x, "B")
    if nsp == 2:
        y = qdq_fold.fold_conv(ctx, to_nhwc, to_nchw, b, _as_2d(strides, 1), (begin[0], end[0], begin[1], end[1]),
                               _as_2d(dilations, 1), groups)
        if y is not None:
            return y
    w = _weight(ctx, 1, x, nsp)
    xs = ops.unsqueeze(x, [2]) if nsp == 1 else x
    pad = (0, 0, begin[0], end[0]) if nsp == 1 else (begin[0], end[0], begin[1], end[1])
    y = ops.conv2d(to_nhwc(xs), w, b, stride=_as_2d(strides, 1), padding=pad,
                   dilation=_as_2d(dilations, 1), groups=groups)
    y = to_nchw(y)
    return ops.squeeze(y, [2]) if nsp == 1 else y


@onnx_op("ConvTranspose", min_opset=1)
def _conv_transpose(ctx: NodeContext):
    x, nsp, w_shape, kernel, groups = _conv_operands(ctx)
    strides = _ints_attr(ctx, "strides", nsp, 1)
    dilations = _ints_attr(ctx, "dilations", nsp, 1)
    out_pad = _ints_attr(ctx, "output_padding", nsp, 0)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto not in _AUTO_PADS:
        raise ctx.malformed(f"auto_pad {auto!r} is not one of {list(_AUTO_PADS)}")
    out_shape = ctx.attr("output_shape", None)
    has_pads = ctx.has_attr("pads") and auto in ("NOTSET", "VALID")
    pads = _ints_attr(ctx, "pads", 2 * nsp, 0) if has_pads else [0] * (2 * nsp)
    begin, end = pads[:nsp], pads[nsp:]
    if out_shape is not None and len(out_shape) > nsp:
        out_shape = list(out_shape)[-nsp:]  # an output_shape may include N and C
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        # The output size decides the padding: ONNX's total_padding rule.
        sizes = [x.shape[2 + i] for i in range(nsp)]
        if not all(s.is_static for s in sizes):
            raise ctx.unsupported("output_shape / auto_pad SAME over dynamic spatial dims")
        if out_shape is None:
            out_shape = [s.value * st for s, st in zip(sizes, strides)]
        for i in range(nsp):
            natural = strides[i] * (sizes[i].value - 1) + (kernel[i] - 1) * dilations[i] + 1
            if not has_pads:  # ONNX's total_padding counts output_padding in; SAME_UPPER pads less before
                total = natural + out_pad[i] - int(out_shape[i])
                begin[i] = total // 2 if auto == "SAME_UPPER" else total - total // 2
            # The rows after: whatever makes the output out_shape[i] long (IR size: natural - pads + op).
            end[i] = natural - begin[i] - int(out_shape[i])
        out_pad = [0] * nsp
        for i in range(nsp):
            if end[i] < 0:  # a larger output than the window reaches: zero rows after (output_padding)
                out_pad[i], end[i] = -end[i], 0
    if any(p < 0 for p in begin + end):
        raise ctx.unsupported(f"negative padding (begin {begin}, end {end}) is not supported")
    if nsp == 3:
        return ops_nn3d.conv_transpose3d(ctx, x, kernel, groups, strides, dilations, begin, end, out_pad,
                                         as_input(ctx, 2, x, "B"))
    w = _weight(ctx, 1, x, nsp)  # [C_in, KH, KW, C_out/g]: ONNX's [C_in, C_out/g, *k] permuted alike
    b = as_input(ctx, 2, x, "B")
    xs = ops.unsqueeze(x, [2]) if nsp == 1 else x
    pad = (0, 0, begin[0], end[0]) if nsp == 1 else (begin[0], end[0], begin[1], end[1])
    try:
        y = ops.conv_transpose2d(to_nhwc(xs), w, b, stride=_as_2d(strides, 1), padding=pad,
                                 output_padding=_as_2d(out_pad, 0), dilation=_as_2d(dilations, 1),
                                 groups=groups)
    except ValueError as e:
        if "output_padding" in str(e):
            raise ctx.unsupported(str(e)) from None
        raise
    y = to_nchw(y)
    return ops.squeeze(y, [2]) if nsp == 1 else y


# -- pooling --------------------------------------------------------------------------------------

def _pool_setup(ctx: NodeContext):
    x = ctx.input(0, "X")
    nsp = spatial_rank(ctx, x)
    kernel = _ints_attr(ctx, "kernel_shape", nsp, 0) if ctx.has_attr("kernel_shape") else None
    if kernel is None or any(k < 1 for k in kernel):
        raise ctx.malformed(f"kernel_shape must hold {nsp} ints >= 1, got {kernel}")
    strides, dilations, begin, end = window_attrs(ctx, x, kernel, is_pool=True)
    ceil = bool(ctx.attr("ceil_mode", 0))
    if ceil and ctx.attr("auto_pad", "NOTSET") != "NOTSET":
        raise ctx.unsupported("ceil_mode with auto_pad")
    return x, nsp, kernel, strides, dilations, begin, end, ceil


def _pool2d(ctx: NodeContext, fn, x, nsp, kernel, strides, dilations, begin, end, big_pad=None) -> Tensor:
    """fn(x_nhwc, kernel, stride, padding) over x's 1-D or 2-D windows. Pads beyond half the
    window (which the IR's pools refuse, as torch does) go through `big_pad(x_nhwc, pads4)`:
    the caller pads explicitly and pools without padding."""
    xs = ops.unsqueeze(x, [2]) if nsp == 1 else x
    pad = (0, 0, begin[0], end[0]) if nsp == 1 else (begin[0], end[0], begin[1], end[1])
    eff = [d * (k - 1) + 1 for k, d in zip(_as_2d(kernel, 1), _as_2d(dilations, 1))]
    xn = to_nhwc(xs)
    if any(p > e // 2 for p, e in zip(pad, (eff[0], eff[0], eff[1], eff[1]))):
        if big_pad is None or ctx.attr("ceil_mode", 0):
            raise ctx.unsupported(f"pads {begin + end} larger than half the window {kernel} (dilation "
                                  f"{dilations}){' with ceil_mode' if big_pad else ''}")
        y = big_pad(xn, pad)
    else:
        y = fn(xn, _as_2d(kernel, 1), _as_2d(strides, 1), pad)
    y = to_nchw(y)
    return ops.squeeze(y, [2]) if nsp == 1 else y


def _explicit_pad(x: Tensor, pad, value) -> Tensor:
    """x [N, H, W, C] padded (top, bottom, left, right) with a constant."""
    return ops.pad(x, [(0, 0), (pad[0], pad[1]), (pad[2], pad[3]), (0, 0)], value=value)


@onnx_op("MaxPool", min_opset=8)
def _max_pool(ctx: NodeContext):
    x, nsp, kernel, strides, dilations, begin, end, ceil = _pool_setup(ctx)
    if x.dtype == DType.bool:
        raise ctx.malformed("MaxPool over bool")
    k2, s2, d2 = _as_2d(kernel, 1), _as_2d(strides, 1), _as_2d(dilations, 1)

    def pool(t, k, s, p):
        return ops.max_pool2d(t, k, s, p, dilation=d2, ceil_mode=ceil)
    if nsp == 3:
        y = ops_nn3d.pool3d(ctx, x, "max", kernel, strides, dilations, begin, end, ceil)
    else:
        low = float("-inf") if x.dtype.is_float else float(np.iinfo(x.dtype.np).min)
        y = _pool2d(ctx, pool, x, nsp, kernel, strides, dilations, begin, end,
                    big_pad=lambda t, p: pool(_explicit_pad(t, p, low), k2, s2, 0))
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        # Y stays the fast pooling kernel; the indices are a separate composite.
        return [y, max_pool_indices(ctx, x, kernel, strides, dilations, begin, end, ceil)]
    return y


@onnx_op("AveragePool", min_opset=7)
def _avg_pool(ctx: NodeContext):
    float_input(ctx, 0, "X")
    x, nsp, kernel, strides, dilations, begin, end, ceil = _pool_setup(ctx)
    include = bool(ctx.attr("count_include_pad", 0))
    if nsp == 3:
        return ops_nn3d.pool3d(ctx, x, "avg", kernel, strides, dilations, begin, end, ceil, include_pad=include)

    def avg(t, k, s, p, inc=include):
        # The builder has no dilation (torch has none); the op and its kernels do.
        return make_op1(OpKind.AVG_POOL2D, [t], Pool2dAttrs(k, s, p, _as_2d(dilations, 1), ceil, inc))

    def big_pad(t, p):
        k2, s2 = _as_2d(kernel, 1), _as_2d(strides, 1)
        total = avg(_explicit_pad(t, p, 0.0), k2, s2, (0, 0, 0, 0), True)
        if include:
            return total
        # Divide by the real taps per window: the same average over a zero-padded mask of ones.
        h, w = t.shape[1], t.shape[2]
        if not (h.is_static and w.is_static):
            raise ctx.unsupported("large pads with count_include_pad=0 over dynamic spatial dims")
        ones = like(np.ones((1, h.value, w.value, 1), np.float32), t)
        return ops.div(total, avg(_explicit_pad(ones, p, 0.0), k2, s2, (0, 0, 0, 0), True))
    return _pool2d(ctx, avg, x, nsp, kernel, strides, dilations, begin, end, big_pad=big_pad)


@onnx_op("LpPool", min_opset=11)
def _lp_pool(ctx: NodeContext):
    """(sum over the window of |x|^p)^(1/p): a sum pool (average with every tap counted, times the
    window size) of |x|^p. Zero padding adds nothing to the sum."""
    float_input(ctx, 0, "X")
    x, nsp, kernel, strides, dilations, begin, end, ceil = _pool_setup(ctx)
    p = ctx.attr("p", 2)
    if p < 1:
        raise ctx.malformed(f"p must be >= 1, got {p}")
    if ceil:
        raise ctx.unsupported("ceil_mode in LpPool (the overhang would be counted in the window size)")
    if nsp == 3:
        return ops_nn3d.pool3d(ctx, x, "lp", kernel, strides, dilations, begin, end, ceil, p=p)
    ax = ops.abs(x)
    xp = ax if p == 1 else ops.mul(ax, ax) if p == 2 else ops.pow(ax, like(np.float32(p), x))

    def sum_pool(t, k, s, pad):
        a = make_op1(OpKind.AVG_POOL2D, [t], Pool2dAttrs(k, s, pad, _as_2d(dilations, 1), ceil, True))
        return ops.mul(a, like(np.float32(k[0] * k[1]), t))
    k2, s2 = _as_2d(kernel, 1), _as_2d(strides, 1)
    y = _pool2d(ctx, sum_pool, xp, nsp, kernel, strides, dilations, begin, end,
                big_pad=lambda t, p: sum_pool(_explicit_pad(t, p, 0.0), k2, s2, (0, 0, 0, 0)))
    return y if p == 1 else ops.sqrt(y) if p == 2 else ops.pow(y, like(np.float32(1.0 / p), x))


@onnx_op("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", min_opset=1)
def _global_pool(ctx: NodeContext):
    x = ctx.input(0, "X")
    if x.ndim < 3:
        raise ctx.malformed(f"X must be [N, C, spatial...], got rank {x.ndim}")
    axes = list(range(2, x.ndim))
    if ctx.op_type == "GlobalAveragePool":
        x = float_input(ctx, 0, "X")
        if x.ndim == 4:  # NHWC inside, like the convs around it
            return to_nchw(ops.global_avg_pool(to_nhwc(x), keepdims=True))
        return ops.reduce_mean(x, axes, keepdims=True)
    if ctx.op_type == "GlobalMaxPool":
        if x.ndim == 4:
            return to_nchw(ops.reduce_max(to_nhwc(x), [1, 2], keepdims=True))
        return ops.reduce_max(x, axes, keepdims=True)
    x = float_input(ctx, 0, "X")
    p = ctx.attr("p", 2)
    ax = ops.abs(x)
    s = ops.reduce_sum(ax if p == 1 else ops.pow(ax, like(np.float32(p), x)), axes, keepdims=True)
    return s if p == 1 else ops.pow(s, like(np.float32(1.0 / p), x))


# -- Gemm / MatMul --------------------------------------------------------------------------------

@onnx_op("Gemm", min_opset=7)
def _gemm(ctx: NodeContext):
    """alpha * A' @ B' + beta * C. A 1-D C of N elements with beta 1 is the GEMM's own bias; any
    other C (scalar, [M, 1], [M, N], ...) is a broadcast add, which fusion folds into the GEMM."""
    a = float_input(ctx, 0, "A")
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    ta, tb = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    if not ta and alpha == 1.0 and beta in (0.0, 1.0):
        y = qdq_fold.fold_matmul(ctx, as_input(ctx, 2, a, "C") if beta else None, tb)
        if y is not None:
            return y
    b_val = ctx.const(1)
    b = like(b_val, a) if b_val is not None else as_input(ctx, 1, a, "B")
    if b is None:
        raise ctx.malformed("input 1 (B) is required")
    if a.ndim != 2 or b.ndim != 2:
        raise ctx.malformed(f"A and B must be 2-D, got ranks {a.ndim} and {b.ndim}")
    if alpha != 1.0 and b_val is not None:
        b, alpha = like(b_val * np.float32(alpha), a), 1.0  # one constant multiply at import
    c = as_input(ctx, 2, a, "C") if beta != 0.0 else None
    n = b.shape[0] if tb else b.shape[1]
    bias = None
    if c is not None and beta == 1.0 and alpha == 1.0 and c.ndim >= 1 and c.shape[-1] == n \
            and all(d == 1 for d in c.shape[:-1]):
        bias, c = (c if c.ndim == 1 else ops.reshape(c, [n])), None
    y = ops.gemm(a, b, bias, layout=("c" if ta else "r") + ("c" if tb else "r") + "r")
    if alpha != 1.0:
        y = ops.mul(y, like(np.float32(alpha), a))
    if c is not None:
        c_val = ctx.const(2)
        y = ops.add(y, like(c_val * np.float32(beta), a) if c_val is not None
                    else c if beta == 1.0 else ops.mul(c, like(np.float32(beta), a)))
    return y


def matmul(ctx: NodeContext, a: Tensor, b: Tensor) -> Tensor:
    """numpy.matmul on IR gemm (b 2-D) / bmm (batch dims broadcast), 1-D operands included."""
    if a.ndim == 0 or b.ndim == 0:
        raise ctx.malformed("MatMul operands must have rank >= 1")
    a2 = ops.unsqueeze(a, [0]) if a.ndim == 1 else a
    b2 = ops.unsqueeze(b, [1]) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ctx.malformed(f"reduction dims differ: A {list(map(str, a.shape))}, B {list(map(str, b.shape))}")
    y = ops.gemm(a2, b2) if b2.ndim == 2 else ops.bmm(a2, b2)
    if b.ndim == 1:
        y = ops.squeeze(y, [y.ndim - 1])
    if a.ndim == 1:
        y = ops.squeeze(y, [y.ndim - 1 if b.ndim == 1 else y.ndim - 2])
    return y


@onnx_op("MatMul", min_opset=1)
def _matmul(ctx: NodeContext):
    a = ctx.input(0, "A")
    b = ctx.input(1, "B")
    if not a.dtype.is_float:
        raise ctx.unsupported(f"integer MatMul ({a.dtype}) is not supported (aitgen's GEMMs are float)")
    if b.dtype != a.dtype:
        raise ctx.malformed(f"A is {a.dtype}, B is {b.dtype}")
    y = qdq_fold.fold_matmul(ctx)
    return y if y is not None else matmul(ctx, a, b)


# -- softmax family -------------------------------------------------------------------------------

def _softmax_axis(ctx: NodeContext, x: Tensor):
    """(x viewed so that the softmax runs along one axis, that axis, a function undoing the view).

    Before opset 13 the op flattens x to 2-D at `axis` (default 1) and normalises each row; from
    13 on it normalises along `axis` (default -1)."""
    legacy = ctx.opset < 13
    axis = norm_axis(ctx, ctx.attr("axis", 1 if legacy else -1), x.ndim)
    if not legacy or axis == x.ndim - 1:
        return x, axis, lambda y: y
    shape = x.shape
    x2 = ops.reshape(x, [prod(shape[:axis]), prod(shape[axis:])])
    return x2, 1, lambda y: ops.reshape(y, list(shape))


@onnx_op("Softmax", "LogSoftmax", min_opset=1)
def _softmax(ctx: NodeContext):
    x = float_input(ctx, 0, "input")
    if x.ndim == 0:
        raise ctx.malformed("input must have rank >= 1")
    xv, axis, back = _softmax_axis(ctx, x)
    if ctx.op_type == "Softmax":
        return back(ops.softmax(xv, axis))
    # x - max - log(sum(exp(x - max))): exact where log(softmax) would underflow to -inf.
    s = ops.sub(xv, ops.reduce_max(xv, axis, keepdims=True))
    return back(ops.sub(s, ops.log(ops.reduce_sum(ops.exp(s), axis, keepdims=True))))


@onnx_op("Hardmax", min_opset=1)
def _hardmax(ctx: NodeContext):
    """1 at the first maximum along the axis, 0 elsewhere: argmax compared with an index ramp."""
    x = ctx.input(0, "input")
    xv, axis, back = _softmax_axis(ctx, x)
    n = xv.shape[axis]
    if not n.is_static:
        raise ctx.unsupported(f"Hardmax along the dynamic dim {n}")
    idx = ops.argmax(xv, axis, keepdims=True)
    ramp = constant(np.arange(n.value, dtype=np.int64).reshape([-1] + [1] * (xv.ndim - 1 - axis)))
    return back(ops.cast(ops.equal(idx, ramp), x.dtype))
