"""Scaled-dot-product attention: softmax(Q K^T * scale + mask) V, optionally causal.

Operands: (q, k, v) or (q, k, v, mask). The mask is either
- additive, of q's float dtype: added to the scaled scores (-inf removes a key), or
- bool, as in torch: True means "may attend", False removes the key.
It broadcasts (numpy rules) to the score shape [*batch, Sq, Sk] without growing it. A mask and
`causal` may be combined; both apply. A query row whose every key is removed attends to nothing
and yields zeros (torch's math kernel since 2.5 does the same), never NaN.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.dims import shape_str
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .elementwise import broadcast_shapes
from .registry import Category, check, make_op1, register

__all__ = ["AttentionAttrs", "scaled_dot_product_attention"]


@dataclasses.dataclass(frozen=True)
class AttentionAttrs:
    causal: bool = False
    scale: Optional[float] = None  # None: 1/sqrt(head_dim)


def _infer(inputs, attrs):
    q, k, v = inputs[:3]
    for nm, t in (("q", q), ("k", k), ("v", v)):
        check(t.ndim >= 2, f"{nm} must have rank >= 2 ([..., S, D]), got {shape_str(t.shape)}")
    check(k.dtype == q.dtype and v.dtype == q.dtype,
          f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}", DTypeError)
    check(q.shape[-1] == k.shape[-1],
          f"head dim of q ({q.shape[-1]}) and k ({k.shape[-1]}) differ")
    check(k.shape[-2] == v.shape[-2],
          f"key length of k ({k.shape[-2]}) and v ({v.shape[-2]}) differ")
    try:
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ShapeError as e:
        raise ShapeError(f"batch dims of q, k, v do not broadcast: {e}") from None
    if len(inputs) == 4:
        m = inputs[3]
        check(m.dtype == DType.bool or m.dtype == q.dtype,
              f"mask dtype {m.dtype} must be bool or q's dtype {q.dtype} (additive); "
              f"convert it with ops.cast", DTypeError)
        scores = (*batch, q.shape[-2], k.shape[-2])
        ok = m.ndim <= len(scores)
        if ok:
            try:
                ok = tuple(broadcast_shapes(scores, m.shape)) == tuple(scores)
            except ShapeError:
                ok = False
        check(ok, f"mask {shape_str(m.shape)} does not broadcast to the scores {shape_str(scores)}")
    return [((*batch, q.shape[-2], v.shape[-1]), q.dtype)]


def _reference(args, attrs, ctx):
    q, k, v = args[:3]
    mask = args[3] if len(args) == 4 else None
    sq, sk = q.shape[-2], k.shape[-2]
    scale = attrs.scale if attrs.scale is not None else 1.0 / math.sqrt(q.shape[-1])
    # Scaling q costs Sq*D multiplies, scaling the scores Sq*Sk; the results differ by float32 rounding.
    s = np.matmul(q * np.float32(scale), np.swapaxes(k, -1, -2))
    keep = None  # bool, broadcastable to s: where a key may be attended
    if attrs.causal:
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None]
    if mask is not None:
        if mask.dtype == np.bool_:
            keep = mask if keep is None else keep & mask
        else:
            s = s + mask
    if keep is not None:
        s = np.where(keep, s, np.float32(-np.inf))
    m = np.max(s, axis=-1, keepdims=True) if sk else np.zeros(s.shape[:-1] + (1,), np.float32)
    m = np.where(np.isneginf(m), np.float32(0), m)  # fully masked rows: exp(-inf) = 0, not NaN
    e = np.exp(s - m)
    den = np.sum(e, axis=-1, keepdims=True)
    p = e / np.where(den == 0, np.float32(1), den)
    return [np.matmul(p, v)]


register(OpKind.ATTENTION, Category.ATTENTION, AttentionAttrs, _infer, _reference,
         num_inputs=(3, 4), float_only=True)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None,
                                 causal: bool = False, scale: Optional[float] = None, name=None) -> Tensor:
    """q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv], mask additive (float) broadcastable to
    [..., Sq, Sk]. Causal is top-left aligned like torch (query i sees keys j <= i).

    A bool mask is accepted too, with torch's meaning (True = attend); mask and causal combine.
    Batch dims of q, k, v broadcast; the result is [*batch, Sq, Dv] in q's dtype."""
    if scale is not None and not math.isfinite(float(scale)):
        raise ValueError(f"attention{' ' + repr(name) if name else ''}: scale must be finite, got {scale}")
    ops = [q, k, v] + ([mask] if mask is not None else [])
    attrs = AttentionAttrs(bool(causal), None if scale is None else float(scale))
    return make_op1(OpKind.ATTENTION, ops, attrs, name)
