"""Scaled-dot-product attention: softmax(Q K^T * scale + mask) V, optionally causal.

Operands: (q, k, v) or (q, k, v, mask). The mask is either
- additive, of q's float dtype: added to the scaled scores (-inf removes a key), or
- bool, as in torch: True means "may attend", False removes the key.
It broadcasts (numpy rules) to the score shape [*batch, Sq, Sk] without growing it. A mask and
`causal` may be combined; both apply. A query row whose every key is removed attends to nothing
and yields zeros (torch's math kernel since 2.5 does the same), never NaN.

Strided views (set by passes, never by the builder): `operand_views[i]` reads operand i as a
StridedView of its (dense) tensor instead of the tensor itself, and `out_view` writes the logical
result [*batch, Sq, Dv] into a dense tensor of shape `out_shape`. That is how fuse_memory_ops folds
the head split/merge permutes and fuse_parallel_gemms' split of a packed QKV GEMM into the kernel's
strided reads and writes: q, k and v become windows of one [B, S, 3*H*D] tensor and the result is
written straight in [B, S, H, D] order.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.dims import Dim, IntImm, prod, shape_str
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.opdef import infer_types
from ..ir.tensor import Tensor
from . import float64
from .elementwise import broadcast_shapes
from .registry import Category, check, make_op1, register

__all__ = ["AttentionAttrs", "StridedView", "scaled_dot_product_attention"]


@dataclasses.dataclass(frozen=True)
class StridedView:
    """A tensor of `shape` whose element i lives at offset + sum(i[k] * strides[k]) of a dense
    buffer (all in elements; strides may be 0 for a broadcast dim on the read side)."""
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim = IntImm(0)

    def __str__(self) -> str:  # printed graphs: view[shape : strides + offset]
        off = "" if self.offset == 0 else f" + {self.offset}"
        return f"view{shape_str(self.shape)}:{shape_str(self.strides)}{off}"


@dataclasses.dataclass(frozen=True)
class AttentionAttrs:
    causal: bool = False
    scale: Optional[float] = None  # None: 1/sqrt(head_dim)
    # Per operand (q, k, v[, mask]): None reads the tensor as it is, a view reads a window of it.
    operand_views: Optional[tuple[Optional[StridedView], ...]] = None
    # The result [*batch, Sq, Dv] is written through out_view into a tensor of shape out_shape
    # (the view must cover it exactly once: a permutation of a dense layout).
    out_view: Optional[StridedView] = None
    out_shape: Optional[tuple[Dim, ...]] = None


@dataclasses.dataclass(frozen=True)
class _Logical:
    """What an operand looks like to the attention math: a shape and a dtype."""
    shape: tuple[Dim, ...]
    dtype: DType
    name: Optional[str] = None

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _check_read_view(i: int, t: Tensor, view: StridedView) -> None:
    check(len(view.shape) == len(view.strides), f"operand {i}: view {view} has mismatched shape and strides")
    check(all(s.lower >= 0 for s in view.strides) and view.offset.lower >= 0,
          f"operand {i}: view {view} has a negative stride or offset")
    if any(n == 0 for n in view.shape) or prod(t.shape) == 0:
        return
    # The last element read must lie inside the tensor for every value of the dims (exact
    # polynomial arithmetic: B*S*3HD - 1 - the last index of a Q/K/V window is a constant).
    last = view.offset + sum(((n - 1) * s for n, s in zip(view.shape, view.strides)), IntImm(0))
    check((prod(t.shape) - 1 - last).lower >= 0,
          f"operand {i}: view {view} reads past the end of {shape_str(t.shape)}")


def _check_write_view(view: StridedView, logical: tuple[Dim, ...], out_shape: tuple[Dim, ...]) -> None:
    """The view must put each element of the result at a distinct place and fill out_shape."""
    check(tuple(view.shape) == tuple(logical) and len(view.strides) == len(logical),
          f"out_view {view} does not match the result {shape_str(logical)}")
    check(prod(out_shape) == prod(logical) and view.offset == 0,
          f"out_view {view} does not cover the output {shape_str(out_shape)}")
    dims = [(n, s) for n, s in zip(view.shape, view.strides) if n != 1]
    expect: Dim = IntImm(1)
    while dims:  # innermost first: each next dim must step over exactly the ones inside it
        hit = next((j for j, (n, s) in enumerate(dims) if s == expect), None)
        check(hit is not None, f"out_view {view} is not a permutation of a dense layout")
        n, _ = dims.pop(hit)
        expect = expect * n


def _infer(inputs, attrs):
    views = attrs.operand_views
    if views is not None:
        check(len(views) == len(inputs), f"{len(views)} operand views for {len(inputs)} operands")
        for i, (t, v) in enumerate(zip(inputs, views)):
            if v is not None:
                _check_read_view(i, t, v)
        inputs = [t if v is None else _Logical(tuple(v.shape), t.dtype, t.name) for t, v in zip(inputs, views)]
    (shape, dtype), = _infer_logical(inputs, attrs)
    if attrs.out_view is None:
        check(attrs.out_shape is None, "out_shape is set without an out_view")
        return [(shape, dtype)]
    check(attrs.out_shape is not None, "out_view is set without an out_shape")
    _check_write_view(attrs.out_view, shape, tuple(attrs.out_shape))
    return [(tuple(attrs.out_shape), dtype)]


def _infer_logical(inputs, attrs):
    q, k, v = inputs[:3]
    for nm, t in (("q", q), ("k", k), ("v", v)):
        check(t.ndim >= 2, f"{nm} must have rank >= 2 ([..., S, D]), got {shape_str(t.shape)}")
    check(k.dtype == q.dtype and v.dtype == q.dtype,
          f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}", DTypeError)
    check(q.shape[-1] == k.shape[-1],
          f"head dim of q ({q.shape[-1]}) and k ({k.shape[-1]}) differ")
    check(k.shape[-2] == v.shape[-2],
          f"key length of k ({k.shape[-2]}) and v ({v.shape[-2]}) differ")
    try:
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ShapeError as e:
        raise ShapeError(f"batch dims of q, k, v do not broadcast: {e}") from None
    if len(inputs) == 4:
        m = inputs[3]
        # An additive mask in float32 beside narrow q/k/v is what bfloat16 autocast keeps (a
        # relative-position bias or ALiBi slope loses its fine structure in bf16, whose spacing
        # near 10 is 0.06); every kernel adds the mask in float32 whatever it stores.
        check(m.dtype in (DType.bool, q.dtype) or (m.dtype == DType.float32 and q.dtype in (DType.float16, DType.bfloat16)),
              f"mask dtype {m.dtype} must be bool, q's dtype {q.dtype} or float32 (additive); "
              f"convert it with ops.cast", DTypeError)
        scores = (*batch, q.shape[-2], k.shape[-2])
        ok = m.ndim <= len(scores)
        if ok:
            try:
                ok = tuple(broadcast_shapes(scores, m.shape)) == tuple(scores)
            except ShapeError:
                ok = False
        check(ok, f"mask {shape_str(m.shape)} does not broadcast to the scores {shape_str(scores)}")
    return [((*batch, q.shape[-2], v.shape[-1]), q.dtype)]


def _evaluate(view: StridedView, env) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return (tuple(d.evaluate(env) for d in view.shape), tuple(d.evaluate(env) for d in view.strides),
            view.offset.evaluate(env))


def _read(arr: np.ndarray, view: Optional[StridedView], env) -> np.ndarray:
    if view is None:
        return arr
    shape, strides, offset = _evaluate(view, env)
    if 0 in shape:
        return np.zeros(shape, arr.dtype)
    flat = np.ascontiguousarray(arr).reshape(-1)[offset:]
    return np.lib.stride_tricks.as_strided(flat, shape, [s * flat.itemsize for s in strides], writeable=False).copy()


def _reference(args, attrs, ctx):
    if attrs.operand_views is not None:
        args = [_read(a, v, ctx.env) for a, v in zip(args, attrs.operand_views)]
    (res,) = _reference_logical(args, attrs)
    if attrs.out_view is None:
        return [res]
    out = np.zeros(ctx.out_shapes[0], res.dtype)
    shape, strides, offset = _evaluate(attrs.out_view, ctx.env)
    if out.size:
        flat = out.reshape(-1)[offset:]
        np.lib.stride_tricks.as_strided(flat, shape, [s * flat.itemsize for s in strides])[...] = res
    return [out]


def _reference_logical(args, attrs):
    q, k, v = args[:3]
    mask = args[3] if len(args) == 4 else None
    sq, sk = q.shape[-2], k.shape[-2]
    scale = attrs.scale if attrs.scale is not None else 1.0 / math.sqrt(q.shape[-1])
    # Scaling q costs Sq*D multiplies, scaling the scores Sq*Sk; the results differ by float32 rounding.
    s = np.matmul(q * q.dtype.type(scale), np.swapaxes(k, -1, -2))  # float64 keeps the scale exact
    keep = None  # bool, broadcastable to s: where a key may be attended
    if attrs.causal:
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None]
    if mask is not None:
        if mask.dtype == np.bool_:
            keep = mask if keep is None else keep & mask
        else:
            s = s + mask
    if keep is not None:
        s = np.where(keep, s, np.float32(-np.inf))
    m = np.max(s, axis=-1, keepdims=True) if sk else np.zeros(s.shape[:-1] + (1,), np.float32)
    m = np.where(np.isneginf(m), np.float32(0), m)  # fully masked rows: exp(-inf) = 0, not NaN
    e = np.exp(s - m)
    den = np.sum(e, axis=-1, keepdims=True)
    p = e / np.where(den == 0, np.float32(1), den)
    return [np.matmul(p, v)]


register(OpKind.ATTENTION, Category.ATTENTION, AttentionAttrs, _infer, _reference,
         num_inputs=(3, 4), float_only=True)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None,
                                 causal: bool = False, scale: Optional[float] = None, name=None) -> Tensor:
    """q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv], mask additive (float) broadcastable to
    [..., Sq, Sk]. Causal is top-left aligned like torch (query i sees keys j <= i).

    A bool mask is accepted too, with torch's meaning (True = attend); mask and causal combine.
    Batch dims of q, k, v broadcast; the result is [*batch, Sq, Dv] in q's dtype."""
    if scale is not None and not math.isfinite(float(scale)):
        raise ValueError(f"attention{' ' + repr(name) if name else ''}: scale must be finite, got {scale}")
    ops = [q, k, v] + ([mask] if mask is not None else [])
    attrs = AttentionAttrs(bool(causal), None if scale is None else float(scale))
    if all(isinstance(t, Tensor) for t in ops) and q.dtype is DType.float64:
        infer_types(OpKind.ATTENTION, ops, attrs, name)  # the fused op's checks and messages
        y = float64.attention(q, k, v, mask, attrs.causal, attrs.scale, name)  # its kernels compute in float32
        if y is not None:
            return y
    return make_op1(OpKind.ATTENTION, ops, attrs, name)
