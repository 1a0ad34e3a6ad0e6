"""ONNX DFT (opset 17 and 20: forward, inverse, onesided, the inverse of a onesided spectrum) and
STFT, as one GEMM with a constant matrix.

A DFT along one axis is linear in the input, so with the axis moved next to the complex dim and
both flattened to [..., n * c] (c = 1 real, 2 interleaved re/im), it is x @ M with M of shape
[n * c, m * co] computed at import in float64: the twiddles cos/sin(2 pi j k / L), the 1 / L of
the inverse, the truncation or zero padding of the input to dft_length, the onesided cut, and for
the inverse of a onesided spectrum (numpy's irfft) the Hermitian weights 1 / 2 / 1. The GEMM runs
through oneDNN like any other; O(n * m) work instead of an FFT's O(n log n), which is what the
short transforms of audio front ends need. A matrix above registry.MAX_CONSTANT entries is refused.

STFT gathers the frames with a constant index table (frames may overlap), multiplies by the
window (folded into M when the window is a constant) and applies the same matrix.

A DFT axis or dft_length, STFT frame_step or frame_length, or a MelWeightMatrix scalar fed as
run-time data takes _signal_rt.py's path instead: the sizes they set are bound by the run.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import IntImm
from ...ir.tensor import Tensor, constant
from . import _dynamic, _signal_rt
from ._signal_rt import dft_matrix
from .ops_nn import float_input, like, norm_axis
from .registry import MAX_CONSTANT, NodeContext, check_constant_size, onnx_op


def _check_size(ctx: NodeContext, rows: int, cols: int) -> None:
    if rows * cols > MAX_CONSTANT:
        raise ctx.unsupported(f"a transform of {rows} x {cols} as a dense matrix ({rows * cols} entries) is over "
                              f"aitgen's limit of {MAX_CONSTANT}: aitgen has no FFT kernel")


def _scalar(ctx: NodeContext, i: int, what: str) -> Optional[int]:
    v = ctx.ints(i, what)
    if v is None:
        return None
    if len(v) != 1:
        raise ctx.malformed(f"input {i} ({what}) must be a scalar, got {len(v)} values")
    return v[0]


def _complex_dim(ctx: NodeContext, x: Tensor, what: str) -> int:
    last = x.shape[-1] if x.ndim else None
    if last is None or not last.is_static or last.value not in (1, 2):
        raise ctx.malformed(f"{what}'s last dim must be 1 (real) or 2 (complex), got "
                            f"[{', '.join(map(str, x.shape))}]")
    return last.value


@onnx_op("DFT", min_opset=17)
def _dft(ctx: NodeContext):
    x = float_input(ctx, 0, "input")
    if x.ndim < 3:
        raise ctx.malformed(f"input must be [batch, ..., n, 1 or 2], got rank {x.ndim}")
    c = _complex_dim(ctx, x, "input")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    axis_rt = ctx.opset >= 20 and _dynamic.run_time(ctx, 2)
    if axis_rt or _dynamic.run_time(ctx, 1):  # the axis or the length fed as data (_signal_rt.py)
        if onesided and not inverse and c == 2:
            raise ctx.malformed("onesided needs a real input (last dim 1)")
        axis = None  # None: the run gives it
        if not axis_rt:
            a = _scalar(ctx, 2, "axis") if ctx.opset >= 20 else ctx.attr("axis", 1)
            axis = norm_axis(ctx, -2 if a is None else a, x.ndim)
            if axis == x.ndim - 1:
                raise ctx.malformed("axis cannot be the last (complex) dim")
        return _signal_rt.dft(ctx, x, c, axis, inverse, onesided)
    if ctx.opset >= 20:
        axis = _scalar(ctx, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = ctx.attr("axis", 1)
    axis = norm_axis(ctx, axis, x.ndim)
    if axis == x.ndim - 1:
        raise ctx.malformed("axis cannot be the last (complex) dim")
    n_dim = x.shape[axis]
    if not n_dim.is_static:
        raise ctx.unsupported(f"the transformed dim {n_dim} must be static")
    n = n_dim.value
    length = _scalar(ctx, 1, "dft_length")
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    if length < 1:
        raise ctx.malformed(f"dft_length must be >= 1, got {length}")
    if onesided and not inverse and c == 2:
        raise ctx.malformed("onesided needs a real input (last dim 1)")
    _check_size(ctx, n * c, length * 2)
    mat, m, co = dft_matrix(n, c, length, inverse, onesided)
    # axis next to the complex dim, flattened with it: [..., n * c] @ M -> [..., m, co]
    perm = [d for d in range(x.ndim - 1) if d != axis] + [axis, x.ndim - 1]
    xt = ops.permute(x, perm) if perm != list(range(x.ndim)) else x
    lead = list(xt.shape[:-2])
    y = ops.gemm(ops.reshape(xt, [*lead, IntImm(n * c)]), like(mat, x))
    y = ops.reshape(y, [*lead, m, co])
    inv = [perm.index(d) for d in range(x.ndim)]
    return ops.permute(y, inv) if inv != list(range(x.ndim)) else y


@onnx_op("STFT", min_opset=17)
def _stft(ctx: NodeContext):
    x = float_input(ctx, 0, "signal")
    if x.ndim != 3:
        raise ctx.malformed(f"signal must be [batch, length, 1 or 2], got rank {x.ndim}")
    c = _complex_dim(ctx, x, "signal")
    if not x.shape[1].is_static:
        raise ctx.unsupported(f"the signal length {x.shape[1]} must be static (it sets the frame count)")
    size = x.shape[1].value
    if _dynamic.run_time(ctx, 1) or (ctx.has_input(3) and _dynamic.run_time(ctx, 3)):
        onesided = bool(ctx.attr("onesided", 1))
        if onesided and c == 2:
            raise ctx.malformed("onesided needs a real signal (last dim 1)")
        return _signal_rt.stft(ctx, x, c, as_window(ctx, x), onesided)
    step = _scalar(ctx, 1, "frame_step")
    if step is None or step < 1:
        raise ctx.malformed(f"frame_step must be given and >= 1, got {step}")
    window: Optional[Tensor] = as_window(ctx, x)
    frame = _scalar(ctx, 3, "frame_length")
    if window is not None:
        wl = window.shape[0].value
        if frame is not None and frame != wl:
            raise ctx.malformed(f"frame_length {frame} differs from the window's length {wl}")
        frame = wl
    frame = size if frame is None else frame
    if not 1 <= frame <= size:
        raise ctx.malformed(f"frame_length {frame} must be in [1, signal length {size}]")
    onesided = bool(ctx.attr("onesided", 1))
    if onesided and c == 2:
        raise ctx.malformed("onesided needs a real signal (last dim 1)")
    frames = 1 + (size - frame) // step
    _check_size(ctx, frame * c, frame * 2)
    check_constant_size(ctx, frames * frame, "the frame index table")
    mat, m, co = dft_matrix(frame, c, frame, False, onesided)
    idx = np.arange(frames, dtype=np.int64)[:, None] * step + np.arange(frame, dtype=np.int64)[None, :]
    y = ops.gather(x, constant(idx), axis=1)  # [batch, frames, frame, c]
    w_val = ctx.const(2)
    if w_val is not None:  # the window scales M's rows (each input point's row block)
        mat = mat * np.repeat(w_val.astype(np.float64), c)[:, None]
    elif window is not None:
        y = ops.mul(y, ops.reshape(window, [frame, 1]))
    y = ops.gemm(ops.reshape(y, [x.shape[0], IntImm(frames), IntImm(frame * c)]), like(mat, x))
    return ops.reshape(y, [x.shape[0], IntImm(frames), m, co])


def as_window(ctx: NodeContext, x: Tensor) -> Optional[Tensor]:
    if not ctx.has_input(2):
        return None
    w = ctx.input(2, "window")
    if w.ndim != 1 or not w.shape[0].is_static:
        raise ctx.malformed(f"window must be 1-D and static, got [{', '.join(map(str, w.shape))}]")
    if w.dtype != x.dtype:
        raise ctx.malformed(f"window has dtype {w.dtype}, signal has {x.dtype}")
    return w


@onnx_op("MelWeightMatrix", min_opset=17)
def _mel_weight_matrix(ctx: NodeContext):
    """[dft_length // 2 + 1, num_mel_bins] triangular filters: every input is a scalar, so the
    whole matrix is computed here (onnx's reference, step for step) and is an import-time value."""
    from ._proto import elem_dtype
    if any(_dynamic.run_time(ctx, i) for i in range(5)):  # scalars fed as data (_signal_rt.py)
        dtype = elem_dtype(ctx.attr("output_datatype", 1), f"{ctx.label}: attribute 'output_datatype'")
        return _signal_rt.mel_weight_matrix(ctx, dtype)
    bins, dft_len, rate = (_scalar(ctx, i, w) for i, w in enumerate(("num_mel_bins", "dft_length", "sample_rate")))
    lo_hz, hi_hz = (ctx.require_const(i, w) for i, w in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")))
    if bins is None or dft_len is None or rate is None or lo_hz.size != 1 or hi_hz.size != 1:
        raise ctx.malformed("num_mel_bins, dft_length, sample_rate and the two edges must be scalars")
    lo, hi = float(lo_hz.reshape(())), float(hi_hz.reshape(()))
    if bins < 1 or dft_len < 1 or rate < 1 or not 0.0 <= lo < hi:
        raise ctx.malformed(f"num_mel_bins {bins}, dft_length {dft_len}, sample_rate {rate} must be >= 1 and "
                            f"0 <= lower_edge_hertz {lo} < upper_edge_hertz {hi}")
    dtype = elem_dtype(ctx.attr("output_datatype", 1), f"{ctx.label}: attribute 'output_datatype'")
    n_spec = dft_len // 2 + 1
    check_constant_size(ctx, n_spec * bins, "the mel weight matrix")
    low_mel, high_mel = (2595 * np.log1p(f / 700) / np.log(10) for f in (lo, hi))
    edges = np.arange(bins + 2) * ((high_mel - low_mel) / (bins + 2)) + low_mel
    edges = ((dft_len + 1) * (700 * np.expm1(edges / 2595 * np.log(10)))) // rate
    edges = edges.astype(np.int64)
    if edges.max() >= n_spec:
        raise ctx.malformed(f"upper_edge_hertz {hi} reaches past the {n_spec} spectrogram bins of dft_length "
                            f"{dft_len} at sample_rate {rate}")
    out = np.zeros((n_spec, bins))
    for i in range(bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1.0
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / float(center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / float(right - center)
    return ctx.constant_value(out.astype(dtype.np))
