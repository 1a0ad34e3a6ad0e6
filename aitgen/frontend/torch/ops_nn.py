"""Network layers: convolution, pooling, batch/layer/group norm, softmax, attention, embedding,
nearest upsampling.

torch's NCHW meets the IR's NHWC here: a conv or pool reads its input in the NHWC layout (a permute
only when the input is not already stored that way, i.e. at the first conv) and leaves its result
NHWC; weights are transposed OIHW -> OHWI at import time. Norms normalise over the stored last
axis, so they take a channels-last layout as it comes.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import IntImm
from ...ir.dtype import DType
from ...ir.tensor import constant
from ._value import NHWC, Value
from .ops_elementwise import cast
from .registry import Unavailable, aten


def _pair(x, default=None) -> tuple[int, int]:
    if x is None or (isinstance(x, (list, tuple)) and len(x) == 0):
        return default
    if isinstance(x, int):
        return (x, x)
    x = [int(i) for i in x]
    return (x[0], x[0]) if len(x) == 1 else (x[0], x[1])


# -- convolution --------------------------------------------------------------------------------

def _as_2d(cx, v: Value) -> Value:
    """A conv1d operand [N, C, L] (or weight [O, I, k]) as its 2-D form [N, C, 1, L]."""
    t = cx.tensor(v)
    shape = list(t.shape[:2]) + [IntImm(1)] + list(t.shape[2:])
    if t.is_constant:
        out = constant(t.value.reshape([d.value for d in shape]), dtype=t.dtype)
        return Value(cx.imp.layouts.derive(t, out, "2d"))
    return Value(ops.reshape(t, shape))


@aten("convolution.default")
def _convolution(cx, a):
    x, w, bias = a["input"], a["weight"], a["bias"]
    if x.ndim not in (3, 4):
        cx.fail(f"a {x.ndim - 2}-D convolution (1-D and 2-D are supported)")
    one_d = x.ndim == 3
    if one_d:  # as a 2-D conv whose H is the unit dim
        x, w = _as_2d(cx, x), _as_2d(cx, w)
        stride, dilation = (1, int(a["stride"][0])), (1, int(a["dilation"][0]))
        padding, out_pad = (0, int(a["padding"][0])), (0, int(a["output_padding"][0]))
    else:
        stride, padding, dilation = _pair(a["stride"]), _pair(a["padding"]), _pair(a["dilation"])
        out_pad = _pair(a["output_padding"])
    xt, wt = cx.layout(x, NHWC), cx.layout(w, NHWC)  # OIHW -> OHWI, or [Cin, Cout/g, kh, kw] -> [Cin, kh, kw, Cout/g]
    b = None if bias is None else cx.tensor(bias)
    groups = int(a["groups"])
    if a["transposed"]:
        y = ops.conv_transpose2d(xt, wt, b, stride=stride, padding=padding, output_padding=out_pad,
                                 dilation=dilation, groups=groups)
    else:
        y = ops.conv2d(xt, wt, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    if one_d:  # stored [N, 1, L', O]: drop the unit H; torch's [N, O, L'] is then stored (0, 2, 1)
        return Value(ops.reshape(y, [y.shape[0], y.shape[2], y.shape[3]]), (0, 2, 1))
    return Value(y, NHWC)


# -- pooling ------------------------------------------------------------------------------------

def _pool_input(cx, x: Value):
    if x.ndim != 4:
        cx.fail(f"pooling a rank-{x.ndim} tensor (batched NCHW, rank 4, is supported)")
    return cx.layout(x, NHWC)


@aten("max_pool2d_with_indices.default", "max_pool2d.default")
def _max_pool(cx, a):
    k = _pair(a["kernel_size"])
    y = ops.max_pool2d(_pool_input(cx, a["self"]), k, stride=_pair(a["stride"], k), padding=_pair(a["padding"]),
                       dilation=_pair(a["dilation"]), ceil_mode=bool(a["ceil_mode"]))
    if cx.node.target._opname == "max_pool2d":
        return Value(y, NHWC)
    return Value(y, NHWC), Unavailable("the indices of max_pool2d_with_indices")


@aten("avg_pool2d.default")
def _avg_pool(cx, a):
    if a["divisor_override"] is not None:
        cx.fail("avg_pool2d with divisor_override")
    k = _pair(a["kernel_size"])
    y = ops.avg_pool2d(_pool_input(cx, a["self"]), k, stride=_pair(a["stride"], k), padding=_pair(a["padding"]),
                       ceil_mode=bool(a["ceil_mode"]), count_include_pad=bool(a["count_include_pad"]))
    return Value(y, NHWC)


@aten("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default", "adaptive_max_pool2d.default")
def _adaptive_pool(cx, a):
    x = _pool_input(cx, a["self"])
    oh, ow = _pair(a["output_size"])
    is_max = cx.node.target._opname == "adaptive_max_pool2d"
    if (oh, ow) == (1, 1):
        y = ops.reduce_max(x, [1, 2], keepdims=True) if is_max else ops.global_avg_pool(x, keepdims=True)
    else:
        h, w = x.shape[1], x.shape[2]
        if not (h.is_static and w.is_static and h.value % oh == 0 and w.value % ow == 0):
            cx.fail(f"adaptive pooling of {h}x{w} to {oh}x{ow} (only whole windows are supported)")
        k = (h.value // oh, w.value // ow)
        y = (ops.max_pool2d if is_max else ops.avg_pool2d)(x, k, stride=k)
    return (Value(y, NHWC), Unavailable("the indices of adaptive_max_pool2d")) if is_max else Value(y, NHWC)


# -- normalisation ------------------------------------------------------------------------------

def _channels_last(cx, v: Value):
    """(stored tensor, layout) with torch's dim 1 as the stored last axis."""
    if v.ndim <= 2:
        return cx.tensor(v), None
    if v.perm is not None and v.perm[-1] == 1:
        return v.t, v.perm
    perm = (0,) + tuple(range(2, v.ndim)) + (1,)
    return cx.layout(v, perm), perm


def _param(cx, p, c, fill: float, dtype: DType):
    if p is not None:
        return cast(cx.tensor(p), dtype)
    if not c.is_static:
        cx.fail("a norm without weight/bias over a dynamic channel count")
    return cx.const(np.full([c.value], fill), dtype)


@aten("_native_batch_norm_legit_no_training.default", "native_batch_norm.default", "_native_batch_norm_legit.default")
def _batch_norm(cx, a):
    if a.get("training"):
        cx.fail("batch norm in training mode (export the model in eval mode)")
    if a.get("running_mean") is None:
        cx.fail("batch norm without running statistics")
    x, perm = _channels_last(cx, a["input"])
    dt, c = x.dtype, x.shape[-1]
    y = ops.batchnorm(x, _param(cx, a["weight"], c, 1.0, dt), _param(cx, a["bias"], c, 0.0, dt),
                      cast(cx.tensor(a["running_mean"]), dt), cast(cx.tensor(a["running_var"]), dt), eps=float(a["eps"]))
    return Value(y, perm), Unavailable("batch norm's saved mean"), Unavailable("batch norm's saved rstd")


@aten("native_group_norm.default")
def _group_norm(cx, a):
    x, perm = _channels_last(cx, a["input"])
    dt, c = x.dtype, x.shape[-1]
    w = None if a["weight"] is None else cast(cx.tensor(a["weight"]), dt)
    b = None if a["bias"] is None else cast(cx.tensor(a["bias"]), dt)
    if w is None and b is not None:
        w = _param(cx, None, c, 1.0, dt)
    y = ops.groupnorm(x, int(a["group"]), w, b, eps=float(a["eps"]))
    return Value(y, perm), Unavailable("group norm's mean"), Unavailable("group norm's rstd")


@aten("native_layer_norm.default")
def _layer_norm(cx, a):
    v, k = a["input"], len(a["normalized_shape"])
    tail = tuple(range(v.ndim - k, v.ndim))
    if v.perm is not None and tuple(v.perm[-k:]) == tail:  # the normalised dims are stored last, in order
        x, perm = v.t, v.perm
    else:
        x, perm = cx.tensor(v), None
    dt = x.dtype
    w = None if a["weight"] is None else cast(cx.tensor(a["weight"]), dt)
    b = None if a["bias"] is None else cast(cx.tensor(a["bias"]), dt)
    y = ops.layernorm(x, w, b, eps=float(a["eps"]), num_axes=k)
    return Value(y, perm), Unavailable("layer norm's mean"), Unavailable("layer norm's rstd")


# -- softmax -------------------------------------------------------------------------------------

def _stored_axis(v: Value, dim: int) -> int:
    d = int(dim) % max(v.ndim, 1)
    return d if v.perm is None else v.perm.index(d)


@aten("_softmax.default", "softmax.int")
def _softmax(cx, a):
    v = a["self"]
    t = cast(v.t, cx.out_dtype())
    return Value(ops.softmax(t, _stored_axis(v, a["dim"])), v.perm)


@aten("_log_softmax.default", "log_softmax.int")
def _log_softmax(cx, a):
    v = a["self"]
    t, ax = cast(v.t, cx.out_dtype()), _stored_axis(v, a["dim"])
    # x - max - log(sum(exp(x - max))): no log of an underflowed softmax
    s = ops.sub(t, ops.reduce_max(t, [ax], keepdims=True))
    return Value(ops.sub(s, ops.log(ops.reduce_sum(ops.exp(s), [ax], keepdims=True))), v.perm)


# -- attention, embedding, upsampling ------------------------------------------------------------

@aten("scaled_dot_product_attention.default", "_scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa(cx, a):
    if float(a["dropout_p"]) != 0.0:
        cx.fail("attention with dropout")
    if a.get("enable_gqa"):
        cx.fail("grouped-query attention (enable_gqa)")
    mask = a.get("attn_mask")
    q, k, v = (cx.tensor(a[n]) for n in ("query", "key", "value"))
    out = ops.scaled_dot_product_attention(q, k, v, None if mask is None else cx.tensor(mask),
                                           causal=bool(a["is_causal"]), scale=a.get("scale"))
    if cx.node.target._opname == "scaled_dot_product_attention":
        return out
    return out, Unavailable("attention's logsumexp")


@aten("embedding.default")
def _embedding(cx, a):
    return ops.embedding(cx.tensor(a["indices"]), cx.tensor(a["weight"]))


@aten("upsample_nearest2d.vec", "upsample_nearest2d.default")
def _upsample_nearest(cx, a):
    v = a.get("input", a.get("self"))
    out = cx.dims(cx.out_fake().shape)
    nhwc = v.perm == NHWC
    t = v.t if nhwc else cx.tensor(v)
    h_ax, w_ax = (1, 2) if nhwc else (2, 3)
    sh, sw = out[2].exact_div(t.shape[h_ax]), out[3].exact_div(t.shape[w_ax])
    if sh is None or sw is None or not (sh.is_static and sw.is_static):
        cx.fail("nearest upsampling by a non-integer factor")
    # nearest with an integer factor repeats every pixel: [.., H, 1, W, 1, ..] broadcast to the factors
    s = list(t.shape)
    y = ops.reshape(t, s[:h_ax + 1] + [1] + s[w_ax:w_ax + 1] + [1] + s[w_ax + 1:])
    big = s[:h_ax + 1] + [sh] + s[w_ax:w_ax + 1] + [sw] + s[w_ax + 1:]
    y = ops.expand(y, big)
    y = ops.reshape(y, s[:h_ax] + [s[h_ax] * sh, s[w_ax] * sw] + s[w_ax + 1:])
    return Value(y, NHWC if nhwc else None)

