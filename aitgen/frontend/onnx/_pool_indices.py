"""MaxPool's second output, Indices, as a composite of existing IR ops (1-D, 2-D and 3-D windows).

ONNX: for each output element, the flat index into X [N, C, *spatial] of the window's largest
element; `storage_order` 1 counts the spatial dims column-major (the first dim fastest), N and C
stay outermost either way. ONNX's reference and onnxruntime take the FIRST largest element in the
window's row-major tap order (a strict `>` scan), whatever the storage order.

The composite: every tap of the window is one strided slice of the explicitly padded input
(padding -inf, so a padded tap never wins over a real element); the K slices stacked on a new last
axis go through argmax, whose first-index rule is the scan's. The flat index is then linear in the
window position and the tap: base[position] + tap_offset[tap] + (n * C + c) * plane, the tap
offset a constant table gathered by the argmax. Not matched: a window whose real elements are all
-inf or NaN (argmax may pick a padded tap or the NaN; onnxruntime's scan finds nothing above its
start value); no index is meaningful there.

Spatial dims must be static (the tables are built at import time); N and C may be dynamic.
"""
from __future__ import annotations

import itertools

import numpy as np

from ... import ops
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from .ops_nn3d import pool_geometry
from .registry import NodeContext


def max_pool_indices(ctx: NodeContext, x: Tensor, kernel: list[int], strides: list[int], dilations: list[int],
                     begin: list[int], end: list[int], ceil: bool) -> Tensor:
    """The int64 Indices output of MaxPool over x [N, C, *spatial]."""
    nsp = x.ndim - 2
    if not all(d.is_static for d in x.shape[2:]):
        raise ctx.unsupported(f"the Indices output over the dynamic spatial dims {[str(d) for d in x.shape[2:]]} "
                              "(aitgen builds the index tables at import time)")
    order = ctx.attr("storage_order", 0)
    if order not in (0, 1):
        raise ctx.malformed(f"storage_order must be 0 (row-major) or 1 (column-major), got {order!r}")
    sizes, outs, extra = pool_geometry(ctx, x, kernel, strides, dilations, begin, end, ceil)
    # float32 holds every int8/uint8 exactly and lets the padding be -inf (a uint8 pad of 0 would
    # tie with real zeros and could win as the first maximum).
    key = x if x.dtype.is_float else ops.cast(x, DType.float32)
    pads = [(0, 0), (0, 0)] + [(b, e + x_) for b, e, x_ in zip(begin, end, extra)]
    xp = ops.pad(key, pads, value=float("-inf"))
    taps = list(itertools.product(*(range(k) for k in kernel)))  # row-major: the scan's order
    axes = list(range(2, 2 + nsp))
    stacked = []
    for tap in taps:
        starts = [t * d for t, d in zip(tap, dilations)]
        ends = [st + (o - 1) * s + 1 for st, o, s in zip(starts, outs, strides)]
        stacked.append(ops.unsqueeze(ops.slice(xp, starts, ends, axes=axes, steps=strides), [x.ndim]))
    best = ops.argmax(ops.concat(stacked, axis=x.ndim) if len(stacked) > 1 else stacked[0], axis=x.ndim,
                      keepdims=False)
    # Element strides of the spatial dims in the requested storage order.
    el = [int(np.prod(sizes[i + 1:] if order == 0 else sizes[:i], dtype=np.int64)) for i in range(nsp)]
    tap_off = np.array([sum(t * d * e for t, d, e in zip(tap, dilations, el)) for tap in taps], np.int64)
    base = np.zeros(outs, np.int64)
    for i in range(nsp):  # the unpadded coordinate of each window's first tap, per axis
        first = (np.arange(outs[i], dtype=np.int64) * strides[i] - begin[i]) * el[i]
        base = base + first.reshape([-1 if j == i else 1 for j in range(nsp)])
    idx = ops.add(ops.gather(constant(tap_off, dtype=DType.int64), best), constant(base, dtype=DType.int64))
    return ops.add(idx, _plane_offsets(x, int(np.prod(sizes, dtype=np.int64))))


def _plane_offsets(x: Tensor, plane: int) -> Tensor:
    """(n * C + c) * plane as [N, C, 1, ...]; N and C may be dynamic, so an exclusive running count
    over ones of that shape rather than a constant."""
    n, c = x.shape[0], x.shape[1]
    ones = ops.expand(constant(np.ones((1, 1), np.int64), dtype=DType.int64), [n, c])
    count = ops.cumsum(ops.reshape(ones, [n * c]), axis=0, exclusive=True)
    flat = ops.mul(count, constant(np.array(plane, np.int64), dtype=DType.int64))
    return ops.reshape(flat, [n, c] + [1] * (x.ndim - 2))
