"""Embedding lookup table."""
from __future__ import annotations

from typing import Optional

from ... import ops
from ...errors import DTypeError
from ._util import check_input, label, positive
from . import init
from .module import Module, Parameter

__all__ = ["Embedding"]


class Embedding(Module):
    """ids [...] (int32/int64) -> [..., embedding_dim]; weight [num_embeddings, embedding_dim] ~ N(0, 1)
    as in torch, with the padding_idx row zeroed."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 dtype="float32"):
        super().__init__()
        self.num_embeddings = positive(num_embeddings, "Embedding num_embeddings")
        self.embedding_dim = positive(embedding_dim, "Embedding embedding_dim")
        w = init.normal((self.num_embeddings, self.embedding_dim), dtype=dtype)
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for "
                                 f"{self.num_embeddings} embeddings")
            padding_idx %= self.num_embeddings
            w[padding_idx] = 0
        self.padding_idx = padding_idx
        self.weight = Parameter(w, dtype)

    def forward(self, ids):
        check_input(self, ids)
        if not ids.dtype.is_int:
            raise DTypeError(f"{label(self)}: ids must be int32 or int64, got {ids.dtype}")
        return ops.embedding(ids, self.weight, name=self._op_name())

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
