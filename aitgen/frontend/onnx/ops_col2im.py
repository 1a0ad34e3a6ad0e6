"""ONNX Col2Im (1-D, 2-D and 3-D blocks) as a transposed convolution with one-hot weights.

Col2Im adds every column block back at its window's place in the (padded) image: that is a
transposed convolution of the columns, read as a [N, C * K, *blocks] image (K = prod(block_shape)),
with C groups of K input channels each and a constant weight that is 1 at tap k for input channel
c * K + k. The strides, dilations and pads are Col2Im's own; a remainder of the image that no
window reaches becomes the transposed conv's output_padding (zeros, as Col2Im leaves them). The
transposed conv runs through oneDNN (3-D blocks: ops_nn3d's depth slices).
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import IntImm
from . import ops_nn3d
from .ops_nn import float_input, like, to_nchw, to_nhwc
from .registry import NodeContext, check_constant_size, onnx_op


def _ints_attr(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    v = ctx.attr(name, [default] * n)
    if len(v) != n or not all(isinstance(a, int) for a in v):
        raise ctx.malformed(f"attribute '{name}' must hold {n} ints, got {v!r}")
    return [int(a) for a in v]


@onnx_op("Col2Im", min_opset=18)
def _col2im(ctx: NodeContext):
    x = float_input(ctx, 0, "input")
    image, block = ctx.ints(1, "image_shape"), ctx.ints(2, "block_shape")
    if image is None or block is None:
        raise ctx.malformed("inputs 1 (image_shape) and 2 (block_shape) are required")
    nsp = len(image)
    if nsp not in (1, 2, 3) or len(block) != nsp:
        raise ctx.unsupported(f"image_shape {image} / block_shape {block}: aitgen's Col2Im takes 1 to 3 "
                              "spatial dims, the same number in both")
    if any(v < 1 for v in image + block):
        raise ctx.malformed(f"image_shape {image} and block_shape {block} must be positive")
    strides = _ints_attr(ctx, "strides", nsp, 1)
    dilations = _ints_attr(ctx, "dilations", nsp, 1)
    pads = _ints_attr(ctx, "pads", 2 * nsp, 0)
    if any(v < 1 for v in strides + dilations) or any(p < 0 for p in pads):
        raise ctx.malformed(f"strides {strides} and dilations {dilations} must be >= 1, pads {pads} >= 0")
    if x.ndim != 3 or not (x.shape[1].is_static and x.shape[2].is_static):
        raise ctx.malformed(f"input must be [N, C * prod(block_shape), L] with static C and L, got "
                            f"[{', '.join(map(str, x.shape))}]")
    k = int(np.prod(block))
    rows, n_cols = x.shape[1].value, x.shape[2].value
    if rows % k:
        raise ctx.malformed(f"input dim 1 ({rows}) is not a multiple of prod(block_shape) = {k}")
    c = rows // k
    blocks, out_pad = [], []
    for img, kk, s, d, lo, hi in zip(image, block, strides, dilations, pads[:nsp], pads[nsp:]):
        span = img + lo + hi - (d * (kk - 1) + 1)
        if span < 0:
            raise ctx.malformed(f"block_shape {block} (dilations {dilations}) does not fit image_shape {image} "
                                f"padded by {pads}")
        blocks.append(span // s + 1)
        out_pad.append(span % s)  # the rows after the last window: zeros
    if int(np.prod(blocks)) != n_cols:
        raise ctx.malformed(f"input has {n_cols} blocks, image_shape {image} gives {blocks} = {int(np.prod(blocks))}")
    check_constant_size(ctx, c * k * k, f"the one-hot weight of block_shape {block}")
    w = np.zeros((c * k, 1, k), np.float32)  # ONNX ConvTranspose [C_in, C_out/g, *block] layout
    for ci in range(c):
        w[ci * k + np.arange(k), 0, np.arange(k)] = 1.0
    w = w.reshape(c * k, 1, *block)
    cols = ops.reshape(x, [x.shape[0], IntImm(rows), *blocks])
    if nsp == 3:
        return ops_nn3d.conv_transpose3d(ctx, cols, block, c, strides, dilations, pads[:3], pads[3:], out_pad,
                                         None, weight=w)
    if nsp == 1:  # as 2-D with a height of 1
        cols, w = ops.unsqueeze(cols, [2]), w[:, :, None, :]
        strides, dilations, out_pad = [1] + strides, [1] + dilations, [0] + out_pad
        pads = [0, pads[0], 0, pads[1]]
    y = ops.conv_transpose2d(to_nhwc(cols), like(np.ascontiguousarray(w.transpose(0, 2, 3, 1)), x), None,
                             stride=tuple(strides), padding=(pads[0], pads[2], pads[1], pads[3]),
                             output_padding=tuple(out_pad), dilation=tuple(dilations), groups=c)
    y = to_nchw(y)
    return ops.squeeze(y, [2]) if nsp == 1 else y
