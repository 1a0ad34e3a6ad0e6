"""match_norms: layer norm and RMS norm written out op by op become one LAYERNORM / RMSNORM op.

ONNX has LayerNormalization only from opset 17, so most exported transformers (torch's exporter
below 17, and every exporter that targets opset 14, the common default) spell each layer norm as
seven element-wise ops and two reductions: nine kernels and as many passes over the activations
where the norm op is one (and takes the residual add before it in, see fuse_norm_elementwise).
RMS norm (T5, LLaMA) has no ONNX op below opset 23 at all. Matched:

    m = mean(x, axes)                                   (the trailing k axes, keepdims)
    d = x - m                                           (absent for RMS norm: d = x)
    v = mean(d ** 2 | d * d, axes)
    n = d / sqrt(v + eps) | d * rsqrt(v + eps) | d * reciprocal(sqrt(v + eps))
    y = n [* w] [+ b]                                   (either operand order)

with eps a scalar constant >= 0, and w, b either constants that broadcast over the normalised
dims only (stored at the norm's [*dims] shape) or tensors of exactly that shape (after leading
1s). x and the result may have other readers (for RMS norm d is x); every other intermediate only
its reader here, a layer norm's d exactly the two above, and none may be a graph output.

Not bit-identical in general: the norm kernel accumulates the mean and variance in its own order.
The oracle evaluates both in numpy and agrees to float32 rounding (tested at rtol 1e-5).

Runs after constant_folding (eps and ONNX's Pow exponent are constants then) and before the
element-wise and norm fusions, which would otherwise take the pieces into element-wise groups.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import AitgenError
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops import norm as norm_ops
from ..ops import view as view_ops
from ..ops.elementwise import broadcast_shapes
from ..options import CompileOptions
from ._util import new_constant, output_ids


def match_norms(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    outs = output_ids(graph)
    changed = False
    for op in list(graph.ops):
        if op.kind not in (OpKind.DIV, OpKind.MUL):
            continue
        found = _match(op, outs)
        if found is None:
            continue
        old, new = found
        new.name = old.name
        graph.replace_all_uses(old, new)
        changed = True
    if changed:
        graph.sort()
    return graph


def _readers(t: Tensor) -> list[Op]:
    seen: dict[int, Op] = {}
    for u in t.users:
        seen.setdefault(id(u), u)
    return list(seen.values())


def _single(t: Tensor, op: Op, outs: set[int]) -> bool:
    r = _readers(t)
    return len(r) == 1 and r[0] is op and id(t) not in outs


def _scalar(t: Tensor) -> Optional[float]:
    if not t.is_constant or t.value.size == 0:
        return None
    v = np.asarray(t.value, np.float64).reshape(-1)
    return float(v[0]) if np.all(v == v[0]) and np.isfinite(v[0]) else None


def _pair(op: Op, kind: OpKind) -> list[tuple[Tensor, Tensor]]:
    """(a, b) operand orders of a commutative binary op of `kind`, else []."""
    if op.kind is not kind:
        return []
    a, b = op.inputs
    return [(a, b), (b, a)]


def _trailing_mean(t: Tensor, outs: set[int], reader: Op) -> Optional[tuple[Tensor, int]]:
    """(x, k) when t = mean(x) over its last k axes with keepdims, read only by `reader`."""
    p = t.producer
    if p is None or p.kind is not OpKind.REDUCE_MEAN or not p.attrs.keepdims or not _single(t, reader, outs):
        return None
    x = p.inputs[0]
    k = len(p.attrs.axes)
    if k == 0 or tuple(p.attrs.axes) != tuple(range(x.ndim - k, x.ndim)):
        return None
    return x, k


def _inverse_std(op: Op, outs: set[int]) -> Optional[tuple[Tensor, Tensor, Op, float]]:
    """(d, v, v's reader, eps) when op is d / sqrt(v + eps), d * rsqrt(v + eps) or
    d * reciprocal(sqrt(v + eps))."""
    cands: list[tuple[Tensor, Tensor, tuple[OpKind, ...]]] = []
    if op.kind is OpKind.DIV:
        cands.append((op.inputs[0], op.inputs[1], (OpKind.SQRT,)))
    for d, r in _pair(op, OpKind.MUL):
        cands += [(d, r, (OpKind.RSQRT,)), (d, r, (OpKind.RECIPROCAL, OpKind.SQRT))]
    for d, t, chain in cands:
        reader: Op = op
        for kind in chain:
            p = t.producer
            if p is None or p.kind is not kind or not _single(t, reader, outs):
                break
            reader, t = p, p.inputs[0]
        else:
            ap = t.producer  # t = v + eps
            if ap is None or not _single(t, reader, outs):
                continue
            for v, e in _pair(ap, OpKind.ADD):
                eps = _scalar(e)
                if eps is not None and eps >= 0 and v is not e:
                    return d, v, ap, eps
    return None


def _next(t: Tensor, outs: set[int]) -> Optional[Op]:
    r = _readers(t)
    return r[0] if len(r) == 1 and id(t) not in outs else None


def _match(op: Op, outs: set[int]) -> Optional[tuple[Tensor, Tensor]]:
    found = _inverse_std(op, outs)
    if found is None:
        return None
    d, v, v_reader, eps = found
    mean_sq = _trailing_mean(v, outs, v_reader)
    if mean_sq is None:
        return None
    sq, k = mean_sq
    sp = sq.producer
    square = sp is not None and _single(sq, v.producer, outs) and (
        (sp.kind is OpKind.MUL and sp.inputs[0] is d and sp.inputs[1] is d)
        or (sp.kind is OpKind.POW and sp.inputs[0] is d and _scalar(sp.inputs[1]) == 2.0))
    n = op.outputs[0]
    if not square or tuple(d.shape) != tuple(n.shape):
        return None  # (d / s with s growing the result is no norm)
    x, layer = d, False
    dp = d.producer
    if dp is not None and dp.kind is OpKind.SUB and id(d) not in outs and len(_readers(d)) == 2:
        centred = _trailing_mean(dp.inputs[1], outs, dp)
        if centred is not None and centred[0] is dp.inputs[0] and centred[1] == k:
            x, layer = dp.inputs[0], True
    # RMS norm: d is x itself, which may have other readers (LLaMA's residual stream feeds the norm
    # and the next residual add); a layer norm's d = x - mean must feed the square and the scale only.
    if not x.dtype.is_float or x.dtype is DType.float64:  # float64 norms stay decomposed (ops/float64.py)
        return None
    out, weight, bias = n, None, None
    u = _next(out, outs)
    if u is not None and u.kind is OpKind.MUL:
        weight = _param(_other(u, out), x, k)
        if weight is not None:
            out = u.outputs[0]
            u = _next(out, outs)
    if u is not None and u.kind is OpKind.ADD:
        bias = _param(_other(u, out), x, k)
        if bias is not None:
            out = u.outputs[0]
    try:
        if layer:
            y = norm_ops.layernorm(x, weight, bias, eps=eps, num_axes=k, name=op.name)
        elif bias is None:
            y = norm_ops.rmsnorm(x, weight, eps=eps, num_axes=k, name=op.name)
        else:
            return None  # RMS norm takes no bias
    except AitgenError:
        return None  # a shape or dtype the norm op refuses: leave the graph as it is
    if tuple(y.shape) != tuple(out.shape) or y.dtype != out.dtype:
        return None
    return out, y


def _other(op: Op, t: Tensor) -> Optional[Tensor]:
    """The operand of a binary op that is not t (None when both are t)."""
    a, b = op.inputs[0], op.inputs[-1]
    if a is t and b is not t:
        return b
    if b is t and a is not t:
        return a
    return None


def _param(c: Tensor, x: Tensor, k: int) -> Optional[Tensor]:
    """c as a weight/bias of shape x.shape[-k:], when c only broadcasts over those dims."""
    if c is None:
        return None
    norm = tuple(x.shape[-k:])
    if c.dtype != x.dtype or c.ndim > x.ndim:
        return None
    try:
        if tuple(broadcast_shapes(x.shape, c.shape)) != tuple(x.shape):
            return None
    except AitgenError:  # shapes that do not broadcast
        return None
    lead = c.shape[:max(0, c.ndim - k)]
    if any(not (d.is_static and d.value == 1) for d in lead):
        return None  # varies over a non-normalised dim: not a per-feature affine
    if tuple(c.shape[-k:]) == norm and c.ndim >= k and (c.ndim == k or not c.is_constant):
        return c if c.ndim == k else view_ops.reshape(c, list(norm))
    if c.is_constant and all(d.is_static for d in norm):
        shape = [d.value for d in norm]
        v = np.asarray(c.value)
        v = v.reshape(v.shape[max(0, v.ndim - k):])
        return new_constant(np.ascontiguousarray(np.broadcast_to(v, shape)), c.dtype)
    return None
