"""ONNX GridSample (4-D and 5-D; nearest / linear / cubic; zeros / border / reflection padding;
align_corners) and AffineGrid, as element-wise index arithmetic, gathers and a batched matmul;
RoiAlign on the IR's roi_align (ops/roi_align.py: its grid may follow the rois at run time).

GridSample reads X at positions the grid gives at run time, so it becomes gathers with computed
indices: X runs [N * D * H * W, C] (channels last, so each gather moves whole rows of C values),
every interpolation tap is one gather of those rows at `n * DHW + z * HW + y * W + x` and a
multiply by the tap's weight, and the taps are summed (nearest: 1 tap, linear: 2 per axis, cubic:
4 per axis). Coordinates follow onnx's reference (and torch's GridSampler): denormalise, for
nearest round half to even, move an out-of-range coordinate in (border: clamp to [0, L - 1];
reflection: reflect at the borders, -0.5 / L - 0.5 or 0 / L - 1 with align_corners), then each
tap's index is padded alone (zeros: weight 0; border: clamped; reflection: reflected). Index
arithmetic runs in float32 whatever X's float type. X's spatial dims must be static (they are
constants of the arithmetic); the batch and the grid's spatial dims may be dynamic.
AffineGrid's size may be run-time data: its spatial dims are then sizes the run binds.
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import IntImm, prod
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import produced_var
from . import _dynamic
from .ops_nn import float_input, like
from .registry import NodeContext, check_constant_size, onnx_op

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
_PADDINGS = ("zeros", "border", "reflection")
_CUBIC_A = -0.75  # Keys' coefficient, as torch and onnx use


def _f(v: float) -> Tensor:
    return constant(np.float32(v), dtype=DType.float32)


def _where(c: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return ops.where(c, a, b)


def _reflect(u: Tensor, lo: float, hi: float) -> Tensor:
    """u reflected at lo and hi until it lies in [lo, hi] (onnx's _gs_reflect, element-wise)."""
    span = hi - lo
    if span <= 0:  # a single pixel with align_corners: every coordinate reflects onto it
        return ops.mul(u, _f(0.0))
    below, above = ops.less(u, _f(lo)), ops.greater(u, _f(hi))
    dx = _where(below, ops.sub(_f(lo), u), ops.sub(u, _f(hi)))
    n = ops.floor(ops.div(dx, _f(span)))
    r = ops.sub(dx, ops.mul(n, _f(span)))
    even = ops.equal(ops.mod(n, _f(2.0)), _f(0.0))
    from_lo, from_hi = ops.add(_f(lo), r), ops.sub(_f(hi), r)
    return _where(below, _where(even, from_lo, from_hi), _where(above, _where(even, from_hi, from_lo), u))


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 for a fraction t in [0, 1)."""
    a = _CUBIC_A

    def near(x: Tensor) -> Tensor:  # |x| <= 1: ((a + 2) x - (a + 3)) x^2 + 1
        return ops.add(ops.mul(ops.sub(ops.mul(_f(a + 2), x), _f(a + 3)), ops.mul(x, x)), _f(1.0))

    def far(x: Tensor) -> Tensor:  # 1 < |x| < 2: ((a x - 5a) x + 8a) x - 4a
        return ops.sub(ops.mul(ops.add(ops.mul(ops.sub(ops.mul(_f(a), x), _f(5 * a)), x), _f(8 * a)), x), _f(4 * a))
    one_minus = ops.sub(_f(1.0), t)
    return [far(ops.add(t, _f(1.0))), near(t), near(one_minus), far(ops.add(one_minus, _f(1.0)))]


def _axis_taps(g: Tensor, length: int, mode: str, padding: str, align: bool) -> list[tuple[Tensor, Optional[Tensor]]]:
    """One spatial axis: (int64 index in [0, length), float32 weight or None for 1) per tap."""
    u = ops.mul(ops.add(g, _f(1.0)), _f((length - 1) / 2.0)) if align else \
        ops.div(ops.sub(ops.mul(ops.add(g, _f(1.0)), _f(float(length))), _f(1.0)), _f(2.0))
    if mode == "nearest":
        u = ops.round(u)  # half to even, as torch since 2.1 and onnx's reference
    lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
    return pixel_taps(u, length, mode, padding, lo, hi)


def pixel_taps(u: Tensor, length: int, mode: str, padding: str, lo: float = 0.0,
               hi: Optional[float] = None) -> list[tuple[Tensor, Optional[Tensor]]]:
    """The taps at pixel coordinate u (float32) along an axis of `length`; [lo, hi] is the range
    that border / reflection padding moves u into. DeformConv samples through this too."""
    hi = length - 1.0 if hi is None else hi
    if padding == "border":  # only coordinates outside [lo, hi] move (cubic taps see the difference)
        out = ops.logical_or(ops.less(u, _f(lo)), ops.greater(u, _f(hi)))
        u = _where(out, ops.clamp(u, 0.0, length - 1.0), u)
    elif padding == "reflection":
        u = _reflect(u, lo, hi)
    if mode == "nearest":
        taps: list[tuple[Tensor, Optional[Tensor]]] = [(u, None)]
    else:
        base = ops.floor(u)
        t = ops.sub(u, base)
        if mode == "linear":
            taps = [(base, ops.sub(_f(1.0), t)), (ops.add(base, _f(1.0)), t)]
        else:
            taps = [(ops.add(base, _f(float(k))), w) for k, w in zip((-1, 0, 1, 2), _cubic_weights(t))]
    res = []
    for i, w in taps:
        if padding == "zeros":
            inside = ops.logical_and(ops.greater_equal(i, _f(0.0)), ops.less_equal(i, _f(length - 1.0)))
            mask = ops.cast(inside, DType.float32)
            w = mask if w is None else ops.mul(w, mask)
        elif padding == "reflection":
            i = _reflect(i, lo, hi)
        # Clamped in every mode: the gather must stay in range (zeros' outside taps weigh 0).
        res.append((ops.cast(ops.clamp(i, 0.0, length - 1.0), DType.int64), w))
    return res


def batch_offsets(ctx: NodeContext, n, stride: int, rank: int) -> Tensor:
    """[N, 1, ...] int64 = n * stride: each batch's first row in the flattened X."""
    if n.is_static:
        return constant((np.arange(n.value, dtype=np.int64) * stride).reshape([-1] + [1] * (rank - 1)))
    table = constant((np.arange(n.upper, dtype=np.int64) * stride).reshape([-1] + [1] * (rank - 1)))
    return ops.slice(table, [0], [n], axes=[0])  # cut to the run-time batch


@onnx_op("GridSample", min_opset=16)
def _grid_sample(ctx: NodeContext):
    x = float_input(ctx, 0, "X")
    grid = float_input(ctx, 1, "grid")
    nsp = x.ndim - 2
    if nsp not in (2, 3):
        raise ctx.unsupported(f"X of rank {x.ndim}: aitgen's GridSample takes 4-D and 5-D inputs")
    if ctx.opset < 20 and nsp != 2:
        raise ctx.malformed(f"GridSample before opset 20 takes a 4-D X, got rank {x.ndim}")
    if grid.ndim != x.ndim or grid.shape[-1] != IntImm(nsp):
        raise ctx.malformed(f"grid must be [N, *out, {nsp}] for a rank-{x.ndim} X, got "
                            f"[{', '.join(map(str, grid.shape))}]")
    mode_attr = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = _MODES.get(mode_attr)
    padding = ctx.attr("padding_mode", "zeros")
    if mode is None or padding not in _PADDINGS:
        raise ctx.malformed(f"mode {mode_attr!r} / padding_mode {padding!r}: expected one of "
                            f"{sorted(_MODES)} / {list(_PADDINGS)}")
    if mode == "cubic" and nsp != 2:
        raise ctx.malformed("cubic mode takes a 4-D X only (the ONNX spec)")
    align = bool(ctx.attr("align_corners", 0))
    sizes = [x.shape[2 + i] for i in range(nsp)]
    if not all(s.is_static for s in sizes):
        raise ctx.unsupported(f"X's spatial dims {[str(s) for s in sizes]} must be static")
    dims = [s.value for s in sizes]
    g = grid if grid.dtype == DType.float32 else ops.cast(grid, DType.float32)
    # grid[..., 0] is the last axis (x, width), grid[..., nsp - 1] the first spatial one.
    comps = ops.split(g, [1] * nsp, axis=g.ndim - 1)
    per_axis = []
    for axis in range(nsp):
        comp = ops.squeeze(comps[nsp - 1 - axis], [g.ndim - 1])
        per_axis.append(_axis_taps(comp, dims[axis], mode, padding, align))
    strides = [int(np.prod(dims[a + 1:], dtype=np.int64)) for a in range(nsp)]
    table = ops.reshape(ops.permute(x, [0, *range(2, x.ndim), 1]), [x.shape[0] * prod(sizes), x.shape[1]])
    base = batch_offsets(ctx, x.shape[0], strides[0] * dims[0], g.ndim - 1)
    y = None
    for combo in itertools.product(*per_axis):
        idx, w = base, None
        for (i, wi), st in zip(combo, strides):
            idx = ops.add(idx, i if st == 1 else ops.mul(i, constant(np.int64(st))))
            w = wi if w is None else w if wi is None else ops.mul(w, wi)
        v = ops.gather(table, idx, axis=0)  # [N, *out, C]
        if w is not None:
            v = ops.mul(v, ops.unsqueeze(w if x.dtype == DType.float32 else ops.cast(w, x.dtype), [w.ndim]))
        y = v if y is None else ops.add(y, v)
    return ops.permute(y, [0, y.ndim - 1, *range(1, y.ndim - 1)])


@onnx_op("AffineGrid", min_opset=20)
def _affine_grid(ctx: NodeContext):
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1): one batched matmul with a constant base grid."""
    theta = float_input(ctx, 0, "theta")
    if _dynamic.run_time(ctx, 1):
        return _affine_grid_run_time(ctx, theta)
    size = ctx.ints(1, "size")
    if size is None:
        raise ctx.malformed("input 1 (size) is required")
    if len(size) not in (4, 5) or any(s < 1 for s in size):
        raise ctx.malformed(f"size must be [N, C, H, W] or [N, C, D, H, W] of positive ints, got {size}")
    nsp = len(size) - 2
    if theta.ndim != 3 or theta.shape[1] != IntImm(nsp) or theta.shape[2] != IntImm(nsp + 1):
        raise ctx.malformed(f"theta must be [N, {nsp}, {nsp + 1}] for size {size}, got "
                            f"[{', '.join(map(str, theta.shape))}]")
    if theta.shape[0].is_static and theta.shape[0].value != size[0]:
        raise ctx.malformed(f"theta's batch {theta.shape[0]} differs from size[0] = {size[0]}")
    align = bool(ctx.attr("align_corners", 0))
    spatial = size[2:]
    check_constant_size(ctx, int(np.prod(spatial, dtype=object)) * (nsp + 1), f"the base grid of size {size}")

    def ramp(n: int) -> np.ndarray:
        if align:
            return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        return (2.0 * np.arange(n) + 1.0) / n - 1.0
    mesh = np.meshgrid(*[ramp(n) for n in spatial], indexing="ij")  # first spatial axis first
    cols = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)]  # x, y[, z], 1
    base = np.stack(cols, axis=1).astype(np.float32)  # [prod(spatial), nsp + 1]
    y = ops.bmm(ops.unsqueeze(like(base, theta), [0]), theta, trans_b=True)  # [N, prod, nsp]
    return ops.reshape(y, [theta.shape[0], *spatial, nsp])


def _affine_grid_run_time(ctx: NodeContext, theta: Tensor) -> Tensor:
    """`size` fed as data: the spatial sizes are dims the run binds (N is checked against theta's,
    C is read and unused), each axis's ramp is computed from an iota of its run-time length, and
    grid = theta[..., -1] + sum_k theta[..., k] * ramp_k, broadcast over [N, (D,) H, W, nsp]."""
    k = prod(_dynamic.sizes_operand(ctx, 1, "size").shape).value
    if k not in (4, 5):
        raise ctx.malformed(f"size must hold 4 ([N, C, H, W]) or 5 ([N, C, D, H, W]) values, got {k}")
    nsp = k - 2
    if theta.ndim != 3 or theta.shape[1] != IntImm(nsp) or theta.shape[2] != IntImm(nsp + 1):
        raise ctx.malformed(f"theta must be [N, {nsp}, {nsp + 1}] for a size of {k} values, got "
                            f"[{', '.join(map(str, theta.shape))}]")
    spatial = [produced_var(f"{ctx.name}:{j}", _dynamic.value_bound(nsp)) for j in range(nsp)]
    ones, s64 = _dynamic.bind_values(ctx, 1, [theta.shape[0], produced_var(f"{ctx.name}:C", _dynamic.VALUE_ELEMENTS),
                                               *spatial], "size")
    align = bool(ctx.attr("align_corners", 0))
    cols = ops.split(theta, [1] * (nsp + 1), axis=2)  # [N, nsp, 1] each
    y = ops.reshape(cols[nsp], [theta.shape[0], *([1] * nsp), nsp])
    for a in range(nsp):  # spatial axis a carries grid component nsp - 1 - a (x is the last axis)
        i = _dynamic.iota(ones, spatial[a])
        n = _dynamic.entry(s64, 2 + a)
        one = constant(np.int64(1))
        # align_corners: -1 + 2 i / (n - 1) (0 when n = 1); else (2 i + 1) / n - 1; one rounding each
        num = ops.sub(ops.add(i, i), ops.sub(n, one)) if align else ops.sub(ops.add(ops.add(i, i), one), n)
        den = ops.maximum(ops.sub(n, one), one) if align else n
        r = ops.div(ops.cast(num, DType.float32), ops.cast(den, DType.float32))
        r = r if theta.dtype == DType.float32 else ops.cast(r, theta.dtype)
        r = ops.reshape(r, [1, *[spatial[a] if b == a else 1 for b in range(nsp)], 1])
        w = ops.reshape(cols[nsp - 1 - a], [theta.shape[0], *([1] * nsp), nsp])
        y = ops.add(y, ops.mul(r, w))
    return y


@onnx_op("RoiAlign", min_opset=10)
def _roi_align(ctx: NodeContext):
    x, rois, bi = ctx.input(0, "X"), ctx.input(1, "rois"), ctx.input(2, "batch_indices")
    if not x.dtype.is_float or rois.dtype != x.dtype:
        raise ctx.unsupported(f"RoiAlign over {x.dtype} with {rois.dtype} rois: float inputs of one dtype")
    # opset 16 added coordinate_transformation_mode, defaulting to half_pixel; before it, the op
    # behaved as output_half_pixel
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    mode = ctx.attr("mode", "avg")
    if ctm not in ("half_pixel", "output_half_pixel") or mode not in ("avg", "max"):
        raise ctx.malformed(f"coordinate_transformation_mode '{ctm}' / mode '{mode}' is not supported by ONNX")
    attrs = ops.RoiAlignAttrs(int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1)),
                              int(ctx.attr("sampling_ratio", 0)), float(ctx.attr("spatial_scale", 1.0)), mode,
                              ctm == "half_pixel")
    return ops.roi_align(x, rois, ops.cast(bi, "int64") if bi.dtype != DType.int64 else bi, attrs, name=ctx.name)
