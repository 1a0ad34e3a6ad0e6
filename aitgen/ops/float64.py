"""float64 softmax, norms and attention as element-wise ops, reductions and matmuls.

The softmax, norm and attention kernels of every backend compute in float32; float64 must compute
in float64 (issue 15), and the element-wise, reduction and (CPU loop) matmul kernels do. So
`ops.softmax` / `layernorm` / `rmsnorm` / `batchnorm` / `groupnorm` /
`scaled_dot_product_attention` of a float64 operand build these graphs instead of their fused ops,
with the same math as the oracle's references (max-subtracted exp; two-pass mean and variance).
match_norms leaves float64 alone so that it does not fuse them back.
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


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool, scale: Optional[float],
              name: Optional[str]) -> Optional[Tensor]:
    """The oracle's attention (ops/attention.py _reference_logical) op by op: scaled scores, the
    masks, a softmax whose fully masked rows give 0, the product with v. None where a causal mask
    would need dynamic sizes (the fused op is kept, and its float32 kernels refuse float64)."""
    import numpy as np

    from ..ir.op import OpKind
    from ..ir.opdef import get_opdef
    from ..ir.tensor import constant
    from . import elementwise as ew, reduce as rd
    from .registry import make_op1

    def bmm(a: Tensor, b: Tensor, trans_b: bool, name: Optional[str] = None) -> Tensor:
        # through the op table, not ops.gemm: gemm -> fused -> attention imports this module
        return make_op1(OpKind.BMM, [a, b], get_opdef(OpKind.BMM).attrs_type(False, trans_b), name)
    sq, sk = q.shape[-2], k.shape[-2]
    if causal and not (sq.is_static and sk.is_static):
        return None
    s_ = scale
    if s_ is None:
        d = q.shape[-1]
        if not d.is_static:
            return None
        s_ = 1.0 / float(np.sqrt(d.value))
    s = bmm(ew.mul(q, float(s_)), k, True)
    keep = None
    if causal:
        keep = constant(np.tril(np.ones((sq.value, sk.value), bool)), dtype="bool")
    if mask is not None:
        if mask.dtype.value == "bool":
            keep = mask if keep is None else ew.logical_and(keep, mask)
        else:
            s = ew.add(s, mask)
    if keep is not None:
        s = ew.where(keep, s, float("-inf"))
    m = rd.reduce_max(s, -1, keepdims=True)
    m = ew.where(ew.equal(m, float("-inf")), 0.0, m)  # fully masked rows: exp(-inf) = 0, not NaN
    e = ew.exp(ew.sub(s, m))
    den = rd.reduce_sum(e, -1, keepdims=True)
    p = ew.div(e, ew.where(ew.equal(den, 0.0), 1.0, den))
    return bmm(p, v, False, name)


def batchnorm(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float,
              name: Optional[str]) -> Tensor:
    """(x - mean) * (scale / sqrt(var + eps)) + bias over the last dim, in the oracle's order."""
    from . import elementwise as ew
    inv = ew.div(scale, ew.sqrt(ew.add(var, float(eps))))
    return ew.add(ew.mul(ew.sub(x, mean), inv), bias, name=name)


def groupnorm(x: Tensor, groups: int, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
              name: Optional[str]) -> Tensor:
    """x [N, spatial..., C] seen as [N, S, G, C/G]: statistics over axes 1 and 3, as the oracle."""
    from ..ir.dims import prod
    from . import elementwise as ew, reduce as rd
    from .view import reshape
    n, c = x.shape[0], x.shape[-1]
    xg = reshape(x, [n, prod(x.shape[1:-1]), groups, c // groups])
    d = ew.sub(xg, rd.reduce_mean(xg, [1, 3], keepdims=True))
    var = rd.reduce_mean(ew.mul(d, d), [1, 3], keepdims=True)
    y = reshape(ew.div(d, ew.sqrt(ew.add(var, float(eps)))), list(x.shape),
                name=name if weight is None and bias is None else None)
    return _affine(y, weight, bias, name)
