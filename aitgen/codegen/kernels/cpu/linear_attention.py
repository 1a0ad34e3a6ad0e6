"""linear_attention (ONNX LinearAttention) -> one kernel (backends/cpu/templates/linear_attention.cpp.j2):
a parallel loop over (batch, kv head), each walking its float32 state through the time steps in
order. Head counts, head sizes and the rule are template constants; d = [B, T] (T may be dynamic)."""
from __future__ import annotations

import numpy as np

from ....ir.op import Op, OpKind
from ....ops.linear_attention import geometry
from ...cexpr import STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec


@lowering("cpu", OpKind.LINEAR_ATTENTION)
def lower_linear_attention(op: Op, ctx: LowerContext) -> list[KernelCall]:
    a = op.attrs
    g = geometry(op.inputs, a)
    q = op.inputs[0]
    y, state = op.outputs
    scale = a.scale if a.scale else 1.0 / np.sqrt(g["dk"])
    # float32 compute for every storage type: the float64 loads narrow (the oracle computes in float32 too)
    spec = KernelSpec.make(
        ctx.template("linear_attention.cpp.j2"), rule=a.rule, has_past=a.has_past, gated=a.gated, delta=a.delta,
        hq=a.q_heads, hk=a.kv_heads, dk=g["dk"], dv=g["dv"], group=a.q_heads // a.kv_heads,
        g_width=g["g_width"], beta_shared=g["beta_shared"], scale=repr(float(np.float32(scale))),
        t=STORAGE[q.dtype], ts=STORAGE[state.dtype],
        load=f"static_cast<float>({load(q.dtype, 'x', 'i')})", load_s=f"static_cast<float>({load(state.dtype, 'x', 'i')})",
        store=store(q.dtype, "v"), store_s=store(state.dtype, "v"))
    return [KernelCall(spec, [y, state] + list(op.inputs), [q.shape[0], q.shape[1]], op.name or op.kind.value)]
