"""sink_reshapes: element-wise ops after a reshape run before it, so that the epilogue and
element-wise fusions see them next to their producer. The pass itself is exact (the same math on
the same values); the pipeline around it is held to the usual 1e-5.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, OpKind, Tensor
from aitgen.ir.dims import IntImm
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.sink_reshapes import dim_groups, sink_reshapes
from pass_equivalence import check_pass
from pass_graphgen import random_graphs
from pass_zoo import ZOO, zoo_graph

RNG = np.random.default_rng(3)


def _c(*shape):
    return ag.constant(RNG.uniform(-1, 1, size=shape).astype(np.float32))


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def sink(outputs) -> Graph:
    return check_pass(sink_reshapes, Graph.from_outputs(outputs), exact=True)


def pipeline(outputs) -> Graph:
    return check_pass(lambda g, o: run_pipeline(g, o), Graph.from_outputs(outputs), exact=False)


def test_dim_groups():
    b = IntVar("b", 1, 4)
    d = lambda *xs: tuple(IntImm(x) if isinstance(x, int) else x for x in xs)  # noqa: E731
    assert dim_groups(d(b, 3, 8), d(b * 3, 8)) == [((0, 2), (0, 1)), ((2, 3), (1, 2))]
    assert dim_groups(d(4, 6), d(4, 1, 6)) == [((0, 1), (0, 1)), ((1, 2), (1, 3))]
    assert dim_groups(d(2, 3, 4), d(3, 8)) == [((0, 3), (0, 2))]
    assert dim_groups(d(2, 3), d(7)) is None


def test_gemm_reshape_gelu_residual_becomes_one_gemm():
    b = IntVar("b", 1, 4)
    x = Tensor([b * 5, 8], name="x")
    r = Tensor([b, 5, 6], name="r")
    y = ops.reshape(ops.linear(x, _c(6, 8), _c(6)), [b, 5, 6])  # a [B*S, N] GEMM seen as [B, S, N]
    out = ops.gelu(y) * _c(6) + r                                # per-column scale, residual
    g = sink({"y": out})
    assert sorted(kinds(g)) == ["add", "gelu", "gemm", "mul", "reshape", "reshape"]  # r as [B*S, N]
    assert g.ops[-1].kind is OpKind.RESHAPE
    g = pipeline({"y": out})
    assert [k for k in kinds(g) if k != "reshape"] == ["gemm"]
    gemm = next(op for op in g.ops if op.kind is OpKind.GEMM)
    assert [n.kind.value for n in gemm.attrs.epilogue.expr.nodes] == ["gelu", "mul", "add"]


def test_elementwise_chain_across_reshapes_is_one_group():
    x = Tensor([4, 6], name="x")
    h = ops.reshape(ops.relu(x), [2, 2, 6])
    h = ops.reshape(ops.tanh(h) + Tensor([2, 2, 1], name="row"), [24])  # one value per row
    out = ops.sigmoid(h)
    g = pipeline({"y": out})
    assert [k for k in kinds(g) if k != "reshape"] == ["fused_elementwise"]


def test_operands_that_cannot_follow_stay():
    x = Tensor([6], name="x")
    y = ops.reshape(ops.relu(x), [3, 2])
    g = sink({"y": y + Tensor([3, 1], name="v")})  # [3, 1] over [6]: broadcast within a group
    assert kinds(g) == ["relu", "reshape", "add"]
    y = ops.reshape(ops.relu(x), [3, 2])
    g = sink({"y": y + Tensor([2, 3, 2], name="big")})  # the reshaped result is broadcast larger
    assert kinds(g) == ["relu", "reshape", "add"]


def test_a_reshape_that_is_also_read_elsewhere_stays_for_that_reader():
    x = Tensor([4, 6], name="x")
    y = ops.reshape(ops.relu(x), [24])
    g = sink({"a": ops.exp(y), "y": y})
    assert sorted(kinds(g)) == ["exp", "relu", "reshape", "reshape"]


def test_fusion_false_changes_nothing():
    x = Tensor([4, 6], name="x")
    g0 = Graph.from_outputs({"y": ops.exp(ops.reshape(ops.relu(x), [24]))})
    g = check_pass(sink_reshapes, g0, exact=True, opts=compile_options(fusion=False))
    assert str(g) == str(g0)


def test_zoo_unchanged_or_exact():
    for name in ZOO:
        stop = PIPELINE.index(sink_reshapes)
        g = run_pipeline(zoo_graph(name), compile_options(), PIPELINE[:stop])
        check_pass(sink_reshapes, g, exact=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs(max_steps=14))
def test_random_graphs(graph):
    check_pass(sink_reshapes, graph, exact=True)
