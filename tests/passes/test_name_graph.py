"""name_graph: every tensor and op gets a unique, valid, unreserved C identifier."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, verify
from aitgen.passes import name_graph
from aitgen.passes.name_graph import is_valid_name, sanitize
from pass_equivalence import check_pass


@pytest.mark.parametrize("raw, want", [
    ("layer1.0.conv1.weight", "layer1_0_conv1_weight"),
    ("input.1", "input_1"),
    ("0", "t_0"),
    ("int", "int_"),
    ("__x..y__", "x_y"),
    ("a b/c:0", "a_b_c_0"),
    ("", "t"),
])
def test_sanitize(raw, want):
    assert sanitize(raw, "t") == want
    assert is_valid_name(want)


def _names(g: Graph) -> list[str]:
    return [t.name for t in g.tensors] + [op.name for op in g.ops]


def _messy_graph() -> Graph:
    x = ag.Tensor([2, 3], name="input.1")
    y = ag.Tensor([3], name="x_1")
    w1 = ag.constant(np.ones(3, np.float32), name="layer1.0.conv1.weight")
    w2 = ag.constant(np.full(3, 2.0, np.float32), name="layer1.0.conv1.weight")  # a duplicate name
    a = ops.relu(x * w1, name="layer1.0.relu")
    b = ops.add(a, y, name="x")
    c = ops.tanh(b * w2, name="class")
    d = ops.neg(c)
    d.name = "x"  # a tensor that clashes with an op's name
    return Graph.from_outputs({"out": ops.sigmoid(d), "second.out": c}, inputs=[x, y])


def test_names_are_valid_unique_and_keep_what_was_valid():
    out = check_pass(name_graph, _messy_graph(), exact=True)
    names = _names(out)
    assert all(is_valid_name(n) for n in names), names
    assert len(names) == len(set(names))
    assert [t.name for t in out.inputs] == ["input_1", "x_1"]  # x_1 was valid: kept
    assert {"layer1_0_conv1_weight", "layer1_0_conv1_weight_1"} <= set(names)
    assert out.annotations["named"] is True
    assert out.annotations["renamed"]["input_1"] == "input.1"
    assert out.outputs["out"].name == "out"  # an unnamed output is named after its key
    verify(out)  # with "named" set, verify rejects duplicate tensor names


def test_idempotent():
    once = name_graph(_messy_graph(), compile_options())
    text = str(once)
    assert str(name_graph(once, compile_options())) == text


def test_valid_names_win_over_sanitised_ones():
    x = ag.Tensor([2], name="a.b")
    y = ag.Tensor([2], name="a_b")
    out = name_graph(Graph.from_outputs({"o": x + y}, inputs=[x, y]), compile_options())
    assert [t.name for t in out.inputs] == ["a_b_1", "a_b"]
