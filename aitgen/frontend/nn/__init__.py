"""torch-like modules that build aitgen graphs (NHWC activations, OHWI conv weights).

    nn.manual_seed(0)
    layer = nn.Linear(768, 3072)          # parameters hold seeded numpy arrays
    y = layer(x)                          # x: an aitgen.Tensor; y: a graph Tensor
"""
from .activation import GELU, Hardswish, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Tanh
from .attention import MultiheadAttention
from .basic import Dropout, Flatten, Identity
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv2d, ConvTranspose2d
from .embedding import Embedding
from .init import manual_seed
from .linear import Linear
from .module import IncompatibleKeys, Module, Parameter
from .norm import BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from . import init  # noqa: F401  (nn.init.uniform, ...: the initialisers custom layers draw from)

__all__ = [
    "manual_seed", "init", "Parameter", "Module", "IncompatibleKeys",
    "Sequential", "ModuleList", "ModuleDict",
    "Linear", "Conv2d", "ConvTranspose2d", "Embedding", "MultiheadAttention",
    "BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm",
    "ReLU", "ReLU6", "GELU", "SiLU", "Sigmoid", "Tanh", "Hardswish", "Softmax",
    "Dropout", "Identity", "Flatten", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
]
