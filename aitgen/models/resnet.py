"""ResNet-50 v1.5 (torchvision's `resnet50`): bottlenecks stride on their 3x3 conv.

NHWC activations, OHWI conv weights. Parameter names follow torchvision (conv1, bn1, layer1.0.conv1,
layer1.0.downsample.0, fc, ...), so a torchvision state_dict maps over by permuting conv weights.
At the default config: 53 convolutions (1 stem + 16 bottlenecks x 3 + 4 downsamples) and one linear.
"""
from __future__ import annotations

from typing import Sequence

from .. import ops
from ..frontend import nn
from ..ir.tensor import Tensor
from ._common import DimArg, cast_parameters, image_input

EXPANSION = 4


class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        # v1.5: the stride sits on the 3x3 conv, not the first 1x1 (v1) - better accuracy, same cost.
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * EXPANSION, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * EXPANSION)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(ops.add(out, identity, name=self._op_name("residual")))


class ResNet(nn.Module):
    def __init__(self, layers: Sequence[int] = (3, 4, 6, 3), width: int = 64, num_classes: int = 1000):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(width, layers[0], 1)
        self.layer2 = self._make_layer(width * 2, layers[1], 2)
        self.layer3 = self._make_layer(width * 4, layers[2], 2)
        self.layer4 = self._make_layer(width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(width * 8 * EXPANSION, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> "nn.Sequential":
        downsample = None
        if stride != 1 or self.inplanes != planes * EXPANSION:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * EXPANSION, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * EXPANSION))
        mods = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * EXPANSION
        mods += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        # [N, 1, 1, C] -> [N, C]: NHWC makes the flatten order equal to torchvision's NCHW one.
        return self.fc(self.flatten(self.avgpool(x)))


def create(batch: DimArg = 1, image_size: int = 224, layers: Sequence[int] = (3, 4, 6, 3),
           width: int = 64, num_classes: int = 1000, dtype: str = "float32"):
    if len(layers) != 4:
        raise ValueError(f"resnet50: layers must list 4 stage depths, got {tuple(layers)}")
    module = ResNet(tuple(layers), width, num_classes)
    if dtype != "float32":
        cast_parameters(module, dtype)
    return module, {"x": image_input(batch, image_size, dtype)}


def forward(module: ResNet, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    return {"logits": module(inputs["x"])}
