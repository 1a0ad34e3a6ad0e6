"""FlexAttention (ai.onnx.preview opset 1; ops_attention.py): the attention core with score_mod and
prob_mod subgraphs inlined over the scores / probabilities, against onnx's numpy reference in ONE
CPU build (onnxruntime 1.32 has no ai.onnx.preview kernels). Cases: no modifier, a score_mod
with its own initializer (a relative-position bias) and a -inf causal mask built from a constant,
a prob_mod, both, GQA, an explicit scale, float16 (softmax in float32) and softmax_precision.
Both modifiers reuse names (input "x", which is also Q's name, and output "o"): each subgraph is a scope.
Tolerance: rtol 2e-3 / atol 2e-3 (float16 cases; float32 ones agree to ~1e-6).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import Case, check_cases_ref, rand

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TOL = dict(rtol=2e-3, atol=2e-3)


def _mod_graph(name: str, shape, dt, body: str, extra=None):
    """A one-input modifier: body 'add' (s + an initializer), 'mask' (where(const mask, s, -inf)),
    'scale2' (s * 2), 'tanh' (a soft cap)."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    inp = helper.make_tensor_value_info("x", et, list(shape))  # "x": also the outer Q's name
    out = helper.make_tensor_value_info("o", et, list(shape))
    if body == "add":
        nodes, inits = [helper.make_node("Add", ["x", "bias"], ["o"])], [numpy_helper.from_array(extra.astype(dt), "bias")]
    elif body == "mask":
        nodes = [helper.make_node("Where", ["keep", "x", "ninf"], ["o"])]
        inits = [numpy_helper.from_array(extra, "keep"), numpy_helper.from_array(np.array(-np.inf, dt), "ninf")]
    elif body == "scale2":
        nodes, inits = [helper.make_node("Mul", ["x", "two"], ["o"])], [numpy_helper.from_array(np.array(2.0, dt), "two")]
    else:
        nodes = [helper.make_node("Div", ["x", "c"], ["t"]), helper.make_node("Tanh", ["t"], ["u"]),
                 helper.make_node("Mul", ["u", "c"], ["o"])]
        inits = [numpy_helper.from_array(np.array(3.0, dt), "c")]
    return helper.make_graph(nodes, name, [inp], [out], inits)


def _flex(name, b, hq, hk, lq, lk, e, ev, *, dt=np.float32, score=None, prob=None, seed=0, **attrs):
    q, k, v = (rand(s, seed=seed + i).astype(dt) for i, s in
               enumerate(((b, hq, lq, e), (b, hk, lk, e), (b, hk, lk, ev))))
    sdt = {None: np.float32 if dt == np.float16 else dt, TensorProto.DOUBLE: np.float64,
           TensorProto.FLOAT: np.float32}[attrs.get("softmax_precision")]
    shape = (b, hq, lq, lk)
    if score:
        attrs["score_mod"] = _mod_graph("score", shape, sdt, *score)
    if prob:
        attrs["prob_mod"] = _mod_graph("prob", shape, sdt, prob)
    node = helper.make_node("FlexAttention", ["x", "k", "v"], ["y"], domain="ai.onnx.preview", **attrs)
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    ins = [helper.make_tensor_value_info(n, et, list(a.shape)) for n, a in (("x", q), ("k", k), ("v", v))]
    g = helper.make_graph([node], name, ins, [helper.make_tensor_value_info("y", et, [b, hq, lq, ev])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24), helper.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 10
    return Case(name, m, {"x": q, "k": k, "v": v}, ort=False)


def _cases():
    causal = np.tril(np.ones((4, 6), bool), 2)
    return [
        _flex("flex_plain", 2, 2, 2, 4, 6, 8, 5),
        _flex("flex_relpos_gqa", 1, 4, 2, 4, 6, 8, 8, score=("add", rand((4, 6), seed=9)), seed=3),
        _flex("flex_causal_prob", 2, 2, 1, 4, 6, 4, 4, score=("mask", causal), prob="scale2", scale=0.3, seed=5),
        _flex("flex_softcap_f16", 1, 2, 2, 4, 6, 8, 8, dt=np.float16, score=("tanh",), seed=7),
        _flex("flex_f64_softmax", 1, 2, 2, 4, 6, 8, 8, dt=np.float32, prob="scale2", seed=11,
              softmax_precision=TensorProto.DOUBLE),
    ]


def test_flex_attention_matches_reference(tmp_path):
    check_cases_ref(_cases(), tmp_path / "flex", TOL)


def test_if_branches_reusing_a_name_are_separate_scopes():
    # Both branches of a run-time If define "o" (valid ONNX: each subgraph is a scope); before
    # subgraphs were scopes the second branch failed as "defined twice".
    import aitgen as ag
    from aitgen.frontend import onnx as ox
    f = TensorProto.FLOAT
    one = numpy_helper.from_array(np.array(1.0, np.float32), "c")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "c")
    out = [helper.make_tensor_value_info("o", f, [3])]
    then = helper.make_graph([helper.make_node("Add", ["x", "c"], ["o"])], "then", [], out, [one])
    other = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["o"])], "else", [], out, [two])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                        helper.make_tensor_value_info("x", f, [3])],
                          [helper.make_tensor_value_info("y", f, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    _, outs = ox.load(m)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    for c, want in ((True, x + 1), (False, x * 2)):
        got = ag.reference.run(outs, {"cond": np.array(c), "x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=0)
