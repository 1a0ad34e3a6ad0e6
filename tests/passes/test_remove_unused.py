"""remove_unused: ops a rewrite left unreachable disappear; graph inputs stay in the signature."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, topo_order, verify
from aitgen.passes import remove_unused
from pass_equivalence import check_pass
from pass_graphgen import random_graphs


def test_dead_ops_and_their_constants_go_inputs_stay():
    x, unused = ag.Tensor([2, 3], name="x"), ag.Tensor([5], name="unused")
    w = ag.constant(np.ones((3,), np.float32), name="w")
    g = Graph.from_outputs({"y": ops.relu(ops.mul(x, w))}, inputs=[x, unused])
    # A rewrite that bypasses mul and relu: the output is now tanh(x), built outside graph.ops.
    gx = g.inputs[0]
    new = ops.tanh(gx)
    g.replace_all_uses(g.outputs["y"], new)
    out = remove_unused(g, compile_options())
    verify(out)
    assert [op.kind.value for op in out.ops] == ["tanh"]
    assert [t.name for t in out.inputs] == ["x", "unused"]
    assert out.constants == []
    assert [u.kind.value for u in gx.users] == ["tanh"]  # no dead reader left on a live tensor


def test_keeps_outputs_of_a_clean_graph():
    x = ag.Tensor([2, 3], name="x")
    g = Graph.from_outputs({"a": ops.relu(x), "b": ops.neg(x)})
    out = check_pass(remove_unused, g, exact=True)
    assert len(out.ops) == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs())
def test_only_ops_an_output_reads_remain(graph):
    out = check_pass(remove_unused, graph, exact=True)
    live, _ = topo_order(out.outputs.values())
    assert len(out.ops) == len(live)
