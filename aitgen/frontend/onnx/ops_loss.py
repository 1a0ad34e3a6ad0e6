"""ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference of the loss value).

The per-element pick x[n, target[n, d...], d...] is a one-hot select along the class axis:
equal(target, class ramp) chooses one element per position and a sum over the classes adds
zeros to it, so the pick is exact. Class weights are picked the same way; ignore_index zeroes a
position's loss and weight. Reductions follow ONNX's reference: 'mean' divides by the sum of
the picked weights when there are weights (or an ignore_index), else by the element count.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from .ops_nn import float_input, like
from .registry import NodeContext, onnx_op


def _log_softmax(x: Tensor, axis: int) -> Tensor:
    s = ops.sub(x, ops.reduce_max(x, axis, keepdims=True))
    return ops.sub(s, ops.log(ops.reduce_sum(ops.exp(s), axis, keepdims=True)))


def _loss(ctx: NodeContext, logp: Tensor, no_weight_ignore_counts: bool) -> Tensor:
    target = ctx.input(1, "target")
    if target.dtype not in (DType.int32, DType.int64):
        raise ctx.malformed(f"target must be int32 or int64, got {target.dtype}")
    if logp.ndim < 2 or target.ndim != logp.ndim - 1:
        raise ctx.malformed(f"input must be [N, C, d...] and target [N, d...], got ranks {logp.ndim}, {target.ndim}")
    c = logp.shape[1]
    if not c.is_static:
        raise ctx.unsupported(f"the class dim {c} must be static")
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.malformed(f"reduction {reduction!r} is not none, sum or mean")
    ignore: Optional[int] = ctx.attr("ignore_index", None)
    ramp = constant(np.arange(c.value, dtype=target.dtype.np).reshape([1, c.value] + [1] * (target.ndim - 1)))
    onehot = ops.equal(ops.unsqueeze(target, [1]), ramp)
    zero = like(np.float32(0), logp)
    loss = ops.neg(ops.reduce_sum(ops.where(onehot, logp, zero), 1))
    valid = None
    if ignore is not None:
        valid = ops.not_equal(target, constant(np.asarray(ignore, dtype=target.dtype.np)))
        loss = ops.where(valid, loss, zero)
    weight = None
    if ctx.has_input(2):
        w = ctx.input(2, "weight")
        if w.dtype != logp.dtype or w.ndim != 1:
            raise ctx.malformed(f"weight must be a 1-D {logp.dtype} tensor of C values")
        wb = ops.reshape(w, [1, c] + [1] * (target.ndim - 1))
        weight = ops.reduce_sum(ops.where(onehot, ops.expand(wb, onehot.shape), zero), 1)
        if valid is not None:
            weight = ops.where(valid, weight, zero)
    elif valid is not None and (no_weight_ignore_counts or ignore != -1):
        weight = ops.cast(valid, logp.dtype)
    if weight is not None:
        loss = ops.mul(loss, weight)
    if reduction == "none":
        return loss
    total = ops.reduce_sum(loss)
    if reduction == "sum":
        return total
    return ops.div(total, ops.reduce_sum(weight)) if weight is not None else ops.reduce_mean(loss)


@onnx_op("NegativeLogLikelihoodLoss", min_opset=12)
def _nll(ctx: NodeContext):
    # ONNX's reference counts ignored positions in a plain mean when ignore_index is -1 and no
    # weights are given; the generated expected outputs follow it, so this does too.
    return _loss(ctx, float_input(ctx, 0, "input"), no_weight_ignore_counts=False)


@onnx_op("SoftmaxCrossEntropyLoss", min_opset=12)
def _sce(ctx: NodeContext):
    x = float_input(ctx, 0, "scores")
    if x.ndim < 2:
        raise ctx.malformed(f"scores must be [N, C, d...], got rank {x.ndim}")
    logp = _log_softmax(x, 1)
    loss = _loss(ctx, logp, no_weight_ignore_counts=True)
    return [loss, logp] if ctx.num_outputs > 1 else [loss]
