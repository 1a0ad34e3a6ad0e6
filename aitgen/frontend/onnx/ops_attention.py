"""ONNX Attention (opset 23+), decomposed into bmm, softmax and element-wise ops; RotaryEmbedding.

  Y = softmax(softcap(Q*sqrt(s) @ (K*sqrt(s))^T) + bias) @ V
with the bias the sum of the attention mask (bool masks become 0 / -inf), the causal mask
(bottom-right aligned after a past cache) and the sliding window (opset 25), all built as
import-time constants where they depend only on shapes. Grouped-query attention repeats each
K/V head (a constant-index gather over the head axis); 3-D inputs are split into heads and merged
back. A row whose bias is -inf everywhere has no key to attend: ONNX defines its probabilities
(and Y) as 0, which a where() on the bias gives. nonpad_kv_seqlen (a per-batch run-time length of
an external cache, opset 24+) masks keys at or past each batch's length, and moves the causal /
window frontier per batch (offset[b] = nonpad_kv_seqlen[b] - q_len): those masks are built at run
time from the lengths, [B, 1, q, kv] (_nonpad_bias).

FlexAttention (ai.onnx.preview opset 1) is the same core with user subgraphs: score_mod on the
scaled scores and prob_mod on the probabilities, each inlined over the [B, Hq, q, kv] tensor in
the softmax precision (float32 for float16/bfloat16, else the input's; softmax_precision chooses).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from .ops_nn import like
from .registry import NodeContext, onnx_op


def _heads(ctx: NodeContext, t: Tensor, n: Optional[int], what: str) -> Tensor:
    """[B, S, n*h] -> [B, n, S, h] for 3-D inputs; 4-D ones are already [B, n, S, h]."""
    if t.ndim == 4:
        return t
    if t.ndim != 3 or n is None:
        raise ctx.malformed(f"{what} must be 4-D [B, heads, S, h], or 3-D with q_num_heads/kv_num_heads")
    hidden = t.shape[2]
    if not hidden.is_static or hidden.value % n:
        raise ctx.malformed(f"{what}'s hidden size {hidden} is not a multiple of {n} heads")
    b, s = t.shape[0], t.shape[1]
    return ops.permute(ops.reshape(t, [b, s, n, hidden.value // n]), [0, 2, 1, 3])


def _static(ctx: NodeContext, d, what: str) -> int:
    if not d.is_static:
        raise ctx.unsupported(f"{what} {d} must be static")
    return d.value


def _mask_bias(ctx: NodeContext, mask: Tensor, q: Tensor, kv_len: int) -> Tensor:
    """An attn_mask as an additive bias in q's dtype, padded with -inf up to kv_len keys."""
    neg = like(np.float32(-np.inf), q)
    if mask.dtype == DType.bool:
        mask = ops.where(mask, like(np.float32(0), q), neg)
    elif mask.dtype != q.dtype:
        raise ctx.malformed(f"attn_mask has dtype {mask.dtype}, Q has {q.dtype}")
    have = _static(ctx, mask.shape[-1], "attn_mask's last dim")
    if have < kv_len:
        mask = ops.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - have)], value=float("-inf"))
    return mask


def _window(q_len: int, kv_len: int, offset: int, causal: bool, left: int, right: int) -> Optional[np.ndarray]:
    """Allowed (query, key) pairs of the causal / sliding-window constraints, or None for all."""
    diff = (np.arange(q_len)[:, None] + offset) - np.arange(kv_len)[None, :]
    allowed = np.ones((q_len, kv_len), bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return None if allowed.all() else allowed


def _nonpad_bias(ctx: NodeContext, q: Tensor, q_len: int, kv_len: int, causal: bool, left: int,
                 right: int) -> Tensor:
    """The [B, 1, q, kv] bias of nonpad_kv_seqlen: key j of batch b is kept iff j < len[b] and the
    causal / window constraints hold at offset[b] = len[b] - q_len (as onnx's reference does; the
    offset is not clamped, so a negative one can leave a row with no key: Y = 0 there)."""
    lens = ctx.input(6, "nonpad_kv_seqlen")
    if lens.dtype not in (DType.int32, DType.int64) or lens.ndim != 1:
        raise ctx.malformed(f"nonpad_kv_seqlen must be a 1-D int32/int64 tensor, got {lens.dtype} rank {lens.ndim}")
    lens = ops.reshape(ops.cast(lens, "int64") if lens.dtype == DType.int32 else lens, [-1, 1, 1, 1])
    cols = constant(np.arange(kv_len, dtype=np.int64))
    keep = ops.less(cols, lens)                                            # [B, 1, 1, kv]
    if causal or left >= 0 or right >= 0:
        # diff = (i + offset[b]) - j = (i - j - q_len) + len[b]
        i_j = np.arange(q_len, dtype=np.int64)[:, None] - np.arange(kv_len, dtype=np.int64)[None, :] - q_len
        diff = ops.add(constant(i_j), lens)                                # [B, 1, q, kv]
        for on, bound, sign in ((causal, 0, None), (left >= 0, left, 1), (right >= 0, right, -1)):
            if on:
                cond = ops.greater_equal(diff, 0) if sign is None else \
                    ops.less_equal(diff if sign > 0 else ops.neg(diff), bound)
                keep = ops.logical_and(keep, cond)
    return ops.where(keep, like(np.float32(0), q), like(np.float32(-np.inf), q))


def _share_kv_heads(ctx: NodeContext, q, k, v):
    """Grouped-query attention: each key/value head repeated for the query heads that share it
    (h0, h0, h1, h1, ...); k and v unchanged when the head counts agree."""
    n_q, n_kv = _static(ctx, q.shape[1], "Q heads"), _static(ctx, k.shape[1], "K heads")
    if n_q == n_kv:
        return k, v
    if n_q % n_kv:
        raise ctx.malformed(f"{n_q} query heads are not a multiple of {n_kv} key/value heads")
    rep = constant(np.repeat(np.arange(n_kv, dtype=np.int64), n_q // n_kv))
    return ops.gather(k, rep, 1), ops.gather(v, rep, 1)


@onnx_op("Attention", min_opset=23)
def _attention(ctx: NodeContext):
    q, k, v = (ctx.input(i, w) for i, w in enumerate(("Q", "K", "V")))
    if not q.dtype.is_float or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ctx.unsupported(f"Attention over {q.dtype}/{k.dtype}/{v.dtype}: float inputs of one dtype")
    rank3 = q.ndim == 3
    qh, kvh = ctx.attr("q_num_heads", None), ctx.attr("kv_num_heads", None)
    Q, K, V = _heads(ctx, q, qh, "Q"), _heads(ctx, k, kvh, "K"), _heads(ctx, v, kvh, "V")
    past_k, past_v = ctx.inputs[4], ctx.inputs[5]
    if (past_k is None) != (past_v is None):
        raise ctx.malformed("past_key and past_value come together")
    offset = 0
    nonpad = ctx.has_input(6)
    if nonpad and past_k is not None:
        raise ctx.malformed("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if past_k is not None:
        offset = _static(ctx, past_k.shape[2], "past_key's sequence length")
        K, V = ops.concat([past_k, K], 2), ops.concat([past_v, V], 2)
    present_k, present_v = K, V
    K, V = _share_kv_heads(ctx, Q, K, V)
    scale = ctx.attr("scale", None)
    if scale is None:
        scale = 1.0 / np.sqrt(_static(ctx, Q.shape[3], "the head size"))
    root = like(np.float32(np.sqrt(float(scale))), q)  # ONNX scales Q and K by sqrt(scale) each
    qk = ops.bmm(ops.mul(Q, root), ops.mul(K, root), trans_b=True)
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0:
        cap = like(np.float32(softcap), q)
        qk = ops.mul(ops.tanh(ops.div(qk, cap)), cap)
    q_len = _static(ctx, Q.shape[2], "the query length")
    kv_len = _static(ctx, K.shape[2], "the key length")
    bias = None
    if ctx.has_input(3):
        bias = _mask_bias(ctx, ctx.input(3, "attn_mask"), q, kv_len)
    causal, left, right = bool(ctx.attr("is_causal", 0)), int(ctx.attr("left_window_size", -1)), \
        int(ctx.attr("right_window_size", -1))
    allowed = None
    if nonpad:  # the frontier moves per batch: every constraint is built from the run-time lengths
        add = _nonpad_bias(ctx, q, q_len, kv_len, causal, left, right)
        bias = add if bias is None else ops.add(bias, add)
    else:
        allowed = _window(q_len, kv_len, offset, causal, left, right)
    if allowed is not None:
        add = like(np.where(allowed, 0.0, -np.inf).astype(np.float32), q)
        bias = add if bias is None else ops.add(bias, add)
    scores = qk if bias is None else ops.add(qk, bias)
    probs = ops.softmax(scores, -1)
    if bias is not None:
        # Rows with no attendable key: 0, not the NaN of a softmax over -inf.
        dead = ops.equal(ops.reduce_max(bias, -1, keepdims=True), like(np.float32(-np.inf), q))
        probs = ops.where(dead, like(np.float32(0), q), probs)
    y = ops.bmm(probs, V)
    if rank3:
        b, s = y.shape[0], y.shape[2]
        y = ops.reshape(ops.permute(y, [0, 2, 1, 3]), [b, s, y.shape[1] * y.shape[3]])
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    qk_out = {0: qk, 1: qk, 2: scores, 3: probs}.get(mode)
    if qk_out is None:
        raise ctx.malformed(f"qk_matmul_output_mode {mode} is not 0..3")
    return [y, present_k, present_v, qk_out][:ctx.num_outputs]


_PRECISION = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}  # TensorProto codes


@onnx_op("FlexAttention", min_opset=1, domain="ai.onnx.preview")
def _flex_attention(ctx: NodeContext):
    q, k, v = (ctx.input(i, w) for i, w in enumerate(("Q", "K", "V")))
    if not q.dtype.is_float or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ctx.unsupported(f"FlexAttention over {q.dtype}/{k.dtype}/{v.dtype}: float inputs of one dtype")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ctx.malformed(f"Q, K and V must be rank 4, got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    k, v = _share_kv_heads(ctx, q, k, v)
    scale = ctx.attr("scale", None)
    if scale is None:
        scale = 1.0 / np.sqrt(_static(ctx, q.shape[3], "the head size"))
    root = like(np.float32(np.sqrt(np.float32(scale))), q)  # Q and K scaled by sqrt(scale) each, in Q's dtype
    scores = ops.bmm(ops.mul(q, root), ops.mul(k, root), trans_b=True)
    prec = ctx.attr("softmax_precision", None)
    if prec is None:
        cdt = "float32" if q.dtype in (DType.float16, DType.bfloat16) else q.dtype.value
    elif prec in _PRECISION:
        cdt = _PRECISION[prec]
    else:
        raise ctx.malformed(f"softmax_precision {prec} is not float, float16, bfloat16 or double")

    def _to(t: Tensor, dt: str) -> Tensor:
        return t if t.dtype.value == dt else ops.cast(t, dt)

    def _mod(attr: str, t: Tensor) -> Tensor:
        if not ctx.has_attr(attr):
            return t
        outs = ctx.inline(ctx.attr(attr), [t])
        if len(outs) != 1:
            raise ctx.malformed(f"{attr} must give one output, gives {len(outs)}")
        out = outs[0]
        if not isinstance(out, Tensor):  # an import-time value (a constant subgraph)
            out = constant(np.asarray(out.value))
        if tuple(out.shape) != tuple(t.shape):
            raise ctx.malformed(f"{attr} gives shape {[str(d) for d in out.shape]} for {[str(d) for d in t.shape]}")
        return _to(out, cdt)

    scores = _mod("score_mod", _to(scores, cdt))
    probs = _mod("prob_mod", ops.softmax(scores, -1))
    return _to(ops.bmm(probs, _to(v, cdt)), v.dtype.value)


@onnx_op("RotaryEmbedding", min_opset=23)
def _rotary(ctx: NodeContext):
    """x rotated pairwise by (cos, sin) of its position, on the first rotary_embedding_dim dims of
    each head: (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2), the pairs being the two halves of
    those dims, or (interleaved) even and odd ones. Positions index the caches through a gather."""
    x = ctx.input(0, "X")
    cos, sin = ctx.input(1, "cos_cache"), ctx.input(2, "sin_cache")
    if not x.dtype.is_float or cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise ctx.unsupported(f"RotaryEmbedding over {x.dtype} with {cos.dtype}/{sin.dtype} caches")
    if x.ndim == 4:
        xs = ops.permute(x, [0, 2, 1, 3])  # [B, S, H, D]
    elif x.ndim == 3:
        xs = _heads(ctx, x, ctx.attr("num_heads", None), "X")  # [B, H, S, D]
        xs = ops.permute(xs, [0, 2, 1, 3])
    else:
        raise ctx.malformed(f"X must be 3-D or 4-D, got rank {x.ndim}")
    d = _static(ctx, xs.shape[3], "the head size")
    rd = int(ctx.attr("rotary_embedding_dim", 0)) or d
    if rd % 2 or rd > d:
        raise ctx.malformed(f"rotary_embedding_dim {rd} must be even and at most the head size {d}")
    if ctx.has_input(3):
        pos = ctx.input(3, "position_ids")
        cos, sin = ops.gather(cos, pos, 0), ops.gather(sin, pos, 0)  # [B, S, rd/2]
    if cos.ndim != 3 or cos.shape[-1] != rd // 2:
        raise ctx.malformed(f"the caches must give [B, S, {rd // 2}], got {list(map(str, cos.shape))}")
    cos, sin = ops.unsqueeze(cos, [2]), ops.unsqueeze(sin, [2])  # over the heads
    rot = ops.slice(xs, [0], [rd], [3])
    if ctx.attr("interleaved", 0):
        x1, x2 = ops.slice(rot, [0], [rd], [3], [2]), ops.slice(rot, [1], [rd], [3], [2])
    else:
        x1, x2 = ops.slice(rot, [0], [rd // 2], [3]), ops.slice(rot, [rd // 2], [rd], [3])
    real = ops.sub(ops.mul(cos, x1), ops.mul(sin, x2))
    imag = ops.add(ops.mul(sin, x1), ops.mul(cos, x2))
    if ctx.attr("interleaved", 0):
        pairs = ops.concat([ops.unsqueeze(real, [4]), ops.unsqueeze(imag, [4])], 4)
        rot = ops.reshape(pairs, list(rot.shape))
    else:
        rot = ops.concat([real, imag], 3)
    y = rot if rd == d else ops.concat([rot, ops.slice(xs, [rd], [d], [3])], 3)
    if x.ndim == 4:
        return ops.permute(y, [0, 2, 1, 3])
    return ops.reshape(y, list(x.shape))
