"""Hostile ONNX names on the run-time-size converters (Resize, Loop, If): the names of the sizes
the run binds come from node names, graph inputs keep theirs; they must reach generated C++ escaped,
and errors name them. Loop and If also carry hostile names inside their bodies (nodes, body inputs
and outputs, initializers, outer-scope references). Each model builds, matches onnx.reference and
onnxruntime, refuses a bad run by name and stays usable after it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, rand

import aitgen as ag
from aitgen.errors import RuntimeInputError
from aitgen.frontend import onnx as ox

HOSTILE = 'r"; system("touch /tmp/pwned"); //\n*/ #include <x>'


def test_hostile_node_name_on_runtime_resize(tmp_path):
    c = case("hostile", "Resize", [In("x", rand((1, 1, 4, 4), seed=1)), None, In("s", np.array([1, 1, 2, 0.5], np.float32))],
             {"mode": "linear"}, opset=19)
    c.model.graph.node[0].name = HOSTILE
    _, outs = ox.load(c.model)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    ref = ag.reference.run(outs, c.feeds)["y"]
    np.testing.assert_allclose(m.run(c.feeds)["y"], ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeInputError):
        m.run({**c.feeds, "s": np.array([1, 1, 1000, 1], np.float32)})
    np.testing.assert_allclose(m.run(c.feeds)["y"], ref, rtol=1e-6, atol=1e-6)
    m.close()


def _h(tag: str) -> str:
    """A distinct hostile name: quotes, a backslash, a newline, a comment end, an #include, a call."""
    return f"{tag} \\ '{tag}' {HOSTILE}"


def _model(nodes, ins, outs, inits, opset=16):
    from onnx_cases import helper
    g = helper.make_graph(nodes, "main", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)
    return m


def _loop_model():
    """Loop with a run-time trip count: acc' = acc + table[i] + one; scan output acc' * i. Every
    name (node, graph and body inputs and outputs, initializers in and outside the body, the
    outer-scope table the body reads) is hostile."""
    from onnx_cases import TensorProto, helper, numpy_helper
    F, vi = TensorProto.FLOAT, helper.make_tensor_value_info
    i, c, acc, row, a1, a2, fi, s, co = (_h(t) for t in ("i", "c", "acc", "row", "acc1", "acc2", "fi", "s", "c_o"))
    one, table = _h("one"), _h("table")
    body_nodes = [helper.make_node("Gather", [table, i], [row], axis=0, name=_h("gather")),
                  helper.make_node("Add", [acc, row], [a1], name=_h("add")),
                  helper.make_node("Add", [a1, one], [a2], name=_h("add one")),
                  helper.make_node("Cast", [i], [fi], to=F, name=_h("cast")),
                  helper.make_node("Mul", [a2, fi], [s], name=_h("mul")),
                  helper.make_node("Identity", [c], [co], name=_h("identity"))]
    body = helper.make_graph(body_nodes, _h("body"),
                             [vi(i, TensorProto.INT64, []), vi(c, TensorProto.BOOL, []), vi(acc, F, [2])],
                             [vi(co, TensorProto.BOOL, []), vi(a2, F, [2]), vi(s, F, [2])],
                             [numpy_helper.from_array(np.array(1.0, np.float32), one)])
    m_in, cond, acc0, y0, y1 = _h("M"), _h("cond"), _h("acc0"), _h("y acc"), _h("y scan")
    loop = helper.make_node("Loop", [m_in, cond, acc0], [y0, y1], body=body, name=_h("loop"))
    return _model([loop], [vi(m_in, TensorProto.INT64, []), vi(acc0, F, [2]), vi(table, F, [5, 2])],
                  [vi(y0, F, None), vi(y1, F, None)], [numpy_helper.from_array(np.array(True), cond)])


def _if_model():
    """If under a run-time condition: output 0 of different shapes per branch ([3, 2] vs [6, 4],
    sizes the run binds, named after the node), output 1 the same shape; hostile names throughout,
    branch initializers included."""
    from onnx_cases import TensorProto, helper, numpy_helper
    F, vi = TensorProto.FLOAT, helper.make_tensor_value_info
    x, c = _h("x"), _h("cond")
    st, en, ax, k = _h("st"), _h("en"), _h("ax"), _h("k")
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in ((st, [0]), (en, [2]), (ax, [1]))]
    then_g = helper.make_graph([helper.make_node("Slice", [x, st, en, ax], [_h("s")], name=_h("slice")),
                                helper.make_node("Add", [_h("s"), _h("s")], [_h("t")], name=_h("add")),
                                helper.make_node("Mul", [x, k], [_h("t2")], name=_h("mul"))], _h("then"), [],
                               [vi(_h("t"), F, None), vi(_h("t2"), F, None)],
                               inits + [numpy_helper.from_array(np.array(3.0, np.float32), k)])
    else_g = helper.make_graph([helper.make_node("Concat", [x, x], [_h("e")], axis=0, name=_h("concat")),
                                helper.make_node("Neg", [x], [_h("e2")], name=_h("neg"))], _h("else"), [],
                               [vi(_h("e"), F, None), vi(_h("e2"), F, None)])
    node = helper.make_node("If", [c], [_h("y"), _h("y2")], then_branch=then_g, else_branch=else_g, name=_h("if"))
    return _model([node], [vi(c, TensorProto.BOOL, []), vi(x, F, [3, 4])],
                  [vi(_h("y"), F, None), vi(_h("y2"), F, None)], [])


def _expect(model, feeds):
    """onnx.reference and onnxruntime (where it is installed) agree; their answer."""
    from onnx.reference import ReferenceEvaluator
    from onnx_cases import ort
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    if ort is not None:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for k, v in zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)):
            np.testing.assert_allclose(v, want[k], rtol=1e-6, atol=1e-6, err_msg="onnxruntime vs onnx.reference")
    return want


def _check(m, outs, feeds, want):
    # exact up to float32 rounding: the same ops in the same order (tolerance rtol/atol 1e-6)
    got, ref = m.run(feeds), ag.reference.run(outs, feeds)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(ref[k], want[k], rtol=1e-6, atol=1e-6, err_msg=f"oracle {k!r}")
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=f"CPU build {k!r}")


def test_hostile_names_in_a_runtime_loop(tmp_path):
    model = _loop_model()
    _, outs = ox.load(model)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "loop")
    table = rand((5, 2), seed=2)
    base = {_h("acc0"): rand((2,), seed=1), _h("table"): table}
    for trips in (3, 5, 1):
        feeds = {**base, _h("M"): np.array(trips, np.int64)}
        _check(m, outs, feeds, _expect(model, feeds))
    # 6 trips would gather row 5 of a 5-row table: the run is refused, naming the Loop node
    with pytest.raises(RuntimeInputError) as e:
        m.run({**base, _h("M"): np.array(6, np.int64)})
    assert _h("loop") in str(e.value)
    feeds = {**base, _h("M"): np.array(4, np.int64)}
    _check(m, outs, feeds, _expect(model, feeds))  # still usable
    m.close()


def test_hostile_names_in_a_runtime_if(tmp_path):
    model = _if_model()
    _, outs = ox.load(model)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "if")
    xv = rand((3, 4), seed=3)
    for cv in (True, False, True):
        feeds = {_h("cond"): np.array(cv), _h("x"): xv}
        _check(m, outs, feeds, _expect(model, feeds))
    # a wrongly shaped input is refused by its (hostile) name
    with pytest.raises(RuntimeInputError) as e:
        m.run({_h("cond"): np.array(True), _h("x"): rand((3, 5))})
    assert _h("x") in str(e.value)
    feeds = {_h("cond"): np.array(False), _h("x"): xv}
    _check(m, outs, feeds, _expect(model, feeds))  # still usable
    m.close()
