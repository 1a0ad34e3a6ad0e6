"""A float64 numpy reference of ONNX RNN, LSTM and GRU, written from the operator spec, step by
step in a Python loop (no unrolling, no shared code with the importer), for the cases
onnxruntime cannot check: layout=1 (it refuses batch-major layout) and every attribute mix."""
from __future__ import annotations

import numpy as np

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ["tanh"], "GRU": ["sigmoid", "tanh"], "LSTM": ["sigmoid", "tanh", "tanh"]}
_PARAMS = {"affine": (1, 1, 1.0, 0.0), "leakyrelu": (1, 0, 0.01, 0.0), "thresholdedrelu": (1, 0, 1.0, 0.0),
           "scaledtanh": (1, 1, 1.0, 1.0), "hardsigmoid": (1, 1, 0.2, 0.5), "elu": (1, 0, 1.0, 0.0)}


def _act(name, a, b):
    return {
        "relu": lambda x: np.maximum(x, 0), "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "affine": lambda x: a * x + b, "leakyrelu": lambda x: np.where(x >= 0, x, a * x),
        "thresholdedrelu": lambda x: np.where(x > a, x, 0), "scaledtanh": lambda x: a * np.tanh(b * x),
        "hardsigmoid": lambda x: np.clip(a * x + b, 0, 1), "elu": lambda x: np.where(x >= 0, x, a * np.expm1(x)),
        "softsign": lambda x: x / (1 + np.abs(x)), "softplus": lambda x: np.log1p(np.exp(x)),
    }[name]


def _acts(op, attrs, nd):
    names = [n.lower() for n in attrs.get("activations", _DEFAULT_ACTS[op] * nd)]
    if len(names) == len(_DEFAULT_ACTS[op]) and nd == 2:
        names = names * 2
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    out = []
    for n in names:
        na, nb, a, b = _PARAMS.get(n, (0, 0, 0.0, 0.0))
        a = alphas.pop(0) if na and alphas else a
        b = betas.pop(0) if nb and betas else b
        out.append(_act(n, a, b))
    k = len(_DEFAULT_ACTS[op])
    return [out[d * k:(d + 1) * k] for d in range(nd)]


def run(op, attrs, X, W, R, B=None, seq_lens=None, h0=None, c0=None, P=None):
    """-> (Y, Y_h[, Y_c]) in the node's layout, float64."""
    f64 = lambda a: None if a is None else np.asarray(a, np.float64)  # noqa: E731
    X, W, R, B, h0, c0, P = map(f64, (X, W, R, B, h0, c0, P))
    layout = attrs.get("layout", 0)
    if layout == 1:
        X = X.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    seq, batch, _ = X.shape
    nd, hid = W.shape[0], R.shape[2]
    g = _GATES[op]
    B = np.zeros((nd, 2 * g * hid)) if B is None else B
    lens = np.full(batch, seq) if seq_lens is None else np.asarray(seq_lens)
    clip = attrs.get("clip")
    cl = (lambda x: x) if clip is None else (lambda x: np.clip(x, -clip, clip))
    acts = _acts(op, attrs, nd)
    direction = attrs.get("direction", "forward")
    Y = np.zeros((seq, nd, batch, hid))
    Yh, Yc = np.zeros((nd, batch, hid)), np.zeros((nd, batch, hid))
    for d in range(nd):
        rev = direction == "reverse" or (direction == "bidirectional" and d == 1)
        wb, rb = B[d, :g * hid], B[d, g * hid:]
        for b in range(batch):
            h = np.zeros(hid) if h0 is None else h0[d, b].copy()
            c = np.zeros(hid) if c0 is None else c0[d, b].copy()
            steps = range(lens[b] - 1, -1, -1) if rev else range(lens[b])
            for t in steps:
                x = X[t, b]
                if op == "RNN":
                    h = acts[d][0](cl(W[d] @ x + R[d] @ h + wb + rb))
                elif op == "GRU":
                    f, gg = acts[d]
                    sl = [slice(k * hid, (k + 1) * hid) for k in range(3)]
                    z = f(cl(W[d][sl[0]] @ x + R[d][sl[0]] @ h + wb[sl[0]] + rb[sl[0]]))
                    r = f(cl(W[d][sl[1]] @ x + R[d][sl[1]] @ h + wb[sl[1]] + rb[sl[1]]))
                    if attrs.get("linear_before_reset", 0):
                        hh = gg(cl(W[d][sl[2]] @ x + r * (R[d][sl[2]] @ h + rb[sl[2]]) + wb[sl[2]]))
                    else:
                        hh = gg(cl(W[d][sl[2]] @ x + R[d][sl[2]] @ (r * h) + rb[sl[2]] + wb[sl[2]]))
                    h = (1 - z) * hh + z * h
                else:
                    f, gg, hf = acts[d]
                    a = W[d] @ x + R[d] @ h + wb + rb
                    ai, ao, af, ac = (a[k * hid:(k + 1) * hid] for k in range(4))
                    pi, po, pf = (np.zeros(hid),) * 3 if P is None else (P[d, :hid], P[d, hid:2 * hid], P[d, 2 * hid:])
                    i = f(cl(ai + pi * c))
                    fg = 1 - i if attrs.get("input_forget", 0) else f(cl(af + pf * c))
                    c = fg * c + i * gg(cl(ac))
                    h = f(cl(ao + po * c)) * hf(c)
                Y[t, d, b] = h
            Yh[d, b], Yc[d, b] = h, c
    if layout == 1:
        Y, Yh, Yc = Y.transpose(2, 0, 1, 3), Yh.transpose(1, 0, 2), Yc.transpose(1, 0, 2)
    return (Y, Yh, Yc) if op == "LSTM" else (Y, Yh)
