"""Gather (numpy take along an axis) and embedding lookup."""
from __future__ import annotations

import dataclasses

from ..ir.tensor import Tensor

__all__ = ["GatherAttrs", "gather", "embedding"]


@dataclasses.dataclass(frozen=True)
class GatherAttrs:
    axis: int


def gather(x: Tensor, indices: Tensor, axis: int = 0, name=None) -> Tensor:
    """np.take(x, indices, axis); indices int32/int64 of any rank, negative ones count from the end."""
    raise NotImplementedError


def embedding(ids: Tensor, weight: Tensor, name=None) -> Tensor:
    """weight [V, E] rows gathered by ids [...] -> [..., E]."""
    raise NotImplementedError
