"""An ATTENTION op's run-time arguments, on every backend: strides, offsets and flags.

Batch dims broadcast through per-operand strides (0 along a broadcast dim); adjacent batch dims
that every operand walks contiguously merge, so BERT's [B, H] batch of q/k/v is one dim and only
the mask's [B, 1] keeps two. Operands read through a StridedView (attrs.operand_views) and a result
written through attrs.out_view only change those strides and add an element offset per operand.
The layout of the dims is what backends/cuda/include/aitgen/cuda_attention.cuh and the CPU
template read.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm
from ....ir.dtype import DType
from ....ir.op import Op
from .access import broadcast_strides


def _merge_batch(sizes: list[Dim], strides: list[list[Dim]]) -> tuple[list[Dim], list[list[Dim]]]:
    """Drop static size-1 batch dims and merge neighbours every operand steps through contiguously."""
    keep = [i for i, n in enumerate(sizes) if n != 1]
    sizes = [sizes[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    j = len(sizes) - 2
    while j >= 0:
        if all(s[j] == s[j + 1] * sizes[j + 1] for s in strides):
            sizes[j:j + 2] = [sizes[j] * sizes[j + 1]]
            for s in strides:
                s[j:j + 2] = [s[j + 1]]
        j -= 1
    if not sizes:  # no batch at all (q is [Sq, D]): one item
        return [IntImm(1)], [[IntImm(0)] for _ in strides]
    return sizes, strides


def _operand(t, view, want: tuple) -> tuple[tuple, list[Dim], Dim]:
    """(logical shape, strides read at the indices of `want` (0 where broadcast), element offset)."""
    if view is None:
        return tuple(t.shape), broadcast_strides(t.shape, want), IntImm(0)
    pad = len(want) - len(view.shape)
    strides = [IntImm(0)] * pad + [IntImm(0) if (n == 1 and w != 1) else s
                                   for n, s, w in zip(view.shape, view.strides, want[pad:])]
    return tuple(view.shape), strides, view.offset


@dataclasses.dataclass(frozen=True)
class AttentionArgs:
    """What every backend's attention kernel is told, in the run-time argument layout that
    backends/cpu/templates/attention.cpp.j2 documents (and the cuda templates share):
    ptrs = [out, q, k, v(, mask)], dims = [Sq, Sk, D, Dv, RB batch sizes, RB batch strides of each
    of q, k, v, out, mask, row strides of q, k, v, out, the mask's query and key strides, the
    scale's float32 bits, element offsets of q, k, v, out, mask]."""
    dtype: DType
    mask: str                  # "none", "add" (float, added to the scores) or "bool" (True attends)
    mask_dtype: Optional[DType]
    mask_q_bcast: bool         # the mask's query stride is 0 (one row serves every query)
    mask_k_stride: Dim         # the mask's key stride (0 without a mask)
    causal: bool
    scale_from_head_dim: bool  # the head dim is symbolic: the kernel computes 1/sqrt(D) itself
    rb: int                    # merged batch dims
    sq: Dim
    sk: Dim
    head_dim: Dim
    value_dim: Dim
    batch: tuple[Dim, ...]     # the merged batch sizes
    ptrs: list
    dims: list


def attention_args(op: Op, backend: str) -> AttentionArgs:
    """Strides, offsets and flags of an ATTENTION op, shared by every backend's lowering. Raises
    UnsupportedOpError where q, k, v or the result is not contiguous along its last dim."""
    a = op.attrs
    views = a.operand_views or (None,) * len(op.inputs)
    q, k, v = op.inputs[:3]
    mask = op.inputs[3] if len(op.inputs) == 4 else None
    out = op.outputs[0]
    q_shape = tuple(views[0].shape) if views[0] is not None else tuple(q.shape)
    k_shape = tuple(views[1].shape) if views[1] is not None else tuple(k.shape)
    v_shape = tuple(views[2].shape) if views[2] is not None else tuple(v.shape)
    sq, sk, d, dv = q_shape[-2], k_shape[-2], q_shape[-1], v_shape[-1]
    logical_out = tuple(a.out_view.shape) if a.out_view is not None else tuple(out.shape)
    batch = logical_out[:-2]
    parts = [_operand(q, views[0], (*batch, sq, d)), _operand(k, views[1], (*batch, sk, d)),
             _operand(v, views[2], (*batch, sk, dv))]
    if a.out_view is not None:
        parts.append((logical_out, list(a.out_view.strides), a.out_view.offset))
    else:
        parts.append(_operand(out, None, logical_out))
    if mask is not None:
        parts.append(_operand(mask, views[3], (*batch, sq, sk)))
    else:
        parts.append(((), [IntImm(0)] * (len(batch) + 2), IntImm(0)))
    for nm, (shape, st, _), n in zip(("q", "k", "v", "result"), parts, (d, d, dv, dv)):
        if n != 1 and st[-1] != 1:
            raise UnsupportedOpError(f"attention '{op.name}': {nm} must be contiguous along its last dim "
                                     f"for the {backend} kernel (stride {st[-1]})")
    full = [st for _, st, _ in parts]
    offsets = [off for _, _, off in parts]
    rb = len(batch)
    sizes, bstrides = _merge_batch(list(batch), [list(s[:rb]) for s in full])
    m_sq, m_sk = full[4][rb], full[4][rb + 1]
    if mask is None:
        kind = "none"
    else:
        kind = "bool" if mask.dtype is DType.bool else "add"
    scale = a.scale
    if scale is None and d.is_static:
        # the reference's value, rounded to float32 the same way (an empty head dim scores 0 anyway)
        scale = 1.0 / math.sqrt(d.value) if d.value else 1.0
    # The scale travels as a run-time argument (its float32 bits), so it does not split kernels.
    scale_bits = 0 if scale is None else int(np.array(scale, np.float32).view(np.uint32))
    dims: list = [sq, sk, d, dv, *sizes]
    for s in bstrides:
        dims.extend(s)
    dims += [full[0][rb], full[1][rb], full[2][rb], full[3][rb], m_sq, m_sk, scale_bits, *offsets]
    return AttentionArgs(
        dtype=q.dtype, mask=kind, mask_dtype=mask.dtype if mask is not None else None,
        mask_q_bcast=bool(mask is not None and m_sq == 0), mask_k_stride=m_sk, causal=bool(a.causal),
        scale_from_head_dim=scale is None, rb=len(sizes), sq=sq, sk=sk, head_dim=d, value_dim=dv,
        batch=tuple(sizes), ptrs=[out, q, k, v] + ([mask] if mask is not None else []), dims=dims)
