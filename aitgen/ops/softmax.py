"""Softmax over any axis."""
from __future__ import annotations

import dataclasses

from ..ir.tensor import Tensor

__all__ = ["SoftmaxAttrs", "softmax"]


@dataclasses.dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int  # normalised to 0 <= axis < rank by the builder


def softmax(x: Tensor, axis: int = -1, name=None) -> Tensor:
    raise NotImplementedError
