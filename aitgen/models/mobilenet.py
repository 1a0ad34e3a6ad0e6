"""MobileNetV2 as in torchvision's `mobilenet_v2`: inverted residuals with linear bottlenecks,
ReLU6, depthwise 3x3 convs, channel counts rounded by `_make_divisible` to multiples of 8.

Names follow torchvision (features.0.0 conv, features.0.1 bn, features.N.conv.M..., classifier.1).
"""
from __future__ import annotations

from .. import ops
from ..frontend import nn
from ..ir.tensor import Tensor
from ._common import DimArg, image_input

# t (expansion), c (output channels), n (repeats), s (stride of the first repeat)
INVERTED_RESIDUAL_SETTING = [
    [1, 16, 1, 1],
    [6, 24, 2, 2],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]


def _make_divisible(v: float, divisor: int = 8, min_value=None) -> int:
    """torchvision's rounding: nearest multiple of divisor, never more than 10 % below v."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU6(nn.Sequential):
    """torchvision's Conv2dNormActivation with ReLU6: conv (no bias, 'same' padding), BN, ReLU6."""

    def __init__(self, inp: int, oup: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(inp, oup, kernel_size, stride=stride, padding=(kernel_size - 1) // 2, groups=groups,
                      bias=False),
            nn.BatchNorm2d(oup),
            nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),  # depthwise
            # Linear bottleneck: no activation after the projection (ReLU would destroy
            # information in the low-dimensional space, the paper's argument).
            nn.Conv2d(hidden, oup, 1, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        return ops.add(x, y, name=self._op_name("residual")) if self.use_res_connect else y


class MobileNetV2(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        input_channel = _make_divisible(32 * width)
        self.last_channel = _make_divisible(1280 * max(1.0, width))
        features = [ConvBNReLU6(3, input_channel, stride=2)]
        for t, c, n, s in INVERTED_RESIDUAL_SETTING:
            output_channel = _make_divisible(c * width)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(ConvBNReLU6(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.flatten(self.avgpool(self.features(x))))


def create(batch: DimArg = 1, image_size: int = 224, width: float = 1.0, num_classes: int = 1000):
    if width <= 0:
        raise ValueError(f"mobilenet_v2: width must be > 0, got {width}")
    module = MobileNetV2(width, num_classes)
    return module, {"x": image_input(batch, image_size)}


def forward(module: MobileNetV2, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    return {"logits": module(inputs["x"])}
