"""roi_align: ONNX RoiAlign (opset 10/16), regions of interest pooled to a fixed grid.

x [N, C, H, W] (NCHW, as ONNX has it: the op reads x directly, no layout change), rois [R, 4]
(x1, y1, x2, y2 in x's dtype), batch_indices [R] int64 -> [R, C, out_h, out_w]. Each output bin
averages (or, mode "max", takes the largest of) grid_h x grid_w bilinear samples; the grid is
sampling_ratio per side, or (sampling_ratio 0) ceil(roi size / bins), which depends on the rois at
run time. Sample and tap rules are onnx's reference (and onnxruntime's): a sample outside
[-1, H] x [-1, W] counts 0, others clamp to the image; "max" takes the largest weighted tap.
A batch index outside [0, N) is a bad run-time input (RuntimeInputError; the CPU kernel refuses
the run naming the op).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import DTypeError, RuntimeInputError
from ..ir.dims import IntImm
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .registry import Category, _desc, check, make_op1, register

__all__ = ["RoiAlignAttrs", "roi_align"]


@dataclasses.dataclass(frozen=True)
class RoiAlignAttrs:
    out_h: int
    out_w: int
    sampling_ratio: int = 0
    spatial_scale: float = 1.0
    mode: str = "avg"         # or "max"
    half_pixel: bool = True   # coordinate_transformation_mode half_pixel (else output_half_pixel)


def _infer(inputs, a: RoiAlignAttrs):
    x, rois, bi = inputs
    check(x.dtype.is_float and rois.dtype == x.dtype, f"x and rois must share a float dtype: {_desc(x)}, {_desc(rois)}",
          DTypeError)
    check(bi.dtype == DType.int64, f"batch_indices must be int64, got {_desc(bi)}", DTypeError)
    check(x.ndim == 4 and rois.ndim == 2 and rois.shape[1] == IntImm(4) and bi.ndim == 1 and bi.shape[0] == rois.shape[0],
          f"wants x [N, C, H, W], rois [R, 4], batch_indices [R]: {_desc(x)}, {_desc(rois)}, {_desc(bi)}")
    check(a.mode in ("avg", "max") and a.out_h > 0 and a.out_w > 0 and a.sampling_ratio >= 0
          and math.isfinite(a.spatial_scale), f"bad attributes {a}")  # the scale is a C++ literal
    return [((rois.shape[0], x.shape[1], IntImm(a.out_h), IntImm(a.out_w)), x.dtype)]


def _ref(args, a: RoiAlignAttrs, ctx):
    x, rois, bi = args
    n, c, h, w = x.shape
    if ((bi < 0) | (bi >= n)).any():
        raise RuntimeInputError(f"roi_align: a batch index is out of range for {n} images: {bi.tolist()}")
    out = np.zeros((len(bi), c, a.out_h, a.out_w), np.float64)
    off = 0.5 if a.half_pixel else 0.0
    for r in range(len(bi)):
        x1, y1, x2, y2 = (float(v) * a.spatial_scale - off for v in rois[r])
        rw, rh = x2 - x1, y2 - y1
        if not a.half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / a.out_h, rw / a.out_w
        gh = a.sampling_ratio or int(math.ceil(rh / a.out_h))
        gw = a.sampling_ratio or int(math.ceil(rw / a.out_w))
        img = x[bi[r]].astype(np.float64).reshape(c, h * w)
        for ph in range(a.out_h):
            for pw in range(a.out_w):
                vals = []
                for iy in range(gh):
                    for ix in range(gw):
                        y = y1 + ph * bh + (iy + 0.5) * bh / gh
                        xx = x1 + pw * bw + (ix + 0.5) * bw / gw
                        vals.append(_taps(img, y, xx, h, w))
                if a.mode == "avg":
                    out[r, :, ph, pw] = sum(t.sum(0) for t in vals) / max(gh * gw, 1) if vals else 0.0
                elif vals:
                    out[r, :, ph, pw] = np.max([t.max(0) for t in vals], axis=0)
    return [out.astype(x.dtype)]


def _taps(img: np.ndarray, y: float, x: float, h: int, w: int) -> np.ndarray:
    """The four weighted taps [4, C] of one bilinear sample (zeros outside the extended image)."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return np.zeros((4, img.shape[0]))
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1.0 - ly, 1.0 - lx
    return np.stack([hy * hx * img[:, yl * w + xl], hy * lx * img[:, yl * w + xh],
                     ly * hx * img[:, yh * w + xl], ly * lx * img[:, yh * w + xh]])


register(OpKind.ROI_ALIGN, Category.POOL, RoiAlignAttrs, _infer, _ref, num_inputs=(3, 3))


def roi_align(x: Tensor, rois: Tensor, batch_indices: Tensor, attrs: RoiAlignAttrs, name=None) -> Tensor:
    """ONNX RoiAlign over NCHW x: [R, C, out_h, out_w]."""
    return make_op1(OpKind.ROI_ALIGN, [x, rois, batch_indices], attrs, name)
