"""ONNX element-wise ops: import, run through the oracle and one CPU build, compare with onnxruntime.

Tolerances: see onnx_cases.py (float32 rtol 1e-5 / atol 1e-6; integers and bools exact).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, TensorProto, case, check_cases, ints, rand

import aitgen as ag
from aitgen.frontend import onnx as ox
from aitgen.ir.op import OpKind

X = rand((3, 4, 5))
POS = rand((3, 4, 5), 0.1, 4.0, seed=1)
UNIT = rand((3, 4, 5), -0.95, 0.95, seed=2)
Y = rand((4, 1), seed=3)  # broadcasts against X

FLOAT_UNARY = {
    "Relu": X, "Sigmoid": X, "Tanh": X, "Exp": X, "Log": POS, "Sqrt": POS, "Reciprocal": POS, "Abs": X,
    "Neg": X, "Erf": X, "HardSwish": X, "Sin": X, "Cos": X, "Tan": UNIT, "Asin": UNIT, "Acos": UNIT,
    "Atan": X, "Sinh": X, "Cosh": X, "Asinh": X, "Acosh": POS + 1, "Atanh": UNIT,
    "Floor": X, "Ceil": X, "Sign": X, "Softplus": X, "Softsign": X, "Mish": X,
}
ACTIVATIONS = [  # (op, attrs, opset)
    ("LeakyRelu", {"alpha": 0.1}, 17), ("Elu", {"alpha": 0.7}, 17), ("Selu", {}, 17),
    ("Celu", {"alpha": 1.5}, 17), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 17),
    ("ThresholdedRelu", {"alpha": 0.5}, 17), ("Shrink", {"bias": 0.3, "lambd": 0.6}, 17),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
]
FLOAT_BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


def _cases():
    cs = [case(f"u_{op}", op, [In("x", v)], opset=18) for op, v in FLOAT_UNARY.items()]
    cs += [case(f"a_{op}_{i}", op, [In("x", X)], attrs, opset=opset) for i, (op, attrs, opset) in enumerate(ACTIVATIONS)]
    for op in FLOAT_BINARY:
        a = POS if op == "Pow" else X
        cs.append(case(f"b_{op}", op, [In("a", a), In("b", Y)]))
    # Round: halves go to the even neighbour
    cs.append(case("u_Round", "Round", [In("x", np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -3.7], np.float32))]))
    edge = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 2.0], np.float32)
    cs += [case("u_IsNaN", "IsNaN", [In("x", edge)]), case("u_IsInf", "IsInf", [In("x", edge)]),
           case("u_IsInf_pos", "IsInf", [In("x", edge)], {"detect_negative": 0})]
    i1, i2 = ints((3, 4)), ints((4,), 1, 7, seed=1) * np.array([1, -1, 1, -1])
    cs += [case("i_Mod", "Mod", [In("a", i1), In("b", i2)]), case("i_Fmod", "Mod", [In("a", i1), In("b", i2)], {"fmod": 1}),
           case("f_Fmod", "Mod", [In("a", X), In("b", POS)], {"fmod": 1})]
    cs += [case(f"i_{op}", op, [In("a", i1.astype(np.int32)), In("b", i2.astype(np.int32))], opset=18)
           for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")]
    cs.append(case("i_BitwiseNot", "BitwiseNot", [In("a", i1)], opset=18))
    cs += [case(f"i_{op}", op, [In("a", i1), In("b", i2)]) for op in ("Add", "Sub", "Mul", "Div", "Max", "Min")]
    cs.append(case("i_Pow", "Pow", [In("a", ints((5,), 0, 5)), In("b", ints((5,), 0, 4, seed=4))]))
    cs.append(case("i_Sign", "Sign", [In("a", i1)]))
    bools = [In("p", ints((3, 4), 0, 2).astype(bool)), In("q", ints((4,), 0, 2, seed=5).astype(bool))]
    cs += [case(f"l_{op}", op, bools) for op in ("And", "Or", "Xor")]
    cs.append(case("l_Not", "Not", bools[:1]))
    cs += [case(f"v_{op}", op, [In("a", X), In("b", Y), In("c", rand((5,), seed=6))]) for op in ("Sum", "Mean", "Max", "Min")]
    cs.append(case("v_Sum1", "Sum", [In("a", X)]))
    cs += [case("c_clip6", "Clip", [In("x", X)], {"min": -0.5, "max": 0.7}, opset=7),
           case("c_clip13", "Clip", [In("x", X), In("lo", np.float32(-1.0), True), In("hi", np.float32(0.5), True)], opset=13),
           case("c_clip_min", "Clip", [In("x", X), In("lo", np.float32(-1.0), True)], opset=13),
           case("c_clip_max", "Clip", [In("x", X), None, In("hi", np.float32(0.5), True)], opset=13),
           case("c_clip_rt", "Clip", [In("x", X), In("lo", np.float32(-1.0)), In("hi", np.float32(0.5))], opset=13),
           case("c_clip_int", "Clip", [In("x", i1), In("lo", np.int64(-3), True), In("hi", np.int64(4), True)], opset=13)]
    cs += [case("w_where", "Where", [In("c", X > 0), In("a", X), In("b", Y)]),
           case("p_prelu", "PRelu", [In("x", X), In("s", rand((4, 1), 0, 1, seed=7), True)]),
           case("p_prelu_rt", "PRelu", [In("x", X), In("s", rand((5,), 0, 1, seed=8))])]
    cs += [case("t_cast_i", "Cast", [In("x", X * 3)], {"to": TensorProto.INT64}),
           case("t_cast_b", "Cast", [In("x", np.array([0.0, 1.5, -2.0], np.float32))], {"to": TensorProto.BOOL}),
           case("t_cast_f16", "Cast", [In("x", X)], {"to": TensorProto.FLOAT16}),
           case("t_cast_i2f", "Cast", [In("x", i1)], {"to": TensorProto.FLOAT}),
           case("t_castlike", "CastLike", [In("x", i1), In("like", np.zeros(1, np.float32))], opset=15)]
    # a dynamic batch, run at two sizes in the CPU build
    n_x = In("x", rand((2, 4, 5), seed=9), dims=["n_el", 4, 5])
    cs.append(case("d_add", "Add", [n_x, In("b", Y)], dim_bounds={"n_el": (1, 8)},
                   sizes=[{"x": rand((7, 4, 5), seed=10)}]))
    return cs


def test_elementwise_ops_match_onnxruntime(tmp_path):
    cases = _cases()
    check_cases(cases, tmp_path / "m")
    ops_seen = {c.model.graph.node[0].op_type for c in cases}
    assert len(ops_seen) >= 60, sorted(ops_seen)


def test_dynamic_dims_are_intvars():
    c = case("dyn", "Add", [In("x", X, dims=["batch", 4, "k"]), In("b", Y)], dim_bounds={"batch": (2, 9)})
    ins, outs = ox.load(c.model, dim_bounds={"batch": (2, 9)})
    b, k = ins["x"].shape[0], ins["x"].shape[2]
    assert isinstance(b, ag.IntVar) and (b.lb, b.ub) == (2, 9)
    assert isinstance(k, ag.IntVar) and (k.lb, k.ub) == (1, ox.DEFAULT_DIM_BOUND)
    assert outs["y"].shape[0] is b


def test_decompositions_use_ir_ops():
    # Softplus decomposes without overflow: large inputs give x, not inf.
    c = case("sp", "Softplus", [In("x", np.array([100.0, -100.0, 0.0], np.float32))])
    _, outs = ox.load(c.model)
    got = ag.reference.run(outs, c.feeds)["y"]
    np.testing.assert_allclose(got, np.logaddexp(0.0, c.feeds["x"].astype(np.float64)), rtol=1e-6, atol=1e-30)
    # A node on constants folds away: nothing but the graph input's op remains.
    c = case("fold", "Add", [In("a", np.float32(2.0), True), In("b", np.float32(3.0), True)])
    _, outs = ox.load(c.model)
    assert outs["y"].is_constant and float(outs["y"].value) == 5.0
    c = case("relu", "Relu", [In("x", X)])
    _, outs = ox.load(c.model)
    assert outs["y"].producer.kind is OpKind.RELU


@pytest.mark.parametrize("op,attrs,err", [
    ("Cast", {"to": TensorProto.STRING}, "STRING"),  # (DOUBLE, INT4, FLOAT4E2M1, FLOAT8E8M0 have dtypes now)
])
def test_unsupported_dtype_is_typed(op, attrs, err):
    from aitgen.errors import UnsupportedOpError
    c = case("bad", op, [In("x", X)], attrs, opset=25)
    with pytest.raises(UnsupportedOpError, match=err):
        ox.load(c.model)


def test_swiglu_matches_numpy_reference(tmp_path):
    """SwiGLU (opset 28): Swish(a) * b, alpha 1 (silu) and 0.5, float32 and float16, a dynamic batch,
    against onnx's reference (onnxruntime 1.32 has no kernel). Tolerance: float32 rtol 1e-5 /
    atol 1e-6; float16 rtol 2e-3 (onnx's reference rounds the sigmoid to float16 before the
    products, the CPU build once at the end)."""
    from onnx_cases import check_cases_ref
    a, b = rand((3, 5), seed=11), rand((3, 5), seed=12)
    cs = [case(f"swiglu_{alpha}", "SwiGLU", [In("a", a, dims=["N", 5]), In("b", b, dims=["N", 5])], {"alpha": alpha},
               opset=28, ort=False, dim_bounds={"N": (1, 4)}, sizes=[{"a": a[:1], "b": b[:1]}]) for alpha in (1.0, 0.5)]
    check_cases_ref(cs, tmp_path / "f32", dict(rtol=1e-5, atol=1e-6))
    h = [case("swiglu_f16", "SwiGLU", [In("a", a.astype(np.float16)), In("b", b.astype(np.float16))], opset=28, ort=False)]
    check_cases_ref(h, tmp_path / "f16", dict(rtol=2e-3, atol=1e-3))


def test_swiglu_refuses_broadcasting():
    from aitgen.errors import ImportError_
    c = case("s", "SwiGLU", [In("a", rand((3, 5))), In("b", rand((1, 5)))], opset=28, infer=False)
    with pytest.raises(ImportError_, match="share shape"):
        ox.load(c.model)
