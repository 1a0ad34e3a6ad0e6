"""Scaled-dot-product attention: softmax(Q K^T * scale + mask) V, optionally causal."""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..ir.tensor import Tensor

__all__ = ["AttentionAttrs", "scaled_dot_product_attention"]


@dataclasses.dataclass(frozen=True)
class AttentionAttrs:
    causal: bool = False
    scale: Optional[float] = None  # None: 1/sqrt(head_dim)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None,
                                 causal: bool = False, scale: Optional[float] = None, name=None) -> Tensor:
    """q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv], mask additive (float) broadcastable to
    [..., Sq, Sk]. Causal is top-left aligned like torch (query i sees keys j <= i)."""
    raise NotImplementedError
