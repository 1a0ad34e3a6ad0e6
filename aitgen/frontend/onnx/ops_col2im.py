"""ONNX Col2Im (1-D, 2-D and 3-D blocks) as a transposed convolution with one-hot weights.

Col2Im adds every column block back at its window's place in the (padded) image: that is a
transposed convolution of the columns, read as a [N, C * K, *blocks] image (K = prod(block_shape)),
with C groups of K input channels each and a constant weight that is 1 at tap k for input channel
c * K + k. The strides, dilations and pads are Col2Im's own; a remainder of the image that no
window reaches becomes the transposed conv's output_padding (zeros, as Col2Im leaves them). The
transposed conv runs through oneDNN (3-D blocks: ops_nn3d's depth slices).

With image_shape or block_shape fed as run-time data, the number of taps and the output's dims
are the run's: _col2im_run_time adds the elements with one scatter_nd at positions computed as
data instead.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import IntImm, IntVar
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import bind_dims
from . import _dynamic, ops_nn3d
from .ops_nn import float_input, like, to_nchw, to_nhwc
from .registry import NodeContext, check_constant_size, onnx_op


def _ints_attr(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    v = ctx.attr(name, [default] * n)
    if len(v) != n or not all(isinstance(a, int) for a in v):
        raise ctx.malformed(f"attribute '{name}' must hold {n} ints, got {v!r}")
    return [int(a) for a in v]


def _window(ctx: NodeContext, x: Tensor, nsp: int) -> tuple[list[int], list[int], list[int]]:
    """The strides, dilations and pads of nsp spatial dims, checked, and x checked for the
    [N, C * prod(block_shape), L] layout with static C and L (both paths build from those)."""
    strides, dilations = _ints_attr(ctx, "strides", nsp, 1), _ints_attr(ctx, "dilations", nsp, 1)
    pads = _ints_attr(ctx, "pads", 2 * nsp, 0)
    if any(v < 1 for v in strides + dilations) or any(p < 0 for p in pads):
        raise ctx.malformed(f"strides {strides} and dilations {dilations} must be >= 1, pads {pads} >= 0")
    if x.ndim != 3 or not (x.shape[1].is_static and x.shape[2].is_static):
        raise ctx.malformed(f"input must be [N, C * prod(block_shape), L] with static C and L, got "
                            f"[{', '.join(map(str, x.shape))}]")
    return strides, dilations, pads


@onnx_op("Col2Im", min_opset=18)
def _col2im(ctx: NodeContext):
    x = float_input(ctx, 0, "input")
    if _dynamic.run_time(ctx, 1) or _dynamic.run_time(ctx, 2):
        return _col2im_run_time(ctx, x)
    image, block = ctx.ints(1, "image_shape"), ctx.ints(2, "block_shape")
    if image is None or block is None:
        raise ctx.malformed("inputs 1 (image_shape) and 2 (block_shape) are required")
    nsp = len(image)
    if nsp not in (1, 2, 3) or len(block) != nsp:
        raise ctx.unsupported(f"image_shape {image} / block_shape {block}: aitgen's Col2Im takes 1 to 3 "
                              "spatial dims, the same number in both")
    if any(v < 1 for v in image + block):
        raise ctx.malformed(f"image_shape {image} and block_shape {block} must be positive")
    strides, dilations, pads = _window(ctx, x, nsp)
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


def _shape_operand(ctx: NodeContext, i: int, what: str) -> Tensor:
    """Input i (constant or run-time) as int64 [k]."""
    t = _dynamic.sizes_operand(ctx, i, what) if _dynamic.run_time(ctx, i) else ctx.input(i, what)
    if t.ndim != 1 or not t.shape[0].is_static or not t.dtype.is_int:
        raise ctx.malformed(f"input {i} ({what}) must be a 1-D integer tensor, got "
                            f"{t.dtype}[{', '.join(map(str, t.shape))}]")
    return t if t.dtype is DType.int64 else ops.cast(t, DType.int64)


def _col2im_run_time(ctx: NodeContext, x: Tensor) -> Tensor:
    """image_shape / block_shape fed as data: the output's C and spatial dims are sizes the run
    binds, and each input element (q, l) is added at the output position its row q (channel c,
    tap k) and column l (block b) reach, pos = b * stride + k * dilation - pad, by one scatter_nd
    (reduction add) whose index tuples are computed as data; elements that land in the padding are
    added as 0 at position 0. The run checks what the import-time path checks: blocks >= 1,
    C * prod(block_shape) = the input's rows, prod(blocks) = its columns, each a RuntimeInputError
    naming the node (bounds of produced sizes, or a reshape that does not fit)."""
    img, blk = _shape_operand(ctx, 1, "image_shape"), _shape_operand(ctx, 2, "block_shape")
    nsp = img.shape[0].value
    if nsp not in (1, 2, 3) or blk.shape[0].value != nsp:
        raise ctx.unsupported(f"image_shape of {nsp} and block_shape of {blk.shape[0]} values: aitgen's Col2Im "
                              "takes 1 to 3 spatial dims, the same number in both")
    strides, dilations, pads = _window(ctx, x, nsp)
    rows, n_cols = x.shape[1].value, x.shape[2].value
    name = ctx.name

    def sizes(tag: str, lb: int, ubs: list) -> list:
        return [IntVar(f"{name}:{tag}{j}", lb, max(ub, lb), produced=True) for j, ub in enumerate(ubs)]

    def c64(v) -> Tensor:
        return constant(np.array(v, np.int64))
    # block sizes >= 1 before anything divides by them
    blk = bind_dims(blk, [blk], "values", sizes("block", 1, [rows] * nsp), name=name)
    bs = [_dynamic.entry(blk, j) for j in range(nsp)]
    k_val = bs[0]
    for b in bs[1:]:
        k_val = ops.mul(k_val, b)
    c_val = ops.div(c64(rows), k_val)
    # an image is at most what the blocks can reach: (L - 1) s + d (rows - 1) + 1 + (s - 1) - pads
    h_ub = [min(_dynamic.value_bound(nsp), n_cols * s + d * (rows - 1) - lo - hi)
            for s, d, lo, hi in zip(strides, dilations, pads[:nsp], pads[nsp:])]
    cvar, kvar = IntVar(f"{name}:C", 1, rows, produced=True), IntVar(f"{name}:K", 1, rows, produced=True)
    hs = sizes("image", 1, h_ub)
    zero = bind_dims(constant(np.zeros([1] * (nsp + 2), x.dtype.np)), [ops.concat([ops.reshape(c_val, [1]), img], 0)],
                     "values", [cvar, *hs], shape=[1] * (nsp + 2), name=name)
    # the span of each axis the windows slide over, >= 0 (the block fits the padded image)
    span = ops.concat([ops.reshape(ops.sub(ops.add(_dynamic.entry(img, j), c64(lo + hi)),
                                          ops.add(ops.mul(ops.sub(bs[j], c64(1)), c64(d)), c64(1))), [1])
                       for j, (d, lo, hi) in enumerate(zip(dilations, pads[:nsp], pads[nsp:]))], 0)
    span = bind_dims(span, [span], "values", sizes("span", 0, [u + lo + hi for u, lo, hi in zip(h_ub, pads[:nsp],
                                                                                               pads[nsp:])]), name=name)
    nb = [ops.add(ops.div(_dynamic.entry(span, j), c64(s)), c64(1)) for j, s in enumerate(strides)]
    # C * K = rows, then prod(blocks) = L: x viewed under both (allowzero: a 0 is no copy)
    x1 = bind_dims(x, [ops.concat([c64([-1]), ops.reshape(c_val, [1]), ops.reshape(k_val, [1]), c64([n_cols])], 0)],
                   "reshape", [x.shape[0], cvar, kvar, IntImm(n_cols)], shape=[x.shape[0], cvar, kvar, IntImm(n_cols)],
                   known=list(x.shape), allowzero=True, name=name)
    bvars = sizes("blocks", 1, [n_cols] * nsp)
    x2 = bind_dims(x1, [ops.concat([c64([-1]), ops.reshape(c_val, [1]), ops.reshape(k_val, [1]),
                                    *[ops.reshape(b, [1]) for b in nb]], 0)],
                   "reshape", [x.shape[0], cvar, kvar, *bvars], shape=[x.shape[0], cvar, kvar, *bvars],
                   known=list(x1.shape), allowzero=True, name=name)
    x2 = _dynamic.view(x2, list(x.shape), name)
    # per element (q, l): channel c = q // K, tap k = q % K (row-major over block_shape), block
    # b = l (row-major over the blocks), each unravelled with the run's sizes
    q, l = c64(np.arange(rows).reshape(rows, 1)), c64(np.arange(n_cols).reshape(1, n_cols))
    c_idx, k = ops.div(q, k_val), ops.mod(q, k_val)
    taps, blocks = [None] * nsp, [None] * nsp
    for j in reversed(range(nsp)):
        taps[j], k = ops.mod(k, bs[j]), ops.div(k, bs[j])
        blocks[j], l = ops.mod(l, nb[j]), ops.div(l, nb[j])
    valid, pos = None, []
    for j in range(nsp):
        p = ops.sub(ops.add(ops.mul(blocks[j], c64(strides[j])), ops.mul(taps[j], c64(dilations[j]))), c64(pads[j]))
        inside = ops.logical_and(ops.greater_equal(p, c64(0)), ops.less(p, _dynamic.entry(img, j)))
        valid = inside if valid is None else ops.logical_and(valid, inside)
        pos.append(p)
    cols = [ops.expand(c_idx, [IntImm(rows), IntImm(n_cols)])] + [ops.where(valid, p, c64(0)) for p in pos]
    idx = ops.concat([ops.unsqueeze(t, [2]) for t in cols], 2)                   # [rows, L, 1 + nsp]
    upd = ops.permute(x2, [1, 2, 0])                                           # [rows, L, N]
    upd = ops.where(ops.unsqueeze(valid, [2]), upd, constant(np.zeros((), x.dtype.np)))
    data = ops.expand(zero, [cvar, *hs, x.shape[0]])                           # [C, *image, N]
    y = ops.scatter_nd(data, idx, upd, reduction="add", name=name)
    return ops.permute(y, [nsp + 1, *range(nsp + 1)])
