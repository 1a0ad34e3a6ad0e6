"""Convolution in NHWC with OHWI weights; transposed convolution."""
from __future__ import annotations

import dataclasses
from typing import Optional, Union

from ..ir.tensor import Tensor

__all__ = ["Conv2dAttrs", "ConvTranspose2dAttrs", "conv2d", "conv_transpose2d"]

IntOr2 = Union[int, tuple[int, int]]
Padding = Union[int, tuple[int, int], tuple[int, int, int, int]]


@dataclasses.dataclass(frozen=True)
class Conv2dAttrs:
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


@dataclasses.dataclass(frozen=True)
class ConvTranspose2dAttrs:
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    output_padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


def conv2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOr2 = 1,
           padding: Padding = 0, dilation: IntOr2 = 1, groups: int = 1, name=None) -> Tensor:
    """x [N, H, W, C], weight [O, KH, KW, C/groups] (OHWI), bias [O] -> [N, HO, WO, O]."""
    raise NotImplementedError


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOr2 = 1,
                     padding: Padding = 0, output_padding: IntOr2 = 0, dilation: IntOr2 = 1,
                     groups: int = 1, name=None) -> Tensor:
    """x [N, H, W, C_in], weight [C_in, KH, KW, C_out/groups] (torch's [Cin, Cout/g, kH, kW] permuted
    (0, 2, 3, 1)), bias [C_out] -> [N, HO, WO, C_out]."""
    raise NotImplementedError
