"""Linear (fully connected) layer."""
from __future__ import annotations

from ... import ops
from . import init
from ._util import check_input, positive
from .module import Module, Parameter

__all__ = ["Linear"]


class Linear(Module):
    """y = x @ weight.T + bias over the last dim of x [..., in_features]; weight [out, in] as in
    torch, which is the 'rcr' GEMM layout, so no transpose is ever materialised."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype="float32"):
        super().__init__()
        self.in_features = positive(in_features, "Linear in_features")
        self.out_features = positive(out_features, "Linear out_features")
        shape = (self.out_features, self.in_features)
        self.weight = Parameter(init.fan_in_uniform(shape, self.in_features, dtype), dtype)
        self.bias = Parameter(init.fan_in_uniform(self.out_features, self.in_features, dtype), dtype) \
            if bias else None

    def forward(self, x):
        check_input(self, x, channels=self.in_features)
        return ops.linear(x, self.weight, self.bias, name=self._op_name())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
