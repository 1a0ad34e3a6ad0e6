"""ONNX opset-27 stateful sequence ops of linear-attention / state-space models: CausalConvWithState
(a depthwise causal conv1d that carries its last k-1 inputs) and LinearAttention (the recurrent
state-matrix update of linear attention, DeltaNet and Gated DeltaNet).

CausalConvWithState decomposes into IR ops every backend runs: the input left-extended by the
past state (zeros without one), then k shifted windows, each times its weight column, summed
(k is small: 2-4 in the models that use it), plus bias and the optional SiLU.
LinearAttention has the linear_attention IR op (ops/linear_attention.py): a scan over time that
the element-wise ops cannot express.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dtype import DType
from .registry import NodeContext, onnx_op

_BIG = np.iinfo(np.int64).max  # a Slice end meaning "to the end"


def _to(t, dt: str):
    return t if t.dtype.value == dt else ops.cast(t, dt)


@onnx_op("CausalConvWithState", min_opset=27)
def _causal_conv_with_state(ctx: NodeContext):
    x, w = ctx.input(0, "input"), ctx.input(1, "weight")
    act = ctx.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ctx.malformed(f"activation '{act}' is not one of none/silu/swish")
    if not x.dtype.is_float or w.dtype != x.dtype:
        raise ctx.unsupported(f"CausalConvWithState over {x.dtype}/{w.dtype}: float inputs of one dtype")
    if x.ndim != 3 or w.ndim != 3 or not w.shape[2].is_static:
        raise ctx.malformed(f"input must be [B, C, L] and weight [C, 1, k] with a static k, got ranks {x.ndim}, {w.ndim}")
    k = w.shape[2].value
    if k < 1:
        raise ctx.malformed("the kernel size k must be at least 1")
    c = x.shape[1]
    # The reference computes in the input's dtype for float32 and wider; narrower floats would
    # round after every tap here, so they compute in float32 and round once at the end.
    cdt = "float32" if x.dtype in (DType.float16, DType.bfloat16) else x.dtype.value
    xc, wc = _to(x, cdt), _to(w, cdt)
    if ctx.has_input(3):
        past = ctx.input(3, "past_state")
        if past.ndim != 3 or not past.shape[2].is_static or past.shape[2].value != k - 1:
            raise ctx.malformed(f"past_state must be [B, C, {k - 1}], got {[str(d) for d in past.shape]}")
        padded = ops.concat([_to(past, cdt), xc], 2) if k > 1 else xc
    else:
        padded = ops.pad(xc, [(0, 0), (0, 0), (k - 1, 0)]) if k > 1 else xc
    y = None
    for t in range(k):  # window t: padded[:, :, t : t + L], times weight column t
        win = ops.slice(padded, [t], [t - (k - 1) if t < k - 1 else _BIG], [2])
        tap = ops.mul(win, ops.reshape(ops.slice(wc, [t], [t + 1], [2]), [c, 1]))
        y = tap if y is None else ops.add(y, tap)
    if ctx.has_input(2):
        y = ops.add(y, ops.reshape(_to(ctx.input(2, "bias"), cdt), [c, 1]))
    if act != "none":  # silu and swish (beta 1) are the same function
        y = ops.silu(y)
    y = _to(y, x.dtype.value)
    if k > 1:
        present = _to(ops.slice(padded, [-(k - 1)], [_BIG], [2]), x.dtype.value)
    else:  # nothing to carry: an empty [B, C, 0] state
        present = ops.slice(x, [0], [0], [2])
    return [y, present][:ctx.num_outputs]


@onnx_op("LinearAttention", min_opset=27)
def _linear_attention(ctx: NodeContext):
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in ops.LINEAR_ATTENTION_RULES:
        raise ctx.malformed(f"update_rule '{rule}' is not one of {ops.LINEAR_ATTENTION_RULES}")
    hq, hk = ctx.attr("q_num_heads", None), ctx.attr("kv_num_heads", None)
    if hq is None or hk is None:
        raise ctx.malformed("q_num_heads and kv_num_heads are required")
    q, k, v = (ctx.input(i, w) for i, w in enumerate(("query", "key", "value")))
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for i, what, needed in ((4, "decay", gated), (5, "beta", delta)):
        if ctx.has_input(i) != needed:
            raise ctx.malformed(f"update_rule '{rule}' {'requires' if needed else 'forbids'} the {what} input")
    for t in (q, k, v):
        if t.ndim != 3 or not t.shape[2].is_static:
            raise ctx.malformed(f"query/key/value must be [B, T, H*D] with a static last dim, got rank {t.ndim}")
    if not q.dtype.is_float:
        raise ctx.unsupported(f"LinearAttention over {q.dtype}: float inputs only")
    return list(ops.linear_attention(
        q, k, v, q_heads=int(hq), kv_heads=int(hk), rule=rule, scale=float(ctx.attr("scale", 0.0)),
        past_state=ctx.inputs[3], decay=ctx.inputs[4], beta=ctx.inputs[5], name=ctx.name))[:ctx.num_outputs]
