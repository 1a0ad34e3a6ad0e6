"""toposort: a deterministic order, defs before uses, and a cycle reported instead of looped on."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.errors import GraphError
from aitgen.ir import Graph, verify
from aitgen.passes import toposort
from pass_equivalence import check_pass


def _diamond() -> Graph:
    x = ag.Tensor([2, 3], name="x")
    a = ops.relu(x, name="a")
    b = ops.tanh(x, name="b")
    c = ops.add(a, ops.mul(b, ag.constant(np.full((3,), 2.0, np.float32))), name="c")
    return Graph.from_outputs({"y": ops.neg(c, name="y"), "z": b})


def test_order_is_deterministic():
    assert str(toposort(_diamond(), compile_options())) == str(toposort(_diamond(), compile_options()))


def test_restores_a_scrambled_op_list():
    g = _diamond()
    g.ops.reverse()
    with pytest.raises(GraphError):
        verify(g)
    out = check_pass(toposort, g.copy(), exact=True)
    verify(out)
    assert [op.name for op in toposort(g, compile_options()).ops] == [op.name for op in _diamond().ops]


def test_cycle_is_reported_with_its_ops():
    x = ag.Tensor([4], name="x")
    c = ops.tanh(ops.neg(ops.relu(x, name="a"), name="b"), name="c")
    g = Graph.from_outputs({"y": c})
    first = next(op for op in g.ops if op.name == "a")
    first.replace_input(first.inputs[0], g.outputs["y"])  # a now reads c: a -> b -> c -> a
    with pytest.raises(GraphError, match="cycle") as e:
        toposort(g, compile_options())
    assert all(f"'{n}'" in str(e.value) for n in "abc")
