"""CausalConvWithState and LinearAttention (opset 27; ops_stateful.py) against onnx's numpy
reference and onnxruntime (1.32 has kernels for both), in ONE CPU build.

LinearAttention (the linear_attention op): every update rule, decay per head and per key dim,
beta per head and shared, GQA and MQA, a past state, an explicit scale, float16 (with a float16 or
a float32 state), and a dynamic sequence length run at two lengths through one build. CausalConvWithState (decomposed): bias,
past state, SiLU, k = 1 (an empty carried state), float16, a dynamic length. Malformed nodes are
refused naming node, op type and opset.
Tolerance: rtol 2e-3 / atol 2e-3, set by the float16 cases (one rounding of outputs that reach
~10, computed in float32 as the reference does); the float32 cases agree to ~1e-6.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.errors import ImportError_
from aitgen.frontend import onnx as ox

TOL = dict(rtol=2e-3, atol=2e-3)
F16 = np.float16


def _la(name, b, t, hq, hk, dk, dv, rule, *, past=False, decay=None, beta=None, scale=None, dt=np.float32,
        dyn_t=None, seed=0, state_dt=None):
    """decay: 'head' or 'key'; beta: 'head' or 'shared'."""
    r = lambda shape, lo=-1.0, hi=1.0, s=0: rand(shape, lo, hi, seed=seed + s).astype(dt)  # noqa: E731
    dims = (lambda w: [b, "T", w]) if dyn_t else (lambda w: None)
    ins = [In("q", r((b, t, hq * dk), s=1), dims=dims(hq * dk)), In("k", r((b, t, hk * dk), s=2), dims=dims(hk * dk)),
           In("v", r((b, t, hk * dv), s=3), dims=dims(hk * dv)),
           In("s", r((b, hk, dk, dv), s=4).astype(state_dt or dt)) if past else None,
           In("g", r((b, t, hk if decay == "head" else hk * dk), -0.5, 0.0, s=5),
              dims=dims(hk if decay == "head" else hk * dk)) if decay else None,
           In("be", r((b, t, hk if beta == "head" else 1), 0.0, 1.0, s=6),
              dims=dims(hk if beta == "head" else 1)) if beta else None]
    while ins[-1] is None:
        ins.pop()
    attrs = {"q_num_heads": hq, "kv_num_heads": hk, "update_rule": rule, **({"scale": scale} if scale else {})}
    sizes = []
    if dyn_t:  # the same build at another length: every time-major input cut to dyn_t steps
        sizes = [{i.name: i.value[:, :dyn_t] for i in ins if i is not None and i.name != "s"}]
    return case(name, "LinearAttention", ins, attrs, opset=27, n_out=2, sizes=sizes,
                dim_bounds={"T": (1, t)} if dyn_t else None)


def _ccs(name, b, c, length, k, *, bias=False, past=False, act=None, dt=np.float32, dyn=None, seed=0):
    dims = [b, c, "L"] if dyn else None
    ins = [In("x", rand((b, c, length), seed=seed).astype(dt), dims=dims), In("w", rand((c, 1, k), seed=seed + 1).astype(dt)),
           In("bias", rand((c,), seed=seed + 2).astype(dt)) if bias else None,
           In("p", rand((b, c, k - 1), seed=seed + 3).astype(dt)) if past else None]
    while ins[-1] is None:
        ins.pop()
    sizes = [{"x": ins[0].value[:, :, :dyn]}] if dyn else []
    return case(name, "CausalConvWithState", ins, {"activation": act} if act else {}, opset=27, n_out=2,
                sizes=sizes, dim_bounds={"L": (1, length)} if dyn else None)


def _cases():
    return [
        _la("la_linear_past", 2, 5, 2, 2, 4, 3, "linear", past=True),
        _la("la_gated_head", 1, 6, 2, 2, 4, 4, "gated", decay="head", seed=10),
        _la("la_gated_key_gqa", 2, 4, 4, 2, 3, 5, "gated", decay="key", past=True, seed=20),
        _la("la_delta", 1, 5, 2, 2, 4, 4, "delta", beta="head", scale=0.7, seed=30),
        _la("la_gdelta_mqa_shared", 2, 4, 4, 1, 4, 2, "gated_delta", decay="head", beta="shared", past=True, seed=40),
        _la("la_gdelta_dyn_t", 1, 7, 2, 2, 4, 4, "gated_delta", decay="key", beta="head", past=True, dyn_t=3, seed=50),
        _la("la_gdelta_f16", 1, 4, 2, 2, 4, 4, "gated_delta", decay="head", beta="head", past=True, dt=F16, seed=60),
        # a float32 state beside float16 activations (ONNX's S != T): present_state stays float32
        _la("la_linear_f16_f32state", 1, 3, 2, 2, 4, 4, "linear", past=True, dt=F16, state_dt=np.float32, seed=70),
        _ccs("ccs_bias_past_silu", 2, 3, 6, 4, bias=True, past=True, act="silu"),
        _ccs("ccs_plain", 1, 2, 5, 3, seed=5),
        _ccs("ccs_k1", 1, 3, 4, 1, bias=True, seed=7),
        _ccs("ccs_f16_swish", 1, 4, 5, 3, past=True, act="swish", dt=F16, seed=9),
        _ccs("ccs_dyn_len", 2, 3, 8, 3, past=True, dyn=3, seed=11),
    ]


def test_stateful_ops_match_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_cases(), tmp_path / "stateful", TOL)


def test_malformed_nodes_are_refused_by_name():
    q = rand((1, 3, 8), seed=1)
    gated_without_decay = case("bad", "LinearAttention", [In("q", q), In("k", q), In("v", q)],
                               {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "gated"}, opset=27, n_out=2,
                               infer=False)
    with pytest.raises(ImportError_, match=r"node 'LinearAttention_0' \(LinearAttention, opset 27\).*requires the decay"):
        ox.load(gated_without_decay.model)
    bad_act = case("bad2", "CausalConvWithState", [In("x", q), In("w", rand((3, 1, 2), seed=2))], {"activation": "gelu"},
                   opset=27, n_out=2, infer=False)
    with pytest.raises(ImportError_, match=r"\(CausalConvWithState, opset 27\).*activation 'gelu'"):
        ox.load(bad_act.model)
