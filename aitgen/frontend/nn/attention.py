"""Multi-head attention, batch first, with separate q/k/v projections."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...errors import DTypeError, ShapeError
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ._util import check_input, label, positive
from .linear import Linear
from .module import Module

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """query [B, Sq, E], key [B, Sk, kdim], value [B, Sk, vdim] -> [B, Sq, E].

    The projections are separate Linears (q_proj, k_proj, v_proj, out_proj), as in Hugging Face
    models; torch's fused in_proj_weight is their concatenation along dim 0. Each head is a
    reshape [B, S, H, D] and permute [B, H, S, D] around one scaled_dot_product_attention, so the
    passes see (and may fuse) the layout changes rather than a monolithic op.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, dtype="float32"):
        super().__init__()
        self.embed_dim = positive(embed_dim, "MultiheadAttention embed_dim")
        self.num_heads = positive(num_heads, "MultiheadAttention num_heads")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        self.head_dim = self.embed_dim // self.num_heads
        self.kdim = self.embed_dim if kdim is None else positive(kdim, "MultiheadAttention kdim")
        self.vdim = self.embed_dim if vdim is None else positive(vdim, "MultiheadAttention vdim")
        self.q_proj = Linear(self.embed_dim, self.embed_dim, bias=bias, dtype=dtype)
        self.k_proj = Linear(self.kdim, self.embed_dim, bias=bias, dtype=dtype)
        self.v_proj = Linear(self.vdim, self.embed_dim, bias=bias, dtype=dtype)
        self.out_proj = Linear(self.embed_dim, self.embed_dim, bias=bias, dtype=dtype)

    def _heads(self, t: Tensor, which: str) -> Tensor:
        b, s = t.shape[0], t.shape[1]
        t = ops.reshape(t, [b, s, self.num_heads, self.head_dim], name=self._op_name(f"{which}_split"))
        return ops.permute(t, [0, 2, 1, 3], name=self._op_name(f"{which}_heads"))

    def _mask(self, mask, like: Tensor) -> Optional[Tensor]:
        """An additive float mask broadcastable to [B, H, Sq, Sk]. A bool mask follows
        torch.nn.MultiheadAttention: True means the position may NOT be attended (-inf)."""
        if mask is None:
            return None
        if isinstance(mask, np.ndarray):
            if mask.dtype == np.bool_:
                mask = np.where(mask, -np.inf, 0.0)
            mask = constant(mask.astype(like.dtype.np), dtype=like.dtype)
        if not isinstance(mask, Tensor):
            raise TypeError(f"{label(self)}: attn_mask must be a Tensor or a numpy array, "
                            f"got {type(mask).__name__}")
        if mask.dtype == DType.bool:
            neg_inf = constant(np.array(-np.inf, like.dtype.np), dtype=like.dtype)
            zero = constant(np.array(0, like.dtype.np), dtype=like.dtype)
            mask = ops.where(mask, neg_inf, zero, name=self._op_name("mask"))
        elif not mask.dtype.is_float:
            raise DTypeError(f"{label(self)}: attn_mask must be float (additive) or bool, got {mask.dtype}")
        if mask.ndim == 3:  # torch's [B*H, Sq, Sk] form
            mask = ops.reshape(mask, [-1, self.num_heads, mask.shape[1], mask.shape[2]],
                               name=self._op_name("mask_heads"))
        elif mask.ndim not in (2, 4):
            raise ShapeError(f"{label(self)}: attn_mask must be [Sq, Sk], [B*H, Sq, Sk] or "
                             f"[B, H, Sq, Sk], got rank {mask.ndim}")
        return mask

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                attn_mask=None, causal: bool = False) -> Tensor:
        """key defaults to query and value to key (self-attention). causal: query i attends to keys
        j <= i, top-left aligned as in torch."""
        key = query if key is None else key
        value = key if value is None else value
        check_input(self, query, rank=3, channels=self.embed_dim)
        check_input(self, key, rank=3, channels=self.kdim)
        check_input(self, value, rank=3, channels=self.vdim)
        b, sq = query.shape[0], query.shape[1]
        q = self._heads(self.q_proj(query), "q")
        k = self._heads(self.k_proj(key), "k")
        v = self._heads(self.v_proj(value), "v")
        o = ops.scaled_dot_product_attention(q, k, v, self._mask(attn_mask, query), causal=causal,
                                             name=self._op_name("attn"))
        o = ops.permute(o, [0, 2, 1, 3], name=self._op_name("merge"))
        o = ops.reshape(o, [b, sq, self.embed_dim], name=self._op_name("merge_heads"))
        return self.out_proj(o)

    def extra_repr(self) -> str:
        s = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        if self.kdim != self.embed_dim or self.vdim != self.embed_dim:
            s += f", kdim={self.kdim}, vdim={self.vdim}"
        return s
