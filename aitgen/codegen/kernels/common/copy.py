"""The geometry of the byte-exact copies, on every backend: permute, expand, slice, concat and
split as one strided copy each (concat one per operand, split one per part), pad and gather.

Elements move as unsigned integers of their size, so every dtype, bool/f16/bf16 included, copies
bit for bit. A strided copy is loop sizes with a source and a destination stride per loop dim (a
slice adds a start offset and step-scaled, possibly negative strides; expand has stride 0 on
broadcast dims; concat writes each operand into its window of the output, split reads each part's
window). Loop dims merge where both sides are contiguous across them, so most copies end in a long
contiguous inner run (BERT's head transposes copy rows of D); the loop shape is "contig", "fill"
(a broadcast row), "tile" (a transpose that moves the contiguous dim) or "strided".

Only the kernel differs per backend: each family function takes the backend's `make` (ctx,
element bytes, numel, **geometry) -> KernelSpec, where numel is the most elements any tensor the
kernel touches holds (it bounds every index the kernel forms), and each backend registers its
lowerings as calls of these (codegen/kernels/<backend>/view.py, gather.py).
"""
from __future__ import annotations

from typing import Callable, Union

import numpy as np

from ....ir.dims import Dim, IntImm, as_dim, prod
from ....ir.dtype import DType
from ....ir.op import Op
from ....ir.tensor import Tensor
from ...cexpr import STORAGE
from ...lower import LowerContext
from ...spec import KernelCall, KernelSpec
from .access import broadcast_strides, dense_strides

ELEM = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}

Make = Callable[..., KernelSpec]  # (ctx, item bytes, numel, **geometry) -> the backend's kernel
DimLike = Union[Dim, int]


def max_numel(*tensors) -> Dim:
    """The element count of the largest tensor (by upper bound)."""
    return max((prod(t.shape) for t in tensors), key=lambda d: d.upper)


def _collapse(sizes: list[Dim], src: list[Dim], dst: list[Dim]):
    """Drop static size-1 loop dims; merge neighbours contiguous on both sides (sizes may be symbolic:
    the strides are compared as polynomials)."""
    keep = [i for i, n in enumerate(sizes) if n != 1]
    sizes, src, dst = [sizes[i] for i in keep], [src[i] for i in keep], [dst[i] for i in keep]
    j = len(sizes) - 2
    while j >= 0:
        if src[j] == src[j + 1] * sizes[j + 1] and dst[j] == dst[j + 1] * sizes[j + 1]:
            sizes[j:j + 2], src[j:j + 2], dst[j:j + 2] = [sizes[j] * sizes[j + 1]], [src[j + 1]], [dst[j + 1]]
        j -= 1
    if not sizes:
        return [IntImm(1)], [IntImm(1)], [IntImm(1)]
    return sizes, src, dst


def strided_copy_call(ctx: LowerContext, make: Make, op: Op, dst: Tensor, src: Tensor, sizes, src_strides,
                      dst_strides, src_offset: DimLike = 0, dst_offset: DimLike = 0, what: str = "") -> KernelCall:
    """dst[dst_offset + sum i*dst_strides] = src[src_offset + sum i*src_strides] over the loop sizes
    (all in elements)."""
    sizes, ss, ds = _collapse([as_dim(x) for x in sizes], [as_dim(x) for x in src_strides],
                              [as_dim(x) for x in dst_strides])
    item = src.dtype.itemsize
    r = len(sizes)
    if ss[-1] == 1 and ds[-1] == 1:
        mode = "contig"
    elif ss[-1] == 0 and ds[-1] == 1:
        mode = "fill"
    else:
        mode = "strided"
        # A transpose that moves the source's contiguous dim inward: walk 2-D tiles so both the
        # reads (along that dim) and the writes (along the last) stay within a few cache lines.
        unit = [j for j in range(r - 1) if ss[j] == 1]
        if unit and ds[-1] == 1:
            a = unit[-1]
            order = [j for j in range(r - 1) if j != a] + [a, r - 1]
            sizes, ss, ds = [sizes[j] for j in order], [ss[j] for j in order], [ds[j] for j in order]
            mode = "tile"
    spec = make(ctx, item, max_numel(src, dst), elem=ELEM[item], rank=r, mode=mode)
    name = (op.name or op.kind.value) + (f" {what}" if what else "")
    return KernelCall(spec, [dst, src], [*sizes, *ss, *ds, as_dim(src_offset), as_dim(dst_offset)], name)


def out_strides(ctx: LowerContext, y: Tensor) -> list[Dim]:
    """Where a copy writes y: dense, or at the strides of the concat slice the memory plan put it in."""
    return list(ctx.plan.strided_writes.get(y, dense_strides(y.shape)))


def permute_calls(op: Op, ctx: LowerContext, make: Make) -> list[KernelCall]:
    x, y = op.inputs[0], op.outputs[0]
    xs = dense_strides(x.shape)
    return [strided_copy_call(ctx, make, op, y, x, y.shape, [xs[p] for p in op.attrs.perm], out_strides(ctx, y))]


def expand_calls(op: Op, ctx: LowerContext, make: Make) -> list[KernelCall]:
    x, y = op.inputs[0], op.outputs[0]
    return [strided_copy_call(ctx, make, op, y, x, y.shape, broadcast_strides(x.shape, y.shape), out_strides(ctx, y))]


def slice_calls(op: Op, ctx: LowerContext, make: Make) -> list[KernelCall]:
    x, y = op.inputs[0], op.outputs[0]
    xs = dense_strides(x.shape)
    offset: Dim = IntImm(0)
    for n, start, stride in zip(x.shape, op.attrs.starts, xs):
        # A negative start (dynamic dims only) counts from the run-time end; the stop only sets
        # the output size, which the shape already holds.
        offset = offset + ((n + start) if start < 0 else as_dim(start)) * stride
    strides = [st * s for st, s in zip(op.attrs.steps, xs)]
    return [strided_copy_call(ctx, make, op, y, x, y.shape, strides, out_strides(ctx, y), src_offset=offset)]


def concat_calls(op: Op, ctx: LowerContext, make: Make) -> list[KernelCall]:
    """One copy per part, except the parts the memory plan placed in the output (their producers
    wrote them there): ViT's [class token; patches] copies the token alone."""
    y, ax = op.outputs[0], op.attrs.axis
    ys = dense_strides(y.shape)
    in_place = ctx.plan.concat_in_place.get(y, {})
    calls, at = [], IntImm(0)
    for i, x in enumerate(op.inputs):
        if i not in in_place:
            calls.append(strided_copy_call(ctx, make, op, y, x, x.shape, dense_strides(x.shape), ys,
                                           dst_offset=at * ys[ax], what=f"operand {i}"))
        at = at + x.shape[ax]
    return calls


def split_calls(op: Op, ctx: LowerContext, make: Make) -> list[KernelCall]:
    x, ax = op.inputs[0], op.attrs.axis
    xs = dense_strides(x.shape)
    calls, at = [], IntImm(0)
    for i, y in enumerate(op.outputs):
        calls.append(strided_copy_call(ctx, make, op, y, x, y.shape, xs, dense_strides(y.shape),
                                       src_offset=at * xs[ax], what=f"part {i}"))
        at = at + y.shape[ax]
    return calls


def _fill_bits(value: float, dtype: DType) -> int:
    """The pad value's bytes in the tensor's dtype, converted as the oracle does: numpy's cast, and
    float16/bfloat16/float8 through float32 (the oracle pads those in float32, then rounds)."""
    v = np.array(value, np.float64)
    if dtype.is_low_float:
        v = v.astype(np.float32)
    return int.from_bytes(v.astype(dtype.np).tobytes(), "little")


def pad_calls(op: Op, ctx: LowerContext, make: Make) -> list[KernelCall]:
    x, y = op.inputs[0], op.outputs[0]
    a = op.attrs
    sizes, pads = list(x.shape), [tuple(p) for p in a.pads]
    # Neighbouring unpadded dims are one dim (an NHWC pad of H and W copies rows of C).
    j = len(sizes) - 2
    while j >= 0:
        if pads[j] == (0, 0) and pads[j + 1] == (0, 0):
            sizes[j:j + 2], pads[j:j + 2] = [sizes[j] * sizes[j + 1]], [(0, 0)]
        j -= 1
    if not sizes:
        sizes, pads = [IntImm(1)], [(0, 0)]
    item = x.dtype.itemsize
    spec = make(ctx, item, max_numel(x, y), elem=ELEM[item], rank=len(sizes), mode=a.mode,
                fill_bits=_fill_bits(a.value, x.dtype) if a.mode == "constant" else 0)
    dims = [*sizes, *(IntImm(lo) for lo, _ in pads), *(IntImm(hi) for _, hi in pads)]
    return [KernelCall(spec, [y, x], dims, op.name or op.kind.value)]


def gather_calls(op: Op, ctx: LowerContext, make: Make) -> list[KernelCall]:
    """np.take along an axis: d = [outer, n, m, inner] (x viewed as [outer, n, inner], m indices)."""
    x, idx = op.inputs
    y, ax = op.outputs[0], op.attrs.axis
    item = x.dtype.itemsize
    label = "gather" + (f" '{op.name}'" if op.name else "")
    # The template writes the label as an escaped literal (`| cstr`): op names are user text.
    spec = make(ctx, item, max_numel(x, y), elem=ELEM[item], index_t=STORAGE[idx.dtype], axis=ax, label=label)
    dims = [prod(x.shape[:ax]), x.shape[ax], prod(idx.shape), prod(x.shape[ax + 1:])]
    return [KernelCall(spec, [y, x, idx], dims, op.name or op.kind.value)]
