"""linear_attention: the recurrent linear-attention family of ONNX LinearAttention (opset 27).

Inputs in ONNX's packed layout, in order: q [B, T, Hq*dk], k [B, T, Hkv*dk], v [B, T, Hkv*dv],
then past_state [B, Hkv, dk, dv] (when has_past), decay [B, T, Hkv] or [B, T, Hkv*dk] (gated
rules), beta [B, T, Hkv] or [B, T, 1] (delta rules). Outputs: y [B, T, Hq*dv] in q's dtype and
present_state [B, Hkv, dk, dv] in past_state's dtype (q's without one).

Per kv head, with S (dk x dv) starting at past_state (zeros without one), for t = 0..T-1:
  gated:  S *= exp(g_t)  (g_t per head, or per key dim: row d of S scales by exp(g_t[d]))
  delta:  v_t <- beta_t * (v_t - S^T k_t)
  S += k_t v_t^T;  y_t = scale * q_t^T S  for each query head sharing this kv head
(query head j reads kv head j // (Hq / Hkv), ONNX's interleaved repeat). The state and all
arithmetic are float32 whatever the storage dtypes, as onnx's reference computes; T may be dynamic.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DTypeError
from ..ir.dims import IntImm
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .registry import Category, _desc, check, make_op, register

__all__ = ["LinearAttentionAttrs", "linear_attention", "LINEAR_ATTENTION_RULES"]

LINEAR_ATTENTION_RULES = ("linear", "gated", "delta", "gated_delta")


@dataclasses.dataclass(frozen=True)
class LinearAttentionAttrs:
    q_heads: int
    kv_heads: int
    rule: str = "gated_delta"
    scale: float = 0.0       # 0: 1 / sqrt(dk)
    has_past: bool = False

    @property
    def gated(self) -> bool:
        return self.rule in ("gated", "gated_delta")

    @property
    def delta(self) -> bool:
        return self.rule in ("delta", "gated_delta")


def _static(d, what: str) -> int:
    check(d.is_static, f"{what} must be static, got {d}")
    return d.value


def geometry(inputs, a: LinearAttentionAttrs) -> dict:
    """dk, dv and the decay / beta widths per kv head (1 or dk; 1 or shared by all heads)."""
    q, k, v = inputs[:3]
    dk = _static(q.shape[2], "q's last dim") // a.q_heads
    dv = _static(v.shape[2], "v's last dim") // a.kv_heads
    rest = list(inputs[3:])
    past = rest.pop(0) if a.has_past else None
    decay = rest.pop(0) if a.gated else None
    beta = rest.pop(0) if a.delta else None
    g_width = 0 if decay is None else _static(decay.shape[2], "decay's last dim") // a.kv_heads
    beta_shared = beta is not None and _static(beta.shape[2], "beta's last dim") == 1
    return dict(dk=dk, dv=dv, past=past, decay=decay, beta=beta, g_width=g_width, beta_shared=beta_shared)


def _infer(inputs, a: LinearAttentionAttrs):
    check(a.rule in LINEAR_ATTENTION_RULES, f"update rule {a.rule!r} is not one of {LINEAR_ATTENTION_RULES}")
    check(a.q_heads > 0 and a.kv_heads > 0 and a.q_heads % a.kv_heads == 0,
          f"q_heads {a.q_heads} must be a positive multiple of kv_heads {a.kv_heads}")
    check(np.isfinite(a.scale), f"scale {a.scale} must be finite")  # it becomes a C++ literal
    want = 3 + a.has_past + a.gated + a.delta
    check(len(inputs) == want, f"takes {want} inputs for rule {a.rule!r} (has_past={a.has_past}), got {len(inputs)}")
    q, k, v = inputs[:3]
    for t in inputs:
        check(t.dtype.is_float, f"needs float operands, got {_desc(t)}", DTypeError)
    for t in (k, v) + tuple(inputs[3 + a.has_past:]):
        check(t.dtype == q.dtype, f"{_desc(t)} must have q's dtype {q.dtype}", DTypeError)
    for t in inputs[:3] + inputs[3 + a.has_past:]:
        check(t.ndim == 3 and t.shape[0] == q.shape[0] and t.shape[1] == q.shape[1],
              f"{_desc(t)} must be [B, T, *] with q's B and T ({_desc(q)})")
    check(q.shape[2].is_static and q.shape[2].value % a.q_heads == 0, f"q's last dim must split into {a.q_heads} heads")
    check(k.shape[2] == IntImm(q.shape[2].value // a.q_heads * a.kv_heads),
          f"k {_desc(k)} must be [B, T, {a.kv_heads} * dk] with q's dk")
    check(v.shape[2].is_static and v.shape[2].value % a.kv_heads == 0, f"v's last dim must split into {a.kv_heads} heads")
    g = geometry(inputs, a)
    dk, dv = g["dk"], g["dv"]
    state = (q.shape[0], IntImm(a.kv_heads), IntImm(dk), IntImm(dv))
    if g["past"] is not None:
        check(tuple(g["past"].shape) == state, f"past_state {_desc(g['past'])} must be [B, {a.kv_heads}, {dk}, {dv}]")
    check(g["decay"] is None or g["g_width"] in (1, dk) and g["decay"].shape[2].value in (a.kv_heads, a.kv_heads * dk),
          f"decay's last dim must be {a.kv_heads} or {a.kv_heads * dk}")
    check(g["beta"] is None or g["beta"].shape[2].value in (1, a.kv_heads), f"beta's last dim must be 1 or {a.kv_heads}")
    sdt = g["past"].dtype if g["past"] is not None else q.dtype
    return [((q.shape[0], q.shape[1], IntImm(a.q_heads * dv)), q.dtype), (state, sdt)]


def _ref(args, a: LinearAttentionAttrs, ctx):
    g = geometry_np(args, a)
    q, k, v = (x.astype(np.float32) for x in args[:3])
    b, t = q.shape[:2]
    hq, hk, dk, dv = a.q_heads, a.kv_heads, g["dk"], g["dv"]
    q4, k4, v4 = q.reshape(b, t, hq, dk), k.reshape(b, t, hk, dk), v.reshape(b, t, hk, dv)
    s = np.zeros((b, hk, dk, dv), np.float32) if g["past"] is None else g["past"].astype(np.float32)
    scale = np.float32(a.scale if a.scale else 1.0 / np.sqrt(dk))
    y = np.zeros((b, t, hq, dv), np.float32)
    for i in range(t):
        if a.gated:
            gt = g["decay"][:, i].astype(np.float32).reshape(b, hk, -1)     # [B, Hkv, 1 or dk]
            s = s * np.exp(gt)[..., None]
        vt = v4[:, i]
        if a.delta:
            bt = g["beta"][:, i].astype(np.float32).reshape(b, -1, 1)      # [B, 1 or Hkv, 1]
            vt = bt * (vt - np.einsum("bhdm,bhd->bhm", s, k4[:, i]))
        s = s + k4[:, i][..., :, None] * vt[..., None, :]
        y[:, i] = scale * np.einsum("bhd,bhdm->bhm", q4[:, i], np.repeat(s, hq // hk, axis=1))
    sdt = args[0].dtype if g["past"] is None else g["past"].dtype
    return [y.reshape(b, t, hq * dv).astype(args[0].dtype), s.astype(sdt)]


def geometry_np(args, a: LinearAttentionAttrs) -> dict:
    """geometry() over numpy arrays (the oracle's operands)."""
    q, v = args[0], args[2]
    rest = list(args[3:])
    past = rest.pop(0) if a.has_past else None
    decay = rest.pop(0) if a.gated else None
    beta = rest.pop(0) if a.delta else None
    return dict(dk=q.shape[2] // a.q_heads, dv=v.shape[2] // a.kv_heads, past=past, decay=decay, beta=beta)


register(OpKind.LINEAR_ATTENTION, Category.ATTENTION, LinearAttentionAttrs, _infer, _ref, num_inputs=(3, 6))


def linear_attention(q: Tensor, k: Tensor, v: Tensor, *, q_heads: int, kv_heads: int, rule: str = "gated_delta",
                     scale: float = 0.0, past_state: Tensor = None, decay: Tensor = None, beta: Tensor = None,
                     name=None) -> tuple[Tensor, Tensor]:
    """(y, present_state) of ONNX LinearAttention; decay for the gated rules, beta for the delta ones."""
    attrs = LinearAttentionAttrs(int(q_heads), int(kv_heads), str(rule), float(scale), past_state is not None)
    if (decay is not None) != attrs.gated or (beta is not None) != attrs.delta:
        raise DTypeError(f"linear_attention{f' {name!r}' if name else ''}: rule {rule!r} takes "
                         f"{'a' if attrs.gated else 'no'} decay and {'a' if attrs.delta else 'no'} beta")
    extra = [t for t in (past_state, decay, beta) if t is not None]
    y, state = make_op(OpKind.LINEAR_ATTENTION, [q, k, v] + extra, attrs, name)
    return y, state
