"""Reductions: sum, mean, max, min, var over axes, with keepdims."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

from ..ir.tensor import Tensor

__all__ = ["ReduceAttrs", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_var"]

Axes = Optional[Union[int, Sequence[int]]]


@dataclasses.dataclass(frozen=True)
class ReduceAttrs:
    axes: tuple[int, ...]   # normalised, sorted, non-negative
    keepdims: bool = False
    correction: int = 0     # reduce_var only: divide by (n - correction)


def reduce_sum(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    raise NotImplementedError


def reduce_mean(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    raise NotImplementedError


def reduce_max(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    raise NotImplementedError


def reduce_min(x: Tensor, axes: Axes = None, keepdims: bool = False, name=None) -> Tensor:
    raise NotImplementedError


def reduce_var(x: Tensor, axes: Axes = None, keepdims: bool = False, correction: int = 0, name=None) -> Tensor:
    raise NotImplementedError
