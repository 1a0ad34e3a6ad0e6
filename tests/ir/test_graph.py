"""Tensors, ops and graphs: roles, users, copying, toposort, verify, printer, the oracle's input checks."""
import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, GraphError, RuntimeInputError, ShapeError
from aitgen.ir import Graph, OpKind, Role, verify


def small_graph():
    n = ag.IntVar("n", 1, 16)
    x = ag.Tensor([n, 4], name="x")
    w = ag.constant(np.arange(4, dtype=np.float32), name="w")
    h = ops.relu(x * w + 1.0)
    y = ops.gelu(h, approximate="tanh") - h
    return x, w, h, y


def test_roles_producers_users():
    x, w, h, y = small_graph()
    assert x.role is Role.input and w.role is Role.constant and h.role is Role.intermediate
    assert h.producer.kind is OpKind.RELU and y.producer.kind is OpKind.SUB
    assert {u.kind for u in h.users} == {OpKind.GELU, OpKind.SUB}
    g = Graph.from_outputs({"y": y})
    assert g.outputs["y"].role is Role.output


def test_graph_copies_the_users_dag():
    x, w, h, y = small_graph()
    g = Graph.from_outputs({"y": y})
    assert all(t is not x for t in g.tensors)  # passes rewrite the copy, never the user's tensors
    assert g.inputs[0].name == "x" and g.inputs[0].shape == x.shape
    g.ops[-1].inputs.reverse()
    assert y.producer.inputs[0].producer.kind is OpKind.GELU  # the original is untouched
    assert g.constants[0].value is w.value  # constant arrays are shared, not copied


def test_toposort_is_deterministic_and_sorted():
    _, _, _, y = small_graph()
    g1, g2 = Graph.from_outputs(y), Graph.from_outputs(y)
    assert [o.kind for o in g1.ops] == [o.kind for o in g2.ops]
    seen = set(id(t) for t in g1.inputs) | set(id(t) for t in g1.constants)
    for op in g1.ops:
        assert all(id(t) in seen for t in op.inputs)
        seen.update(id(o) for o in op.outputs)
    verify(g1)


def test_deep_chain_does_not_hit_the_recursion_limit():
    x = ag.Tensor([2], name="x")
    t = x
    for _ in range(5000):
        t = ops.relu(t)
    g = Graph.from_outputs(t)
    assert len(g.ops) == 5000
    np.testing.assert_array_equal(ag.reference.run(g, {"x": np.array([-1, 2], np.float32)})["output_0"], [0, 2])


def test_verify_catches_broken_invariants():
    _, _, _, y = small_graph()
    g = Graph.from_outputs({"y": y})
    g.ops.reverse()
    with pytest.raises(GraphError, match="used before it is defined"):
        verify(g)
    g = Graph.from_outputs({"y": y})
    g.ops[0].outputs[0].shape = (ag.IntImm(3), ag.IntImm(3))
    with pytest.raises(GraphError, match="infers"):
        verify(g)
    g = Graph.from_outputs({"y": y})
    g.ops[1].inputs[0].users.clear()
    with pytest.raises(GraphError, match="users"):
        verify(g)


def test_replace_all_uses_and_sort_drop_dead_ops():
    x, w, h, y = small_graph()
    g = Graph.from_outputs({"y": y})
    relu = next(op for op in g.ops if op.kind is OpKind.RELU)
    g.replace_all_uses(relu.outputs[0], relu.inputs[0])
    g.sort()
    assert OpKind.RELU not in {op.kind for op in g.ops}
    verify(g)
    feeds = {"x": np.array([[-3, 1, 2, 3], [0, -1, -2, 5]], np.float32)}
    hv = feeds["x"] * np.arange(4, dtype=np.float32) + 1  # what relu saw, now unclipped
    gelu = 0.5 * hv * (1 + np.tanh(np.sqrt(2 / np.pi) * (hv + 0.044715 * hv ** 3)))
    np.testing.assert_allclose(ag.reference.run(g, feeds)["y"], gelu - hv, rtol=1e-5, atol=1e-6)


def test_printer_golden(golden):
    _, _, _, y = small_graph()
    golden("ir/small_graph.txt", str(Graph.from_outputs({"y": y})))


def test_oracle_checks_inputs():
    x, _, _, y = small_graph()
    ok = np.ones((3, 4), np.float32)
    assert ag.reference.run({"y": y}, {"x": ok})["y"].shape == (3, 4)
    with pytest.raises(RuntimeInputError, match="missing input 'x'"):
        ag.reference.run({"y": y}, {})
    with pytest.raises(RuntimeInputError, match="unknown input 'z'"):
        ag.reference.run({"y": y}, {"x": ok, "z": ok})
    with pytest.raises(RuntimeInputError, match="dtype float64"):
        ag.reference.run({"y": y}, {"x": ok.astype(np.float64)})
    with pytest.raises(RuntimeInputError, match="rank 1"):
        ag.reference.run({"y": y}, {"x": ok[0]})
    with pytest.raises(RuntimeInputError, match="dim 1 is 5, expected 4"):
        ag.reference.run({"y": y}, {"x": np.ones((3, 5), np.float32)})
    with pytest.raises(RuntimeInputError, match="outside its bounds"):
        ag.reference.run({"y": y}, {"x": np.ones((17, 4), np.float32)})


def test_one_intvar_in_two_inputs_must_agree():
    n = ag.IntVar("n", 1, 8)
    a, b = ag.Tensor([n], name="a"), ag.Tensor([n], name="b")
    out = a + b
    with pytest.raises(RuntimeInputError, match="another input gave 'n' = 3"):
        ag.reference.run(out, {"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)})


def test_float16_rounds_per_op():
    x = ag.Tensor([3], dtype="float16", name="x")
    y = (x * 3.0) / 3.0
    xv = np.array([0.1, 1000.3, 2.7], np.float16)
    # float16 storage between the ops: the product is rounded before the division
    expect = (np.float16(xv.astype(np.float32) * 3).astype(np.float32) / 3).astype(np.float16)
    got = ag.reference.run(y, {"x": xv})["output_0"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, expect)


def test_constant_value_checks():
    with pytest.raises(ShapeError, match="value has shape"):
        ag.Tensor([2, 2], value=np.zeros((3,), np.float32), name="c")
    with pytest.raises(DTypeError):
        ag.Tensor([2], dtype="int32", value=np.zeros((2,), np.float32), name="c")
    with pytest.raises(ShapeError, match="static shape"):
        ag.Tensor([ag.IntVar("n", 1, 2)], value=np.zeros((1,), np.float32), name="c")


def test_output_forms():
    x = ag.Tensor([2], name="x")
    y = ops.relu(x)
    assert list(Graph.from_outputs(y).outputs) == ["output_0"]
    assert list(Graph.from_outputs([y, x]).outputs) == ["output_0", "x"]
    with pytest.raises(GraphError, match="not a Tensor"):
        Graph.from_outputs({"y": 3})
