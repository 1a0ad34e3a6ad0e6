"""float64 softmax and norms as element-wise ops and reductions.

The softmax and norm kernels of every backend compute in float32; float64 must compute in float64
(issue 15), and the element-wise and reduction kernels do. So `ops.softmax` / `ops.layernorm` /
`ops.rmsnorm` of a float64 operand build these graphs instead of their fused ops, with the same
math as the oracle's references (max-subtracted exp; two-pass mean and variance). match_norms
leaves float64 alone so that it does not fuse them back.
"""
from __future__ import annotations

from typing import Optional

from ..ir.tensor import Tensor


def softmax(x: Tensor, axis: int, name: Optional[str]) -> Tensor:
    from . import elementwise as ew, reduce as rd
    m = rd.reduce_max(x, axis, keepdims=True)
    e = ew.exp(ew.sub(x, m))
    return ew.div(e, rd.reduce_sum(e, axis, keepdims=True), name=name)


def _affine(y: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], name: Optional[str]) -> Tensor:
    from . import elementwise as ew
    if weight is not None:
        y = ew.mul(y, weight, name=None if bias is not None else name)
    if bias is not None:
        y = ew.add(y, bias, name=name)
    return y


def layernorm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float, num_axes: int,
              name: Optional[str]) -> Tensor:
    from . import elementwise as ew, reduce as rd
    axes = list(range(x.ndim - num_axes, x.ndim))
    d = ew.sub(x, rd.reduce_mean(x, axes, keepdims=True))
    var = rd.reduce_mean(ew.mul(d, d), axes, keepdims=True)
    last = weight is None and bias is None
    y = ew.div(d, ew.sqrt(ew.add(var, float(eps))), name=name if last else None)
    return _affine(y, weight, bias, name)


def rmsnorm(x: Tensor, weight: Optional[Tensor], eps: float, num_axes: int, name: Optional[str]) -> Tensor:
    from . import elementwise as ew, reduce as rd
    axes = list(range(x.ndim - num_axes, x.ndim))
    ms = rd.reduce_mean(ew.mul(x, x), axes, keepdims=True)
    y = ew.div(x, ew.sqrt(ew.add(ms, float(eps))), name=name if weight is None else None)
    return _affine(y, weight, None, name)
