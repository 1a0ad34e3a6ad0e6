"""DFT, STFT and MelWeightMatrix whose axis, lengths, step or scalars arrive as run-time data
(issue 15), beside ops_signal.py's import-time matrices.

The transformed axis is one of x's (static) dims, chosen by the run: x is viewed as
[outer, n, inner, c] for that axis (the BIND_DIMS "axis" rule, then a reshape that splits the
complex dim off), the DFT matrix is computed as data from iotas of the run-time n and m (the same
entries as dft_matrix: twiddles of (j k mod L) / L, the 1 / L of the inverse, the cut
to dft_length, the onesided cut, irfft's Hermitian weights), one GEMM applies it, and the result
is viewed back: under x's shape when the length along the axis is kept, else under dims the run
binds (x's with the axis's replaced by m). Planned buffers take the largest of every axis's
[outer, n, inner], so x must be static; the matrix at its bounds obeys registry.MAX_CONSTANT.

STFT's frame count (and, without a window, its frame length) are sizes the run binds; the frames
are gathered at indices computed from iotas of them. MelWeightMatrix computes every entry as data
(onnx's reference formula) over iotas of the two sizes the run binds. Every value the import-time
path checks is checked by the run, a RuntimeInputError naming the node (a produced size's bounds).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import IntImm, IntVar
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import bind_dims, produced_var
from . import _dynamic
from .registry import MAX_CONSTANT, NodeContext

I64, F32 = DType.int64, DType.float32


def dft_matrix(n: int, c: int, length: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, int, int]:
    """(M [n * c, m * co], m, co): the DFT of length `length` of n input points (c components each)."""
    irfft = inverse and onesided
    m = length // 2 + 1 if onesided and not inverse else length
    co = 1 if irfft else 2
    used = min(n, length // 2 + 1 if irfft else length)  # input points past these are cut off
    j = np.arange(used, dtype=np.float64)[:, None]
    k = np.arange(m, dtype=np.float64)[None, :]
    theta = 2.0 * np.pi * ((j * k) % length) / length  # the modulo keeps the angle small and exact
    cos, sin = np.cos(theta), np.sin(theta)
    mat = np.zeros((n, c, m, co), np.float64)
    if irfft:
        # y[t] = (1/L) sum_k w_k (Re X_k cos - Im X_k sin), w = 1 for k = 0 and k = L/2, else 2.
        w = np.full((used, 1), 2.0)
        w[0] = 1.0
        if length % 2 == 0 and used > length // 2:
            w[length // 2] = 1.0
        mat[:used, 0, :, 0] = w * cos / length
        if c == 2:
            mat[:used, 1, :, 0] = -w * sin / length
    else:
        sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
        # (a + ib)(cos + i sign sin) = (a cos - b sign sin) + i (a sign sin + b cos)
        mat[:used, 0, :, 0] = cos * scale
        mat[:used, 0, :, 1] = sign * sin * scale
        if c == 2:
            mat[:used, 1, :, 0] = -sign * sin * scale
            mat[:used, 1, :, 1] = cos * scale
    return mat.reshape(n * c, m * co), m, co


def _i64(v) -> Tensor:
    return constant(np.array(v, np.int64))


def scalar_operand(ctx: NodeContext, i: int, what: str) -> Tensor:
    """Input i, one integer fed as data, as int64 [1]."""
    t = _dynamic.sizes_operand(ctx, i, what)
    if math.prod(d.value for d in t.shape) != 1:
        raise ctx.malformed(f"input {i} ({what}) must be a scalar, got shape {[str(d) for d in t.shape]}")
    return ops.reshape(t if t.dtype is I64 else ops.cast(t, I64), [1])


def int_scalar(ctx: NodeContext, i: int, what: str) -> Tensor:
    """Input i, one integer (constant or data), as int64 [1]."""
    if _dynamic.run_time(ctx, i):
        return scalar_operand(ctx, i, what)
    v = ctx.ints(i, what)
    if len(v) != 1:
        raise ctx.malformed(f"input {i} ({what}) must be a scalar, got {len(v)} values")
    return _i64(v)


def checked_axis(ctx: NodeContext, a: Tensor, r: int) -> Tensor:
    """The axis normalised to [0, r - 2] (not the complex dim), as data; a run giving another
    one is a RuntimeInputError naming the node (the bound of a produced size)."""
    a = ops.where(ops.less(a, _i64(0)), ops.add(a, _i64(r)), a)
    return bind_dims(a, [a], "values", [IntVar(f"{ctx.name}:axis", 0, r - 2, produced=True)], name=ctx.name)


def _twiddles(j: Tensor, k: Tensor, length: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin of 2 pi (j k mod L) / L, [n, m] float32; the modulo keeps the angle exact, and
    float64 keeps sin(pi) and the like at ~1e-16 (float32 would leave ~1e-7 of each term where
    the exact transform cancels to 0, as the import-time matrix does not)."""
    f64 = DType.float64
    jk = ops.mod(ops.mul(ops.reshape(j, [j.shape[0], 1]), ops.reshape(k, [1, k.shape[0]])), length)
    theta = ops.mul(ops.div(ops.cast(jk, f64), ops.cast(length, f64)), constant(np.float64(2.0 * np.pi), dtype=f64))
    return ops.cast(ops.cos(theta), F32), ops.cast(ops.sin(theta), F32)


def dft_matrix_data(j: Tensor, k: Tensor, length: Tensor, c: int, inverse: bool, onesided: bool) -> Tensor:
    """dft_matrix's [n * c, m * co] as data: j = iota(n), k = iota(m), L an int64 [1]."""
    irfft = inverse and onesided
    n, m = j.shape[0], k.shape[0]
    cos, sin = _twiddles(j, k, length)
    jc = ops.reshape(j, [n, 1])
    # input points past L (or L // 2 + 1 for irfft) are cut off
    used = ops.add(ops.div(length, _i64(2)), _i64(1)) if irfft else length
    keep = ops.cast(ops.less(jc, used), F32)
    inv_len = ops.div(constant(np.float32(1.0)), ops.cast(length, F32))
    if irfft:
        # w = 1 for j = 0 and j = L / 2, else 2 (the Hermitian pairs), times 1 / L
        ends = ops.logical_or(ops.equal(jc, _i64(0)), ops.equal(ops.add(jc, jc), length))
        w = ops.mul(ops.where(ends, constant(np.float32(1.0)), constant(np.float32(2.0))), inv_len)
        w = ops.mul(w, keep)
        blocks = [[ops.mul(cos, w)], [ops.neg(ops.mul(sin, w))]][:c]
    else:
        scale = ops.mul(keep, inv_len) if inverse else keep
        sign = 1.0 if inverse else -1.0
        re, im = ops.mul(cos, scale), ops.mul(sin, ops.mul(scale, constant(np.float32(sign))))
        # (a + ib)(cos + i sign sin) = (a cos - b sign sin) + i (a sign sin + b cos)
        blocks = [[re, im], [ops.neg(im), re]][:c]
    co = len(blocks[0])
    rows = [ops.concat([ops.reshape(b, [n, 1, m, 1]) for b in row], 3) for row in blocks]
    mat = ops.concat(rows, 1) if c > 1 else rows[0]          # [n, c, m, co]
    return ops.reshape(mat, [n * c, m * co])


def _budget(dims: list[int], co: int, cap: int) -> int:
    """The largest m (at most cap) whose output [max(d_0, m), ..., max(d_r, m), co], the shape
    buffers are planned at, holds at most VALUE_ELEMENTS; at least 1."""
    lo, hi = 1, max(cap, 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if math.prod(max(d, mid) for d in dims) * co <= _dynamic.VALUE_ELEMENTS:
            lo = mid
        else:
            hi = mid - 1
    return lo


def dft(ctx: NodeContext, x: Tensor, c: int, axis: Optional[int], inverse: bool, onesided: bool) -> Tensor:
    """DFT of x along `axis` (None: input 2, fed as data), dft_length from input 1 (constant,
    fed as data, or omitted)."""
    if not all(d.is_static for d in x.shape):
        raise ctx.unsupported(f"a DFT whose axis or dft_length is run-time data needs static input dims, got "
                              f"[{', '.join(map(str, x.shape))}]")
    dims, r = [d.value for d in x.shape], x.ndim
    a = scalar_operand(ctx, 2, "axis") if axis is None else _i64([axis])
    a = checked_axis(ctx, a, r)
    irfft = inverse and onesided
    cand = range(r - 1)
    outer_ub = max(math.prod(dims[:b]) for b in cand)
    n_ub = max(max(dims[b] for b in cand), 1)
    inner_ub = max(math.prod(dims[b + 1:-1]) for b in cand)
    outer, n, inner = (produced_var(f"{ctx.name}:{w}", ub) for w, ub in
                       (("outer", outer_ub), ("n", n_ub), ("inner", inner_ub * c)))
    xv = bind_dims(x, [a], "axis", [outer, n, inner], shape=[outer, n, inner], known=list(x.shape), name=ctx.name)
    # Split the complex dim off inner: [outer, n, inner / c, c]. outer and n are bound again to
    # the values they already have (a binding writes its slots; equal values, no conflict).
    inner_c = produced_var(f"{ctx.name}:inner_c", inner_ub)
    xv = bind_dims(xv, [_i64([0, 0, -1, c])], "reshape", [outer, n, inner_c, IntImm(c)],
                   shape=[outer, n, inner_c, IntImm(c)], known=[outer, n, inner], name=ctx.name)
    n_val = ops.gather(_i64(dims[:-1]), a, 0)                           # the axis's size, int64 [1]
    if ctx.has_input(1) and _dynamic.run_time(ctx, 1):
        length, l_ub = scalar_operand(ctx, 1, "dft_length"), None
    elif ctx.has_input(1):
        lv = int(int_scalar(ctx, 1, "dft_length").value.reshape(-1)[0])
        if lv < 1:
            raise ctx.malformed(f"dft_length must be >= 1, got {lv}")
        length, l_ub = _i64([lv]), lv
    else:
        length = ops.mul(ops.sub(n_val, _i64(1)), _i64(2)) if irfft else n_val
        l_ub = max(2 * (n_ub - 1), 1) if irfft else n_ub
    co = 1 if irfft else 2
    rfft = onesided and not inverse
    ones = constant(np.ones([1], np.int64))
    # iotas of n and m: ones bound with them (n once more, to the same value), so they read after
    j = _dynamic.iota(bind_dims(ones, [n_val], "values", [n], name=ctx.name), n)
    if not ctx.has_input(1) and not onesided:  # the length along the axis is kept: m is n
        m, k = n, j
    else:
        m_val = ops.add(ops.div(length, _i64(2)), _i64(1)) if rfft else length
        if l_ub is None:  # dft_length fed as data: the output at its bounds within the value budget
            m_ub = _budget(dims[:-1], co, MAX_CONSTANT // max(n_ub * c * co, 1))
        else:
            m_ub = l_ub // 2 + 1 if rfft else l_ub
        m = produced_var(f"{ctx.name}:m", m_ub)
        k = _dynamic.iota(bind_dims(ones, [m_val], "values", [m], name=ctx.name), m)
    if n_ub * c * m.upper * co > MAX_CONSTANT:
        raise ctx.unsupported(f"a transform of up to {n_ub * c} x {m.upper * co} as a dense matrix is over aitgen's "
                              f"limit of {MAX_CONSTANT}: aitgen has no FFT kernel")
    mat = dft_matrix_data(j, k, length, c, inverse, onesided)
    if x.dtype != F32:
        mat = ops.cast(mat, x.dtype)
    # [outer, n, inner_c, c] -> [outer, inner_c, n * c] @ [n * c, m * co] -> [outer, m, inner_c, co]
    y = ops.gemm(ops.reshape(ops.permute(xv, [0, 2, 1, 3]), [outer, inner_c, n * c]), mat)
    y = ops.permute(ops.reshape(y, [outer, inner_c, m, IntImm(co)]), [0, 2, 1, 3])
    if m is n:
        return _dynamic.view(y, [*x.shape[:-1], IntImm(co)], ctx.name)
    # x's dims with the axis's replaced by m: a target shape computed as data, bound by the run
    tgt = ops.where(ops.equal(_i64(list(range(r - 1))), a), m_val, _i64(dims[:-1]))
    out = [produced_var(f"{ctx.name}:d{b}", max(d, m.upper)) for b, d in enumerate(dims[:-1])] + [IntImm(co)]
    return bind_dims(y, [ops.concat([tgt, _i64([co])], 0)], "reshape", out, shape=out,
                     known=[outer, m, inner_c, IntImm(co)], name=ctx.name)


def stft(ctx: NodeContext, x: Tensor, c: int, window: Optional[Tensor], onesided: bool) -> Tensor:
    """STFT whose frame_step or frame_length is fed as data: the frame count (and, without a
    window, the frame length) are sizes the run binds; frames are gathered at t * step + j from
    iotas of those sizes and go through the DFT matrix (a constant when the frame length is, else
    computed as data)."""
    size = x.shape[1].value
    lim = 1 << 62
    step = int_scalar(ctx, 1, "frame_step")
    if window is not None:
        frame, f_val = IntImm(window.shape[0].value), _i64([window.shape[0].value])
    elif ctx.has_input(3) and _dynamic.run_time(ctx, 3):
        frame, f_val = IntVar(f"{ctx.name}:frame", 1, size, produced=True), scalar_operand(ctx, 3, "frame_length")
    else:
        fl = int(int_scalar(ctx, 3, "frame_length").value.reshape(-1)[0]) if ctx.has_input(3) else size
        frame, f_val = IntImm(fl), _i64([fl])
    if window is not None and ctx.has_input(3):
        # a frame_length beside the window must equal its length (checked by the run when data)
        fl = int_scalar(ctx, 3, "frame_length")
        f_val = bind_dims(fl, [fl], "values", [frame], name=ctx.name)
    if frame.is_static and not 1 <= frame.value <= size:
        raise ctx.malformed(f"frame_length {frame.value} must be in [1, signal length {size}]")
    f_ub = frame.upper
    co = 2
    m_ub = f_ub // 2 + 1 if onesided else f_ub
    if f_ub * c * m_ub * co > MAX_CONSTANT or size * f_ub > MAX_CONSTANT:
        raise ctx.unsupported(f"frames of up to {f_ub} points over a signal of {size} are over aitgen's limit of "
                              f"{MAX_CONSTANT} entries for a dense transform or frame table")
    # step >= 1 and 1 <= frame <= size before the frame count divides by the step
    chk = ops.concat([step, f_val], 0)
    frame_chk = frame if not frame.is_static else IntVar(f"{ctx.name}:frame_chk", 1, size, produced=True)
    chk = bind_dims(chk, [chk], "values", [IntVar(f"{ctx.name}:step", 1, lim, produced=True), frame_chk],
                    name=ctx.name)
    st, fv = _dynamic.entry(chk, 0), _dynamic.entry(chk, 1)
    nf_val = ops.add(ops.div(ops.sub(_i64(size), fv), st), _i64(1))
    nf = produced_var(f"{ctx.name}:frames", size)
    vals, slots = [ops.reshape(nf_val, [1])], [nf]
    if not frame.is_static:
        m = produced_var(f"{ctx.name}:m", m_ub)
        vals += [ops.reshape(fv, [1]), ops.reshape(ops.add(ops.div(fv, _i64(2)), _i64(1)) if onesided else fv, [1])]
        slots += [frame, m]
    ones = bind_dims(constant(np.ones([1], np.int64)), [ops.concat(vals, 0)], "values", slots, name=ctx.name)
    t, j = _dynamic.iota(ones, nf), _dynamic.iota(ones, frame)
    idx = ops.add(ops.mul(ops.reshape(t, [nf, 1]), st), ops.reshape(j, [1, frame]))     # [frames, frame]
    y = ops.gather(x, idx, axis=1)                                                       # [batch, frames, frame, c]
    if frame.is_static:
        mat, mm, _ = dft_matrix(frame.value, c, frame.value, False, onesided)
        w_val = ctx.const(2)
        if w_val is not None:  # the window scales M's rows
            mat = mat * np.repeat(w_val.astype(np.float64), c)[:, None]
        mat, m = constant(mat.astype(x.dtype.np)), IntImm(mm)
    else:
        mat = dft_matrix_data(j, _dynamic.iota(ones, m), fv, c, False, onesided)
        mat = mat if x.dtype == F32 else ops.cast(mat, x.dtype)
        w_val = None
    if window is not None and w_val is None:
        y = ops.mul(y, ops.reshape(window, [frame, 1]))
    y = ops.gemm(ops.reshape(y, [x.shape[0], nf, frame * c]), mat)
    return ops.reshape(y, [x.shape[0], nf, m, IntImm(co)])


def _float_scalar(ctx: NodeContext, i: int, what: str) -> Tensor:
    """Input i, one number (constant or data), as float64 [1]."""
    t = _dynamic.sizes_operand(ctx, i, what, floats=True) if _dynamic.run_time(ctx, i) else ctx.input(i, what)
    if not all(d.is_static for d in t.shape) or math.prod(d.value for d in t.shape) != 1:
        raise ctx.malformed(f"input {i} ({what}) must be a scalar, got shape {[str(d) for d in t.shape]}")
    return ops.reshape(ops.cast(t, DType.float64), [1])


def mel_weight_matrix(ctx: NodeContext, dtype: DType) -> Tensor:
    """MelWeightMatrix of scalars fed as data: [dft_length // 2 + 1, num_mel_bins], both sizes the
    run binds, each entry computed as data by onnx's reference (float64): the band edges
    floor((dft_length + 1) * hz(mel_i) / sample_rate), and per bin a triangle rising from its
    left edge to 1 at its centre and falling to its right edge."""
    f64 = DType.float64
    ints = [int_scalar(ctx, i, w) for i, w in enumerate(("num_mel_bins", "dft_length", "sample_rate"))]
    lo, hi = (_float_scalar(ctx, i, w) for i, w in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")))
    # bins, dft_length, sample_rate >= 1 and 0 <= lower < upper (1 when it holds), before any division
    ok = ops.cast(ops.logical_and(ops.greater_equal(lo, constant(np.float64(0.0), dtype=f64)), ops.less(lo, hi)), I64)
    v = ops.concat([*ints, ok], 0)
    v = bind_dims(v, [v], "values", [IntVar(f"{ctx.name}:{w}", 1, ub, produced=True) for w, ub in
                                     (("bins", VB), ("dft_length", 2 * VB), ("sample_rate", 1 << 62),
                                      ("edges_ordered", 1))], name=ctx.name)
    bins_v, dft_v, rate_v = (_dynamic.entry(v, j) for j in range(3))
    n_spec_v = ops.add(ops.div(dft_v, _i64(2)), _i64(1))
    n_spec, bins = produced_var(f"{ctx.name}:spectrum", VB), produced_var(f"{ctx.name}:mel_bins", VB)
    ones = bind_dims(constant(np.ones([1], np.int64)), [ops.concat([ops.reshape(n_spec_v, [1]),
                                                                     ops.reshape(bins_v, [1])], 0)],
                     "values", [n_spec, bins], name=ctx.name)
    f = lambda t: ops.cast(t, f64)  # noqa: E731
    c = lambda x: constant(np.float64(x), dtype=f64)  # noqa: E731
    ln10 = float(np.log(10.0))
    low_mel, high_mel = (ops.div(ops.mul(c(2595.0), ops.log1p(ops.div(hz, c(700.0)))), c(ln10)) for hz in (lo, hi))
    # the bins + 2 edges i = 0 .. bins + 1: edge i of bin b is b + i for i = 0, 1, 2
    b = _dynamic.iota(ones, bins)
    step = ops.div(ops.sub(high_mel, low_mel), ops.add(f(bins_v), c(2.0)))

    def edge(off: int) -> Tensor:
        mel = ops.add(ops.mul(f(ops.add(b, _i64(off))), step), low_mel)
        hz = ops.mul(c(700.0), ops.expm1(ops.mul(ops.div(mel, c(2595.0)), c(ln10))))
        e = ops.floor(ops.div(ops.mul(f(ops.add(dft_v, _i64(1))), hz), f(rate_v)))
        return ops.reshape(e, [1, bins])
    left, center, right = edge(0), edge(1), edge(2)
    # the last edge must fall within the spectrum's n_spec bins (0 or more to spare)
    spare = ops.sub(ops.sub(n_spec_v, _i64(1)), ops.cast(ops.reduce_max(right), I64))
    # (the spectrum's iota reads after that check: its ones come out of the checking binding)
    ones = bind_dims(ones, [ops.reshape(spare, [1])], "values", [IntVar(f"{ctx.name}:edge_room", 0, 2 * VB,
                                                                       produced=True)], name=ctx.name)
    n = ops.reshape(f(_dynamic.iota(ones, n_spec)), [n_spec, 1])
    # (an empty side's width becomes 1: its ramp is masked out below, and divides by no 0)
    up = ops.div(ops.sub(n, left), ops.maximum(ops.sub(center, left), c(1.0)))
    down = ops.div(ops.sub(right, n), ops.maximum(ops.sub(right, center), c(1.0)))
    zero = c(0.0)
    out = ops.where(ops.logical_and(ops.greater_equal(n, left), ops.less(n, center)), up, zero)
    out = ops.where(ops.logical_and(ops.greater(n, center), ops.less(n, right)), down, out)
    out = ops.where(ops.equal(n, center), c(1.0), out)
    return ops.cast(out, dtype)


VB = _dynamic.value_bound(2)  # each of the mel matrix's two sizes
