"""Pooling over NHWC activations."""
from __future__ import annotations

from typing import Optional

from ... import ops
from ...errors import UnsupportedOpError
from ._util import check_input, pair
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"]


def _pool_padding(padding):
    if isinstance(padding, (tuple, list)) and len(padding) == 4:
        return tuple(int(p) for p in padding)
    return pair(padding, "pool padding")


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = pair(kernel_size, "MaxPool2d kernel_size")
        self.stride = pair(stride, "MaxPool2d stride") if stride is not None else self.kernel_size
        self.padding = _pool_padding(padding)
        self.dilation = pair(dilation, "MaxPool2d dilation")
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x):
        check_input(self, x, rank=4)
        return ops.max_pool2d(x, self.kernel_size, self.stride, self.padding, dilation=self.dilation,
                              ceil_mode=self.ceil_mode, name=self._op_name())

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size = pair(kernel_size, "AvgPool2d kernel_size")
        self.stride = pair(stride, "AvgPool2d stride") if stride is not None else self.kernel_size
        self.padding = _pool_padding(padding)
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)

    def forward(self, x):
        check_input(self, x, rank=4)
        return ops.avg_pool2d(x, self.kernel_size, self.stride, self.padding, ceil_mode=self.ceil_mode,
                              count_include_pad=self.count_include_pad, name=self._op_name())

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}")


class AdaptiveAvgPool2d(Module):
    """Only output size 1 (global average pooling, the classifier-head case): [N, H, W, C] ->
    [N, 1, 1, C]. Other sizes have uneven windows that no pooling op here expresses."""

    def __init__(self, output_size=1):
        super().__init__()
        size: Optional[tuple] = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * 2
        if len(size) != 2 or tuple(size) != (1, 1):
            raise UnsupportedOpError(f"AdaptiveAvgPool2d: only output_size 1 (global average pooling) "
                                     f"is supported, got {output_size!r}")
        self.output_size = (1, 1)

    def forward(self, x):
        check_input(self, x, rank=4)
        return ops.global_avg_pool(x, keepdims=True, name=self._op_name())

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
