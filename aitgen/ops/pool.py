"""Pooling over NHWC: max, average (padding, ceil mode, count_include_pad), global average."""
from __future__ import annotations

import dataclasses
from typing import Optional, Union

from ..ir.tensor import Tensor

__all__ = ["Pool2dAttrs", "GlobalPoolAttrs", "max_pool2d", "avg_pool2d", "global_avg_pool"]

IntOr2 = Union[int, tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Pool2dAttrs:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = True  # average pooling only


@dataclasses.dataclass(frozen=True)
class GlobalPoolAttrs:
    keepdims: bool = True  # [N, 1, 1, C] (True) or [N, C]


def max_pool2d(x: Tensor, kernel_size: IntOr2, stride: Optional[IntOr2] = None, padding=0,
               dilation: IntOr2 = 1, ceil_mode: bool = False, name=None) -> Tensor:
    raise NotImplementedError


def avg_pool2d(x: Tensor, kernel_size: IntOr2, stride: Optional[IntOr2] = None, padding=0,
               ceil_mode: bool = False, count_include_pad: bool = True, name=None) -> Tensor:
    raise NotImplementedError


def global_avg_pool(x: Tensor, keepdims: bool = True, name=None) -> Tensor:
    raise NotImplementedError
