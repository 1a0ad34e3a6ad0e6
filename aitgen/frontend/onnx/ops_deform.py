"""ONNX DeformConv (2-D) as bilinear gathers at offset positions and one GEMM per group.

Each output pixel's kernel tap k reads X at (oh * s - pad + i * d + offset_h, ow * s - pad +
j * d + offset_w), bilinearly with zeros outside (onnx's reference samples through GridSample with
align_corners and zeros padding: ops_sample.pixel_taps is the same arithmetic), times the tap's
mask. Those samples, laid out [N, OH, OW, K, C] (K = KH * KW; each gather moves whole rows of the
offset group's channels), are an im2col matrix: a GEMM with the weight as [K * C/group, O/group]
per group gives the output. Offsets and mask are run-time tensors; X's channels and spatial dims
must be static (the index arithmetic's constants), the batch may be dynamic.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import IntImm
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from .ops_nn import as_input, float_input, to_nchw
from .ops_sample import batch_offsets, pixel_taps
from .registry import NodeContext, onnx_op


def _ints(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    v = ctx.attr(name, [default] * n)
    if len(v) != n or not all(isinstance(a, int) for a in v):
        raise ctx.malformed(f"attribute '{name}' must hold {n} ints, got {v!r}")
    return [int(a) for a in v]


@onnx_op("DeformConv", min_opset=19)
def _deform_conv(ctx: NodeContext):
    x = float_input(ctx, 0, "X")
    w = as_input(ctx, 1, x, "W")
    off = as_input(ctx, 2, x, "offset")
    if w is None or off is None:
        raise ctx.malformed("inputs 1 (W) and 2 (offset) are required")
    if x.ndim != 4:
        raise ctx.unsupported(f"X of rank {x.ndim}: aitgen's DeformConv is 2-D (as onnx's reference)")
    if not all(d.is_static for d in (*x.shape[1:], *w.shape)):
        raise ctx.unsupported("X's channels and spatial dims and W's shape must be static")
    c, h, wd = (d.value for d in x.shape[1:])
    o, cg, kh, kw = (d.value for d in w.shape)
    group, og = ctx.attr("group", 1), ctx.attr("offset_group", 1)
    if group < 1 or og < 1 or c != cg * group or o % group or c % og:
        raise ctx.malformed(f"X has {c} channels, W {list(w.shape)}, group {group}, offset_group {og}: "
                            "channels must split into the groups")
    if ctx.has_attr("kernel_shape") and list(ctx.attr("kernel_shape")) != [kh, kw]:
        raise ctx.malformed(f"kernel_shape {ctx.attr('kernel_shape')} disagrees with W's {[kh, kw]}")
    strides, dils, pads = _ints(ctx, "strides", 2, 1), _ints(ctx, "dilations", 2, 1), _ints(ctx, "pads", 4, 0)
    if any(v < 1 for v in strides + dils) or any(p < 0 for p in pads):
        raise ctx.malformed(f"strides {strides}, dilations {dils} must be >= 1 and pads {pads} >= 0")
    oh = (h + pads[0] + pads[2] - (dils[0] * (kh - 1) + 1)) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (dils[1] * (kw - 1) + 1)) // strides[1] + 1
    k = kh * kw
    n = x.shape[0]
    want = [og * k * 2, oh, ow]
    if off.ndim != 4 or [str(d) for d in off.shape[1:]] != [str(v) for v in want]:
        raise ctx.malformed(f"offset must be [N, {want[0]}, {oh}, {ow}], got [{', '.join(map(str, off.shape))}]")
    mask = as_input(ctx, 4, x, "mask")
    if mask is not None and (mask.ndim != 4 or [str(d) for d in mask.shape[1:]] != [str(og * k), str(oh), str(ow)]):
        raise ctx.malformed(f"mask must be [N, {og * k}, {oh}, {ow}], got [{', '.join(map(str, mask.shape))}]")
    f32 = (lambda t: t) if x.dtype == DType.float32 else (lambda t: ops.cast(t, DType.float32))
    # [N, og * K * 2, OH, OW] -> [N, OH, OW, og, K, 2]
    off6 = ops.permute(ops.reshape(f32(off), [n, IntImm(og), IntImm(k), IntImm(2), IntImm(oh), IntImm(ow)]),
                       [0, 4, 5, 1, 2, 3])
    m5 = None if mask is None else ops.permute(
        ops.reshape(f32(mask), [n, IntImm(og), IntImm(k), IntImm(oh), IntImm(ow)]), [0, 3, 4, 1, 2])
    taps = np.arange(k)
    base_h = constant(((np.arange(oh) * strides[0] - pads[0])[:, None, None] + (taps // kw) * dils[0])[None]
                      .astype(np.float32))  # [1, OH, 1, K]
    base_w = constant(((np.arange(ow) * strides[1] - pads[1])[None, :, None] + (taps % kw) * dils[1])[None]
                      .astype(np.float32))  # [1, 1, OW, K]
    table = ops.reshape(ops.permute(x, [0, 2, 3, 1]), [n * IntImm(h * wd), IntImm(c)])  # NHWC rows
    start = batch_offsets(ctx, n, h * wd, 4)
    cols = []
    cpo = c // og
    for g in range(og):
        def comp(t: int) -> Tensor:  # offset component t of group g: [N, OH, OW, K]
            return ops.squeeze(ops.slice(off6, [g, t], [g + 1, t + 1], axes=[3, 5]), [3, 5])
        th = pixel_taps(ops.add(comp(0), base_h), h, "linear", "zeros")
        tw = pixel_taps(ops.add(comp(1), base_w), wd, "linear", "zeros")
        mg = None if m5 is None else ops.squeeze(ops.slice(m5, [g], [g + 1], axes=[3]), [3])
        tab = table if og == 1 else ops.slice(table, [g * cpo], [(g + 1) * cpo], axes=[1])
        acc = None
        for ih, wh in th:
            for iw, ww in tw:
                idx = ops.add(start, ops.add(ops.mul(ih, constant(np.int64(wd))), iw))
                wt = ops.mul(wh, ww)
                wt = wt if mg is None else ops.mul(wt, mg)
                v = ops.mul(ops.gather(tab, idx, axis=0),
                            ops.unsqueeze(wt if x.dtype == DType.float32 else ops.cast(wt, x.dtype), [4]))
                acc = v if acc is None else ops.add(acc, v)
        cols.append(acc)  # [N, OH, OW, K, C / og]
    col = cols[0] if og == 1 else ops.concat(cols, axis=4)
    b = as_input(ctx, 3, x, "B")
    og_out = o // group
    outs = []
    for gi in range(group):
        part = col if group == 1 else ops.slice(col, [gi * cg], [(gi + 1) * cg], axes=[4])
        wg = w if group == 1 else ops.slice(w, [gi * og_out], [(gi + 1) * og_out], axes=[0])
        wm = ops.reshape(ops.permute(wg, [2, 3, 1, 0]), [IntImm(k * cg), IntImm(og_out)])  # [K * Cg, Og]
        bg = None if b is None else b if group == 1 else ops.slice(b, [gi * og_out], [(gi + 1) * og_out])
        outs.append(ops.gemm(ops.reshape(part, [n, IntImm(oh), IntImm(ow), IntImm(k * cg)]), wm, bg))
    y = outs[0] if group == 1 else ops.concat(outs, axis=3)
    return to_nchw(y)
