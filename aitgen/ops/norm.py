"""Normalisation: batchnorm (inference), layernorm, groupnorm, rmsnorm. Channels are the last dim."""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..ir.tensor import Tensor

__all__ = ["BatchNormAttrs", "LayerNormAttrs", "GroupNormAttrs", "RMSNormAttrs",
           "batchnorm", "layernorm", "groupnorm", "rmsnorm"]


@dataclasses.dataclass(frozen=True)
class BatchNormAttrs:
    eps: float = 1e-5


@dataclasses.dataclass(frozen=True)
class LayerNormAttrs:
    num_axes: int = 1  # normalise over the last num_axes dims
    eps: float = 1e-5


@dataclasses.dataclass(frozen=True)
class GroupNormAttrs:
    groups: int
    eps: float = 1e-5


@dataclasses.dataclass(frozen=True)
class RMSNormAttrs:
    num_axes: int = 1
    eps: float = 1e-6


def batchnorm(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float = 1e-5,
              name=None) -> Tensor:
    """(x - mean) / sqrt(var + eps) * scale + bias over the last (channel) dim; all params [C]."""
    raise NotImplementedError


def layernorm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
              eps: float = 1e-5, num_axes: int = 1, name=None) -> Tensor:
    """weight/bias have shape x.shape[-num_axes:]. Operands: x, then weight and bias when given
    (bias without weight is passed as weight=ones constant by the builder)."""
    raise NotImplementedError


def groupnorm(x: Tensor, groups: int, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
              eps: float = 1e-5, name=None) -> Tensor:
    """x [N, ..., C] channel-last; stats over (spatial dims, C/groups) per group; weight/bias [C]."""
    raise NotImplementedError


def rmsnorm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6, num_axes: int = 1,
            name=None) -> Tensor:
    raise NotImplementedError
