"""ONNX RNN, LSTM and GRU, unrolled over a static sequence length into existing IR ops.

Per direction: one GEMM projects the input of every step at once ([seq, batch, in] x W^T + bias);
each step adds one recurrent GEMM (H x R^T) and the gate math as element-wise ops, which the
fusion passes merge. Steps run in time order (forward) or backwards (reverse); bidirectional runs
both and interleaves them in Y as ONNX lays it out: [seq, num_directions, batch, hidden].

sequence_lens masks each step per batch row: past a row's length the state is held and Y is zero,
exactly ONNX's semantics (and a reverse direction then starts at the row's last valid step,
because every step before it held the initial state).

The sequence length must be a static dim: the unrolled graph has one set of ops per step, so it is
capped at MAX_STEPS (above it, UnsupportedOpError names the node). A host-side loop over a compiled
step would lift the cap; it needs a run function that repeats kernels, which the codegen lacks.
"""
from __future__ import annotations

from typing import Callable, Optional

from ... import ops
from ...ir.tensor import Tensor
from .registry import NodeContext, onnx_op

MAX_STEPS = 256  # time steps one node may unroll to (each adds ~2 kernels per direction)

# name -> (alpha count, beta count, default alpha, default beta), as onnxruntime reads them: an
# activation consumes the next alpha/beta from the attribute lists only when it takes one.
_ACT_PARAMS = {
    "relu": (0, 0, 0.0, 0.0), "tanh": (0, 0, 0.0, 0.0), "sigmoid": (0, 0, 0.0, 0.0),
    "affine": (1, 1, 1.0, 0.0), "leakyrelu": (1, 0, 0.01, 0.0), "thresholdedrelu": (1, 0, 1.0, 0.0),
    "scaledtanh": (1, 1, 1.0, 1.0), "hardsigmoid": (1, 1, 0.2, 0.5), "elu": (1, 0, 1.0, 0.0),
    "softsign": (0, 0, 0.0, 0.0), "softplus": (0, 0, 0.0, 0.0),
}

Act = Callable[[Tensor], Tensor]


def _make_act(name: str, a: float, b: float) -> Act:
    if name == "relu":
        return ops.relu
    if name == "tanh":
        return ops.tanh
    if name == "sigmoid":
        return ops.sigmoid
    if name == "affine":
        return lambda x: ops.add(ops.mul(x, a), b)
    if name == "leakyrelu":
        return lambda x: ops.where(ops.greater_equal(x, 0.0), x, ops.mul(x, a))
    if name == "thresholdedrelu":
        return lambda x: ops.where(ops.greater(x, a), x, 0.0)
    if name == "scaledtanh":
        return lambda x: ops.mul(ops.tanh(ops.mul(x, b)), a)
    if name == "hardsigmoid":
        return lambda x: ops.clamp(ops.add(ops.mul(x, a), b), 0.0, 1.0)
    if name == "elu":
        return lambda x: ops.where(ops.greater_equal(x, 0.0), x, ops.mul(ops.expm1(x), a))
    if name == "softsign":
        return lambda x: ops.div(x, ops.add(ops.abs(x), 1.0))
    # softplus: relu(x) + log1p(exp(-|x|)) equals log(1 + exp(x)) without overflow
    return lambda x: ops.add(ops.relu(x), ops.log1p(ops.exp(ops.neg(ops.abs(x)))))


def _activations(ctx: NodeContext, default: list[str], num_dir: int) -> list[list[Act]]:
    """The activation functions per direction, with their alphas/betas."""
    names = ctx.attr("activations", None)
    if names is None:
        names = default * num_dir
    names = [str(n).lower() for n in names]
    if num_dir == 2 and len(names) == len(default):  # onnxruntime repeats one set for both
        names = names * 2
    if len(names) != len(default) * num_dir:
        raise ctx.malformed(f"activations lists {len(names)} functions; this op takes {len(default)} "
                            f"per direction, {len(default) * num_dir} in all")
    alphas = list(ctx.attr("activation_alpha", None) or [])
    betas = list(ctx.attr("activation_beta", None) or [])
    acts = []
    for n in names:
        if n not in _ACT_PARAMS:
            raise ctx.unsupported(f"activation '{n}' is not one ONNX defines for recurrent ops "
                                  f"({', '.join(sorted(_ACT_PARAMS))})")
        na, nb, a, b = _ACT_PARAMS[n]
        if na and alphas:
            a = alphas.pop(0)
        if nb and betas:
            b = betas.pop(0)
        acts.append(_make_act(n, float(a), float(b)))
    k = len(default)
    return [acts[d * k:(d + 1) * k] for d in range(num_dir)]


def _pick(t: Tensor, axis: int, i: int) -> Tensor:
    """t[..., i, ...] along axis (the axis removed)."""
    return ops.squeeze(ops.slice(t, [i], [i + 1], [axis]), [axis])


def _cols(t: Tensor, start: int, stop: int) -> Tensor:
    return ops.slice(t, [start], [stop], [t.ndim - 1])


class _Common:
    """What RNN, LSTM and GRU share: inputs in [seq, batch, ...] layout, directions, masking, outputs."""

    def __init__(self, ctx: NodeContext, gates: int, default_acts: list[str]):
        self.ctx = ctx
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.malformed(f"direction must be forward, reverse or bidirectional, got {direction!r}")
        self.dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.layout = ctx.attr("layout", 0)
        if self.layout not in (0, 1):
            raise ctx.malformed(f"layout must be 0 or 1, got {self.layout}")
        x, w, r = ctx.input(0, "X"), ctx.input(1, "W"), ctx.input(2, "R")
        if x.ndim != 3 or w.ndim != 3 or r.ndim != 3:
            raise ctx.malformed(f"X, W and R must be 3-D, got ranks {x.ndim}, {w.ndim}, {r.ndim}")
        if not x.dtype.is_float:
            raise ctx.unsupported(f"X of dtype {x.dtype}: recurrent ops compute in floating point")
        self.x = ops.permute(x, [1, 0, 2]) if self.layout == 1 else x
        seq = self.x.shape[0]
        if not seq.is_static:
            raise ctx.unsupported(f"the sequence length {seq} is dynamic; aitgen unrolls recurrent ops over "
                                  "a static sequence length")
        self.seq = seq.value
        if self.seq > MAX_STEPS:
            raise ctx.unsupported(f"sequence length {self.seq} is over aitgen's unrolling cap of {MAX_STEPS} steps")
        if not r.shape[2].is_static:
            raise ctx.unsupported("R's hidden size must be static")
        self.hidden = r.shape[2].value
        hs = ctx.attr("hidden_size", self.hidden)
        if hs != self.hidden:
            raise ctx.malformed(f"hidden_size {hs} disagrees with R's shape {[str(d) for d in r.shape]}")
        nd, h = len(self.dirs), self.hidden
        for what, t, width in (("W", w, x.shape[2]), ("R", r, h)):
            want = [nd, gates * h, width]
            if [str(d) for d in t.shape] != [str(d) for d in want]:
                raise ctx.malformed(f"{what} has shape {[str(d) for d in t.shape]}, expected {[str(d) for d in want]}")
        self.w, self.r = w, r
        self.b = ctx.input(3) if ctx.has_input(3) else None
        if self.b is not None and [str(d) for d in self.b.shape] != [str(nd), str(2 * gates * h)]:
            raise ctx.malformed(f"B has shape {[str(d) for d in self.b.shape]}, expected [{nd}, {2 * gates * h}]")
        self.mask = self._masks(ctx.input(4) if ctx.has_input(4) else None, ctx.const(4))
        self.clip = ctx.attr("clip", None)
        if self.clip is not None and not self.clip > 0:
            raise ctx.malformed(f"clip must be positive, got {self.clip}")
        self.acts = _activations(ctx, default_acts, nd)

    def _masks(self, lens: Optional[Tensor], known) -> Optional[list[Tensor]]:
        """Per step t: a [batch, 1] bool, True where t < sequence_lens[b]; None when no row is short."""
        if lens is None:
            return None
        if lens.ndim != 1 or not lens.dtype.is_int:
            raise self.ctx.malformed(f"sequence_lens must be a 1-D integer tensor, got {lens.dtype}"
                                     f"{[str(d) for d in lens.shape]}")
        if known is not None:
            if ((known < 0) | (known > self.seq)).any():
                raise self.ctx.malformed(f"sequence_lens {known.tolist()} must lie in [0, {self.seq}]")
            if (known == self.seq).all():
                return None
        return [ops.unsqueeze(ops.greater(lens, t), [1]) for t in range(self.seq)]

    def initial(self, i: int, what: str, d: int) -> Optional[Tensor]:
        """initial_h / initial_c for direction d as [batch, hidden], or None (zeros)."""
        if not self.ctx.has_input(i):
            return None
        t = self.ctx.input(i, what)
        if t.ndim != 3:
            raise self.ctx.malformed(f"{what} must be 3-D, got {[str(s) for s in t.shape]}")
        return _pick(t, 1 if self.layout == 1 else 0, d)

    def weights(self, d: int) -> tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
        """W[d], R[d], Wb[d], Rb[d]."""
        w, r = _pick(self.w, 0, d), _pick(self.r, 0, d)
        if self.b is None:
            return w, r, None, None
        b = _pick(self.b, 0, d)
        n = b.shape[0].value // 2
        return w, r, _cols(b, 0, n), _cols(b, n, 2 * n)

    def project(self, w: Tensor, bias: Optional[Tensor]) -> Tensor:
        """X x W^T + bias for every step at once: [seq, batch, gates * hidden]."""
        return ops.gemm(self.x, w, bias, layout="rcr")

    def pre(self, x: Tensor) -> Tensor:
        """A gate's input before its activation: clipped when the node asks."""
        return x if self.clip is None else ops.clamp(x, -self.clip, self.clip)

    def steps(self, d: int) -> range:
        return range(self.seq) if self.dirs[d] == "forward" else range(self.seq - 1, -1, -1)

    def hold(self, t: int, new: Tensor, old: Optional[Tensor]) -> Tensor:
        """The state after step t: new where the row is still inside its sequence, else old."""
        if self.mask is None:
            return new
        return ops.where(self.mask[t], new, 0.0 if old is None else old)

    def emit(self, t: int, h: Tensor) -> Tensor:
        """Y's entry for step t: the new hidden state, zero past the row's length."""
        return h if self.mask is None else ops.where(self.mask[t], h, 0.0)

    def outputs(self, ys: list[list[Tensor]], finals: list[list[Tensor]]) -> list:
        """Y from per-direction, per-step [batch, hidden] values; then Y_h (Y_c) from finals[k][d]."""
        ctx, nd, axis = self.ctx, len(self.dirs), self.layout  # direction axis of Y_h; time axis of Y
        out: list = [None]
        if ctx.num_outputs > 0 and ctx.node.output[0]:
            parts = [ops.unsqueeze(ys[d][t], [axis]) for t in range(self.seq) for d in range(nd)]
            y = ops.concat(parts, axis)  # [seq * nd, batch, h] or [batch, seq * nd, h]
            b = y.shape[1 - axis]
            shape = [self.seq, nd, b, self.hidden] if axis == 0 else [b, self.seq, nd, self.hidden]
            out[0] = ops.reshape(y, shape)
        for k, fin in enumerate(finals, start=1):
            if ctx.num_outputs > k and ctx.node.output[k]:
                out.append(ops.concat([ops.unsqueeze(f, [axis]) for f in fin], axis))
            else:
                out.append(None)
        return out[:max(ctx.num_outputs, 1)]


def _rec(h: Optional[Tensor], r: Tensor, bias: Optional[Tensor] = None) -> Optional[Tensor]:
    """H x R^T (+ bias); None for a zero state without bias (the term vanishes)."""
    if h is None:
        return bias
    return ops.gemm(h, r, bias, layout="rcr")


def _add(a: Tensor, b: Optional[Tensor]) -> Tensor:
    return a if b is None else ops.add(a, b)


@onnx_op("RNN", min_opset=7)
def _rnn(ctx: NodeContext):
    c = _Common(ctx, 1, ["Tanh"])
    ys, hs = [], []
    for d in range(len(c.dirs)):
        w, r, wb, rb = c.weights(d)
        xw = c.project(w, None if wb is None else ops.add(wb, rb))
        (f,) = c.acts[d]
        h, y = c.initial(5, "initial_h", d), [None] * c.seq
        for t in c.steps(d):
            new = f(c.pre(_add(_pick(xw, 0, t), _rec(h, r))))
            y[t] = c.emit(t, new)
            h = c.hold(t, new, h)
        ys.append(y)
        hs.append(h)
    return c.outputs(ys, [hs])


@onnx_op("GRU", min_opset=7)
def _gru(ctx: NodeContext):
    c = _Common(ctx, 3, ["Sigmoid", "Tanh"])
    lbr = ctx.attr("linear_before_reset", 0)
    n = c.hidden
    ys, hs = [], []
    for d in range(len(c.dirs)):
        w, r, wb, rb = c.weights(d)
        f, g = c.acts[d]
        if lbr:  # h~ = g(x Wh + Wbh + r * (H Rh + Rbh)): Rb stays with the recurrent GEMM
            xw = c.project(w, wb)
        else:    # h~ = g(x Wh + (r * H) Rh + Rbh + Wbh): every bias folds into the projection
            xw = c.project(w, None if wb is None else ops.add(wb, rb))
        r_zr, r_h = _cols_rows(r, 0, 2 * n), _cols_rows(r, 2 * n, 3 * n)
        h, y = c.initial(5, "initial_h", d), [None] * c.seq
        for t in c.steps(d):
            x_t = _pick(xw, 0, t)
            hr = _rec(h, r, rb) if lbr else _rec(h, r_zr)  # None for a zero state (and no Rb)
            z = f(c.pre(_add(_part(x_t, 0, n), _part(hr, 0, n))))
            rr = f(c.pre(_add(_part(x_t, 1, n), _part(hr, 1, n))))
            if lbr:
                h_rec = None if hr is None else ops.mul(rr, _part(hr, 2, n))
            else:
                h_rec = _rec(None if h is None else ops.mul(rr, h), r_h)
            hh = g(c.pre(_add(_part(x_t, 2, n), h_rec)))
            # H = (1 - z) * h~ + z * H_prev
            new = ops.mul(ops.sub(1.0, z), hh) if h is None else ops.add(ops.mul(ops.sub(1.0, z), hh), ops.mul(z, h))
            y[t] = c.emit(t, new)
            h = c.hold(t, new, h)
        ys.append(y)
        hs.append(h)
    return c.outputs(ys, [hs])


def _part(t: Optional[Tensor], k: int, n: int) -> Optional[Tensor]:
    """Gate k's columns of a [batch, gates * n] value (None stays None)."""
    return None if t is None else _cols(t, k * n, (k + 1) * n)


def _cols_rows(r: Tensor, start: int, stop: int) -> Tensor:
    """Rows start:stop of a [gates * hidden, hidden] recurrence matrix."""
    return ops.slice(r, [start], [stop], [0])


@onnx_op("LSTM", min_opset=7)
def _lstm(ctx: NodeContext):
    c = _Common(ctx, 4, ["Sigmoid", "Tanh", "Tanh"])
    n = c.hidden
    forget_from_input = bool(ctx.attr("input_forget", 0))  # f = 1 - i (coupled gates)
    p_all = ctx.input(7) if ctx.has_input(7) else None
    if p_all is not None and [str(s) for s in p_all.shape] != [str(len(c.dirs)), str(3 * n)]:
        raise ctx.malformed(f"P has shape {[str(s) for s in p_all.shape]}, expected [{len(c.dirs)}, {3 * n}]")
    ys, hs, cs = [], [], []
    for d in range(len(c.dirs)):
        w, r, wb, rb = c.weights(d)
        f, g, hact = c.acts[d]
        xw = c.project(w, None if wb is None else ops.add(wb, rb))
        p = None if p_all is None else _pick(p_all, 0, d)
        pi, po, pf = (None, None, None) if p is None else (_cols(p, 0, n), _cols(p, n, 2 * n), _cols(p, 2 * n, 3 * n))
        h, cell = c.initial(5, "initial_h", d), c.initial(6, "initial_c", d)
        y = [None] * c.seq
        for t in c.steps(d):
            gates = _add(_pick(xw, 0, t), _rec(h, r))  # ONNX gate order: i, o, f, c
            gi, go, gf, gc = (_cols(gates, k * n, (k + 1) * n) for k in range(4))
            if cell is not None and p is not None:  # peepholes read the previous cell state
                gi, gf = ops.add(gi, ops.mul(pi, cell)), ops.add(gf, ops.mul(pf, cell))
            i = f(c.pre(gi))
            fg = ops.sub(1.0, i) if forget_from_input else f(c.pre(gf))
            cand = ops.mul(i, g(c.pre(gc)))
            new_c = cand if cell is None else ops.add(ops.mul(fg, cell), cand)
            if p is not None:  # the output gate's peephole reads the new cell state
                go = ops.add(go, ops.mul(po, new_c))
            new_h = ops.mul(f(c.pre(go)), hact(new_c))
            y[t] = c.emit(t, new_h)
            h, cell = c.hold(t, new_h, h), c.hold(t, new_c, cell)
        ys.append(y)
        hs.append(h)
        cs.append(cell)
    return c.outputs(ys, [hs, cs])
