"""2-D convolution and transposed convolution over NHWC activations with OHWI-style weights."""
from __future__ import annotations

from typing import Union

from ... import ops
from . import init
from ._util import check_input, pair, positive
from .module import Module, Parameter

__all__ = ["Conv2d", "ConvTranspose2d"]

PaddingArg = Union[int, tuple, str]


def _padding(padding: PaddingArg, kernel: tuple[int, int], stride: tuple[int, int],
             dilation: tuple[int, int]):
    """torch's spellings -> what ops.conv2d takes: an int, (ph, pw) or (top, bottom, left, right)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError("Conv2d: padding='same' needs stride 1, as in torch")
            pads = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]  # the odd pixel goes after, as in torch
            return tuple(pads)
        raise ValueError(f"Conv2d: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    if isinstance(padding, (tuple, list)):
        if len(padding) not in (2, 4):
            raise ValueError(f"Conv2d: padding tuple must have 2 or 4 entries, got {padding!r}")
        return tuple(int(p) for p in padding)
    return (int(padding), int(padding))


def _groups(in_channels: int, out_channels: int, groups: int, cls: str) -> int:
    groups = positive(groups, f"{cls} groups")
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"{cls}: in_channels ({in_channels}) and out_channels ({out_channels}) "
                         f"must both be divisible by groups ({groups})")
    return groups


class Conv2d(Module):
    """x [N, H, W, in_channels] -> [N, HO, WO, out_channels]; weight [out, kh, kw, in/groups]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding: PaddingArg = 0,
                 dilation=1, groups: int = 1, bias: bool = True, dtype="float32"):
        super().__init__()
        self.in_channels = positive(in_channels, "Conv2d in_channels")
        self.out_channels = positive(out_channels, "Conv2d out_channels")
        self.groups = _groups(self.in_channels, self.out_channels, groups, "Conv2d")
        self.kernel_size = pair(kernel_size, "Conv2d kernel_size")
        self.stride = pair(stride, "Conv2d stride")
        self.dilation = pair(dilation, "Conv2d dilation")
        self.padding = _padding(padding, self.kernel_size, self.stride, self.dilation)
        kh, kw = self.kernel_size
        cin_g = self.in_channels // self.groups
        fan_in = cin_g * kh * kw
        self.weight = Parameter(init.fan_in_uniform((self.out_channels, kh, kw, cin_g), fan_in, dtype), dtype)
        self.bias = Parameter(init.fan_in_uniform(self.out_channels, fan_in, dtype), dtype) if bias else None

    def forward(self, x):
        check_input(self, x, rank=4, channels=self.in_channels, channel_what="channels (NHWC)")
        return ops.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                          dilation=self.dilation, groups=self.groups, name=self._op_name())

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, padding={self.padding}")
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class ConvTranspose2d(Module):
    """x [N, H, W, in_channels] -> [N, HO, WO, out_channels]; weight [in, kh, kw, out/groups]
    (torch's [in, out/groups, kh, kw] permuted (0, 2, 3, 1))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1, dtype="float32"):
        super().__init__()
        self.in_channels = positive(in_channels, "ConvTranspose2d in_channels")
        self.out_channels = positive(out_channels, "ConvTranspose2d out_channels")
        self.groups = _groups(self.in_channels, self.out_channels, groups, "ConvTranspose2d")
        self.kernel_size = pair(kernel_size, "ConvTranspose2d kernel_size")
        self.stride = pair(stride, "ConvTranspose2d stride")
        self.dilation = pair(dilation, "ConvTranspose2d dilation")
        self.output_padding = pair(output_padding, "ConvTranspose2d output_padding")
        if isinstance(padding, (tuple, list)) and len(padding) == 4:
            self.padding = tuple(int(p) for p in padding)
        else:
            self.padding = pair(padding, "ConvTranspose2d padding")
        kh, kw = self.kernel_size
        cout_g = self.out_channels // self.groups
        # torch computes the fan-in of a transposed conv from dim 1 of its weight, (out/groups)*kh*kw.
        fan_in = cout_g * kh * kw
        self.weight = Parameter(init.fan_in_uniform((self.in_channels, kh, kw, cout_g), fan_in, dtype), dtype)
        self.bias = Parameter(init.fan_in_uniform(self.out_channels, fan_in, dtype), dtype) if bias else None

    def forward(self, x):
        check_input(self, x, rank=4, channels=self.in_channels, channel_what="channels (NHWC)")
        return ops.conv_transpose2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                                    output_padding=self.output_padding, dilation=self.dilation,
                                    groups=self.groups, name=self._op_name())

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, padding={self.padding}")
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")
