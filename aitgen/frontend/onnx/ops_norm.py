"""ONNX normalisation ops: BatchNormalization (inference), InstanceNormalization,
LayerNormalization, GroupNormalization, RMSNormalization, MeanVarianceNormalization,
LpNormalization, LRN.

The IR's batchnorm and groupnorm are channel-last; ONNX's channel is dim 1, so those run between
a permute that moves the channel last and one that moves it back (after a conv, the first cancels
against the conv's own permute back to NCHW). LayerNormalization and RMSNormalization already
normalise the trailing dims, which is the IR's layernorm / rmsnorm.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.tensor import Tensor, constant
from .ops_nn import float_input, like, norm_axis
from .registry import NodeContext, onnx_op


def _channel_last(x: Tensor) -> Tensor:
    return x if x.ndim <= 2 else ops.permute(x, [0] + list(range(2, x.ndim)) + [1])


def _channel_first(y: Tensor) -> Tensor:
    return y if y.ndim <= 2 else ops.permute(y, [0, y.ndim - 1] + list(range(1, y.ndim - 1)))


def _param(ctx: NodeContext, i: int, x: Tensor, what: str, required: bool = True) -> Optional[Tensor]:
    """A per-channel (or per-element) parameter in x's dtype: constants are converted here, a
    run-time tensor of another float type gets a cast."""
    if not ctx.has_input(i):
        if required:
            raise ctx.malformed(f"input {i} ({what}) is required")
        return None
    v = ctx.const(i)
    if v is not None:
        return like(v, x)
    t = ctx.input(i, what)
    if t.dtype == x.dtype:
        return t
    if not t.dtype.is_float:
        raise ctx.malformed(f"input {i} ({what}) has dtype {t.dtype}, X has {x.dtype}")
    return ops.cast(t, x.dtype)


def _eps(ctx: NodeContext, default: float = 1e-5) -> float:
    e = float(ctx.attr("epsilon", default))
    if not (np.isfinite(e) and e >= 0):
        raise ctx.malformed(f"epsilon must be finite and >= 0, got {e}")
    return e


def _check_channels(ctx: NodeContext, x: Tensor, params, what: str) -> None:
    c = x.shape[1] if x.ndim >= 2 else None
    for p in params:
        if p is not None and (p.ndim != 1 or c is None or p.shape[0] != c):
            raise ctx.malformed(f"{what} must have shape [C] = [{c}], got {list(map(str, p.shape))}")


@onnx_op("BatchNormalization", min_opset=7)
def _batchnorm(ctx: NodeContext):
    x = float_input(ctx, 0, "X")
    if x.ndim < 2:
        raise ctx.malformed(f"X must be [N, C, ...], got rank {x.ndim}")
    params = [_param(ctx, i, x, w) for i, w in ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var"))]
    _check_channels(ctx, x, params, "scale, B, mean and var")
    xl = _channel_last(x)
    if not ctx.attr("training_mode", 0):
        if any(ctx.node.output[1:]):
            raise ctx.malformed("the running mean/var outputs exist only in training mode")
        return _channel_first(ops.batchnorm(xl, *params, eps=_eps(ctx)))
    # Training mode: normalise with this batch's statistics (population variance) and return the
    # running statistics updated with `momentum`, as ONNX defines them.
    axes = list(range(xl.ndim - 1))
    mean, var = ops.reduce_mean(xl, axes), ops.reduce_var(xl, axes)
    y = _channel_first(ops.batchnorm(xl, params[0], params[1], mean, var, eps=_eps(ctx)))
    m = float(ctx.attr("momentum", 0.9))
    keep, new = like(np.float32(m), x), like(np.float32(1 - m), x)
    run_mean = ops.add(ops.mul(params[2], keep), ops.mul(mean, new))
    run_var = ops.add(ops.mul(params[3], keep), ops.mul(var, new))
    return [y, run_mean, run_var]


@onnx_op("InstanceNormalization", min_opset=6)
def _instancenorm(ctx: NodeContext):
    """Per (sample, channel) statistics over the spatial dims: a group norm with one channel per group."""
    x = float_input(ctx, 0, "input")
    if x.ndim < 3:
        raise ctx.malformed(f"input must be [N, C, spatial...], got rank {x.ndim}")
    c = x.shape[1]
    if not c.is_static:
        raise ctx.unsupported(f"the channel dim {c} must be static")
    scale, bias = _param(ctx, 1, x, "scale"), _param(ctx, 2, x, "B")
    _check_channels(ctx, x, [scale, bias], "scale and B")
    return _channel_first(ops.groupnorm(_channel_last(x), c.value, scale, bias, eps=_eps(ctx)))


@onnx_op("GroupNormalization", min_opset=18)
def _groupnorm(ctx: NodeContext):
    x = float_input(ctx, 0, "X")
    if x.ndim < 3:
        raise ctx.malformed(f"X must be [N, C, spatial...], got rank {x.ndim}")
    g = ctx.attr("num_groups")
    c = x.shape[1]
    if not c.is_static:
        raise ctx.unsupported(f"the channel dim {c} must be static")
    if not isinstance(g, int) or g < 1 or c.value % g:
        raise ctx.malformed(f"num_groups {g!r} must divide the {c.value} channels")
    scale, bias = _param(ctx, 1, x, "scale"), _param(ctx, 2, x, "bias")
    if ctx.opset < 21:
        # Opset 18's scale and bias are per group: spread each over the group's channels.
        for p in (scale, bias):
            if p.ndim != 1 or p.shape[0] != g:
                raise ctx.malformed(f"scale and bias must have shape [num_groups] = [{g}] before opset 21")
        spread = np.repeat(np.arange(g, dtype=np.int64), c.value // g)
        vals = [ctx.const(1), ctx.const(2)]
        scale, bias = (like(v[spread], x) if v is not None else ops.gather(p, constant(spread), 0)
                       for v, p in zip(vals, (scale, bias)))
    _check_channels(ctx, x, [scale, bias], "scale and bias")
    return _channel_first(ops.groupnorm(_channel_last(x), g, scale, bias, eps=_eps(ctx)))


def _trailing(ctx: NodeContext, x: Tensor) -> int:
    """Number of normalised trailing dims from the `axis` attribute (default -1)."""
    return x.ndim - norm_axis(ctx, ctx.attr("axis", -1), x.ndim)


def _affine_operand(ctx: NodeContext, i: int, x: Tensor, k: int, what: str):
    """(operand for the IR op, separate broadcast operand): a parameter of exactly the normalised
    shape goes into the op; one that only broadcasts (ONNX allows it) is applied after."""
    p = _param(ctx, i, x, what, required=False)
    if p is None:
        return None, None
    if tuple(p.shape) == tuple(x.shape[x.ndim - k:]):
        return p, None
    return None, p


@onnx_op("LayerNormalization", min_opset=17)
def _layernorm(ctx: NodeContext):
    x = float_input(ctx, 0, "X")
    if x.ndim == 0:
        raise ctx.malformed("X must have rank >= 1")
    k = _trailing(ctx, x)
    eps = _eps(ctx)
    w, w_after = _affine_operand(ctx, 1, x, k, "Scale")
    b, b_after = _affine_operand(ctx, 2, x, k, "B")
    if w_after is not None and b is not None:  # keep the op's operands positional (x, weight, bias)
        b, b_after = None, b
    y = ops.layernorm(x, w, b, eps=eps, num_axes=k)
    if w_after is not None:
        y = ops.mul(y, w_after)
    if b_after is not None:
        y = ops.add(y, b_after)
    outs = [y]
    if any(ctx.node.output[1:]):
        # Mean and InvStdDev: the statistics over the normalised dims, kept as size-1 dims.
        axes = list(range(x.ndim - k, x.ndim))
        outs.append(ops.reduce_mean(x, axes, keepdims=True))
        var = ops.reduce_var(x, axes, keepdims=True)
        outs.append(ops.rsqrt(ops.add(var, like(np.float32(eps), x))))
    return outs


@onnx_op("RMSNormalization", min_opset=23)
def _rmsnorm(ctx: NodeContext):
    x = float_input(ctx, 0, "X")
    if x.ndim == 0:
        raise ctx.malformed("X must have rank >= 1")
    k = _trailing(ctx, x)
    w, w_after = _affine_operand(ctx, 1, x, k, "scale")
    y = ops.rmsnorm(x, w, eps=_eps(ctx), num_axes=k)
    return ops.mul(y, w_after) if w_after is not None else y


@onnx_op("MeanVarianceNormalization", min_opset=9)
def _mvn(ctx: NodeContext):
    """(x - mean) / (sqrt(var) + 1e-9) over `axes` (ONNX's function body; its variance is
    E[x^2] - E[x]^2, ours the two-pass one, which equals it up to rounding)."""
    x = float_input(ctx, 0, "X")
    axes = [norm_axis(ctx, a, x.ndim, "axes entry") for a in ctx.attr("axes", [0, 2, 3])]
    mean = ops.reduce_mean(x, axes, keepdims=True)
    std = ops.sqrt(ops.reduce_var(x, axes, keepdims=True))
    return ops.div(ops.sub(x, mean), ops.add(std, like(np.float32(1e-9), x)))


@onnx_op("LpNormalization", min_opset=1)
def _lp_normalization(ctx: NodeContext):
    """x / ||x||_p along `axis`; 0 where the norm is 0 (the ONNX tests' rule for 0/0)."""
    x = float_input(ctx, 0, "input")
    axis = norm_axis(ctx, ctx.attr("axis", -1), x.ndim)
    p = ctx.attr("p", 2)
    if p not in (1, 2):
        raise ctx.malformed(f"p must be 1 or 2, got {p}")
    norm = (ops.reduce_sum(ops.abs(x), axis, keepdims=True) if p == 1
            else ops.sqrt(ops.reduce_sum(ops.mul(x, x), axis, keepdims=True)))
    zero = like(np.float32(0), x)
    return ops.where(ops.equal(norm, zero), zero, ops.div(x, norm))


@onnx_op("LRN", min_opset=1)
def _lrn(ctx: NodeContext):
    """x / (bias + alpha/size * sum of x^2 over a window of channels)^beta. The window sum is the
    sum of `size` shifted slices of the zero-padded squares (exact, no arithmetic on the padding)."""
    x = float_input(ctx, 0, "X")
    if x.ndim < 3:
        raise ctx.malformed(f"X must be [N, C, ...], got rank {x.ndim}")
    size = ctx.attr("size")
    if not isinstance(size, int) or size < 1:
        raise ctx.malformed(f"size must be an int >= 1, got {size!r}")
    alpha, beta, bias = (float(ctx.attr(n, d)) for n, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    c = x.shape[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = ops.mul(x, x)
    padded = ops.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    acc = None
    for j in range(size):
        part = ops.slice(padded, [j], [c + j], [1])
        acc = part if acc is None else ops.add(acc, part)
    den = ops.add(like(np.float32(bias), x), ops.mul(acc, like(np.float32(alpha / size), x)))
    return ops.div(x, ops.pow(den, like(np.float32(beta), x)))
