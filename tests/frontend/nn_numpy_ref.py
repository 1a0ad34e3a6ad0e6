"""Plain-numpy (float64) versions of each nn layer, written independently of aitgen.reference so a
shared misunderstanding of a layout or formula cannot make both sides agree by accident."""
from __future__ import annotations

import math

import numpy as np


def f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def pads4(padding) -> tuple[int, int, int, int]:
    """int, (ph, pw) or (top, bottom, left, right)."""
    if isinstance(padding, int):
        return (padding,) * 4
    if len(padding) == 2:
        return (padding[0], padding[0], padding[1], padding[1])
    return tuple(padding)


def linear(x, w, b=None):
    y = f64(x) @ f64(w).T
    return y if b is None else y + f64(b)


def conv2d(x, w, b=None, stride=(1, 1), padding=0, dilation=(1, 1), groups=1):
    """x NHWC, w [O, KH, KW, C/groups]: one strided window slice per kernel tap."""
    x, w = f64(x), f64(w)
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    t, bo, le, ri = pads4(padding)
    sh, sw = stride
    dh, dw = dilation
    xp = np.pad(x, ((0, 0), (t, bo), (le, ri), (0, 0)))
    ho = (h + t + bo - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + le + ri - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, ho, wo, o))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i * dh: i * dh + (ho - 1) * sh + 1: sh, j * dw: j * dw + (wo - 1) * sw + 1: sw, :]
            for g in range(groups):
                out[..., g * og:(g + 1) * og] += win[..., g * cg:(g + 1) * cg] @ w[g * og:(g + 1) * og, i, j, :].T
    return out if b is None else out + f64(b)


def conv_transpose2d(x, w, b=None, stride=(1, 1), padding=0, output_padding=(0, 0), dilation=(1, 1),
                     groups=1):
    """x NHWC, w [C_in, KH, KW, C_out/groups]: every input pixel scatters its kernel into the output."""
    x, w = f64(x), f64(w)
    n, h, wd, c = x.shape
    _, kh, kw, og = w.shape
    cg = c // groups
    t, bo, le, ri = pads4(padding)
    sh, sw = stride
    dh, dw = dilation
    full_h = (h - 1) * sh + dh * (kh - 1) + 1 + output_padding[0]
    full_w = (wd - 1) * sw + dw * (kw - 1) + 1 + output_padding[1]
    full = np.zeros((n, full_h, full_w, og * groups))
    for i in range(kh):
        for j in range(kw):
            for g in range(groups):
                contrib = x[..., g * cg:(g + 1) * cg] @ w[g * cg:(g + 1) * cg, i, j, :]
                full[:, i * dh: i * dh + (h - 1) * sh + 1: sh, j * dw: j * dw + (wd - 1) * sw + 1: sw,
                     g * og:(g + 1) * og] += contrib
    out = full[:, t: full_h - bo, le: full_w - ri, :]
    return out if b is None else out + f64(b)


def _windows(x, kernel, stride, padding, fill, dilation=(1, 1)):
    x = f64(x)
    n, h, wd, c = x.shape
    t, bo, le, ri = pads4(padding)
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    xp = np.pad(x, ((0, 0), (t, bo), (le, ri), (0, 0)), constant_values=fill)
    ho = (h + t + bo - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + le + ri - dw * (kw - 1) - 1) // sw + 1
    return [xp[:, i * dh: i * dh + (ho - 1) * sh + 1: sh, j * dw: j * dw + (wo - 1) * sw + 1: sw, :]
            for i in range(kh) for j in range(kw)]


def max_pool2d(x, kernel, stride, padding=0, dilation=(1, 1)):
    return np.max(np.stack(_windows(x, kernel, stride, padding, -np.inf, dilation)), axis=0)


def avg_pool2d(x, kernel, stride, padding=0, count_include_pad=True):
    s = np.sum(np.stack(_windows(x, kernel, stride, padding, 0.0)), axis=0)
    if count_include_pad:
        return s / (kernel[0] * kernel[1])
    ones = np.ones(np.shape(x)[:3] + (1,))
    cnt = np.sum(np.stack(_windows(ones, kernel, stride, padding, 0.0)), axis=0)
    return s / cnt


def batchnorm(x, w, b, mean, var, eps):
    return (f64(x) - f64(mean)) / np.sqrt(f64(var) + eps) * f64(w) + f64(b)


def layernorm(x, w, b, eps, num_axes=1):
    x = f64(x)
    axes = tuple(range(x.ndim - num_axes, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * f64(w)
    if b is not None:
        y = y + f64(b)
    return y


def groupnorm(x, groups, w, b, eps):
    x = f64(x)
    shp = x.shape
    g = x.reshape(shp[0], -1, groups, shp[-1] // groups)  # [N, spatial, G, C/G]
    mu = g.mean(axis=(1, 3), keepdims=True)
    var = ((g - mu) ** 2).mean(axis=(1, 3), keepdims=True)
    y = ((g - mu) / np.sqrt(var + eps)).reshape(shp)
    return y * f64(w) + f64(b)


def rmsnorm(x, w, eps, num_axes=1):
    x = f64(x)
    axes = tuple(range(x.ndim - num_axes, x.ndim))
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y if w is None else y * f64(w)


def softmax(x, axis=-1):
    x = f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_erf = np.vectorize(math.erf)

ACTIVATIONS = {
    "ReLU": lambda x: np.maximum(f64(x), 0.0),
    "ReLU6": lambda x: np.minimum(np.maximum(f64(x), 0.0), 6.0),
    "GELU": lambda x: 0.5 * f64(x) * (1.0 + _erf(f64(x) / math.sqrt(2.0))),
    "SiLU": lambda x: f64(x) / (1.0 + np.exp(-f64(x))),
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-f64(x))),
    "Tanh": lambda x: np.tanh(f64(x)),
    "Hardswish": lambda x: f64(x) * np.minimum(np.maximum(f64(x) + 3.0, 0.0), 6.0) / 6.0,
}


def gelu_tanh(x):
    x = f64(x)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def mha(q_in, k_in, v_in, wq, bq, wk, bk, wv, bv, wo, bo, heads, mask=None, causal=False):
    """Batch-first multi-head attention, head by head, with an additive mask broadcastable to
    [B, H, Sq, Sk]."""
    q, k, v = linear(q_in, wq, bq), linear(k_in, wk, bk), linear(v_in, wv, bv)
    b, sq, e = q.shape
    sk = k.shape[1]
    d = e // heads
    out = np.zeros((b, sq, e))
    if mask is not None:
        mask = np.broadcast_to(f64(mask), (b, heads, sq, sk))
    for h in range(heads):
        qs, ks, vs = (t[..., h * d:(h + 1) * d] for t in (q, k, v))
        s = qs @ ks.transpose(0, 2, 1) / math.sqrt(d)
        if mask is not None:
            s = s + mask[:, h]
        if causal:
            s = np.where(np.tril(np.ones((sq, sk), bool)), s, -np.inf)
        out[..., h * d:(h + 1) * d] = softmax(s) @ vs
    return linear(out, wo, bo)
