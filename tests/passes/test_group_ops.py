"""group_ops: independent ops of one kind become one GROUPED op. Exact (each member is the op it
was, through its own reference): check_pass with bit-identical outputs on hand-built multi-branch
graphs and on hypothesis graphs, and members are never connected by a path.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, OpKind, Tensor
from aitgen.passes import PIPELINE, name_graph, run_pipeline
from aitgen.passes.group_ops import group_ops
from pass_equivalence import check_pass
from pass_graphgen import random_graphs
from pass_zoo import ZOO, zoo_graph

RNG = np.random.default_rng(5)


def _c(*shape):
    return ag.constant(RNG.uniform(-0.5, 0.5, size=shape).astype(np.float32))


def before_grouping(g: Graph) -> Graph:
    """The pipeline up to group_ops, and names (assert_independent matches tensors by name)."""
    return run_pipeline(g, compile_options(), PIPELINE[:PIPELINE.index(group_ops)] + [name_graph])


def grouped_pipeline(outputs, inputs=None) -> Graph:
    """The pipeline up to group_ops, then group_ops under check_pass (exact)."""
    g = before_grouping(Graph.from_outputs(outputs, inputs=inputs))
    out = check_pass(group_ops, g, exact=True)
    assert_independent(g, out)
    return out


def groups(g: Graph) -> list[tuple[str, int]]:
    return [(op.attrs.kind.value, len(op.attrs.members)) for op in g.ops if op.kind is OpKind.GROUPED]


def assert_independent(before: Graph, after: Graph) -> None:
    """Every group's members were ops of `before` with no path between any two of them."""
    producer = {}
    for op in before.ops:
        for o in op.outputs:
            producer[o.name] = op
    anc: dict[int, set[int]] = {}
    for op in before.ops:
        s: set[int] = set()
        for t in op.inputs:
            if t.producer is not None:
                s |= anc[id(t.producer)] | {id(t.producer)}
        anc[id(op)] = s
    for op in after.ops:
        if op.kind is not OpKind.GROUPED:
            continue
        members = [producer[outs[0].name] for outs in op.attrs.split(op.outputs, outputs=True)]
        for a in members:
            for b in members:
                assert a is b or id(a) not in anc[id(b)], f"{a.name} reaches {b.name}"


def test_multi_tower_mlp():
    b = IntVar("b", 1, 16)
    x = Tensor([b, 16], name="x")
    towers = []
    for i in range(3):
        h = ops.relu(ops.linear(x * float(i + 2), _c(24, 16), _c(24)))  # same epilogue: one class
        towers.append(ops.linear(h, _c(8, 24), _c(8)))
    g = grouped_pipeline({"y": ops.concat(towers, axis=1)})
    # The three input scalings, the three first GEMMs (relu epilogue), the three second GEMMs.
    assert sorted(groups(g)) == [("fused_elementwise", 3), ("gemm", 3), ("gemm", 3)]
    assert sum(op.kind is not OpKind.RESHAPE for op in g.ops) == 4  # three groups and the concat


def test_parallel_layernorms_and_branches():
    x, y = Tensor([4, 32], name="x"), Tensor([4, 2, 32], name="y")
    a = ops.layernorm(x, _c(32), _c(32))
    b = ops.layernorm(y, _c(32), _c(32), eps=1e-3)
    c = ops.layernorm(ops.linear(x, _c(32, 32)), _c(32), _c(32))  # after a GEMM, any row count
    d = ops.layernorm(x * 2.0, _c(32), _c(32))  # x * 2 becomes its prologue: a class of its own
    g = grouped_pipeline({"a": ops.gelu(a), "b": ops.tanh(b), "c": c, "d": d})
    assert sorted(groups(g)) == [("fused_elementwise", 2), ("layernorm", 3)]


def test_dependent_ops_are_never_grouped():
    x = Tensor([4, 8], name="x")
    w = _c(8, 8)
    chain = ops.linear(ops.linear(x, w), w)                       # gemm -> gemm
    g = grouped_pipeline({"y": chain})
    assert groups(g) == []
    # A path through another kind: gemm -> layernorm -> gemm.
    g = grouped_pipeline({"y": ops.linear(ops.layernorm(ops.linear(x, w)), w)})
    assert groups(g) == []
    # Element-wise ops that depend on each other through a GEMM.
    r = ops.relu(x)
    g = grouped_pipeline({"y": ops.exp(ops.linear(r, w)), "r": ops.sigmoid(r)})
    assert all(k != "fused_elementwise" or n == 2 for k, n in groups(g))


def test_crosswise_pairs_do_not_make_a_cycle():
    # Classes A = {a1, a2} (layernorms) and B = {b1, b2} (GEMMs): a1 -> b2 and b1 -> a2. Either
    # pair may group, not both: contracted, the two groups would feed each other.
    x, y = Tensor([4, 8], name="x"), Tensor([4, 8], name="y")
    a1 = ops.layernorm(x)
    b1 = ops.linear(y, _c(8, 8))
    b2 = ops.linear(a1, _c(8, 8))
    a2 = ops.layernorm(b1)
    g = grouped_pipeline({"a1": a1, "b1": b1, "b2": b2, "a2": a2})
    assert len(groups(g)) == 1


def test_classes_differ_and_nothing_without_a_backend_or_fusion():
    x = Tensor([4, 8], name="x")
    outs = {"a": ops.relu(ops.linear(x, _c(8, 8))), "b": ops.gelu(ops.linear(x * 2.0, _c(8, 8))),
            "c": ops.linear(Tensor([6, 8], name="z"), _c(3, 8))}
    g = grouped_pipeline(outs)
    assert ("gemm", 2) not in groups(g)  # other epilogue, other M: three classes of one
    g0 = before_grouping(Graph.from_outputs({"a": ops.layernorm(x), "b": ops.layernorm(Tensor([2, 8], name="y"))}))
    for opts in (compile_options(fusion=False), compile_options(target="no_such_backend")):
        assert str(check_pass(group_ops, g0, exact=True, opts=opts)) == str(g0)
    assert groups(check_pass(group_ops, g0, exact=True)) == [("layernorm", 2)]


@pytest.mark.parametrize("model", ZOO)
def test_zoo(model):
    g = before_grouping(zoo_graph(model))
    out = check_pass(group_ops, g, exact=True)
    assert_independent(g, out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs(max_steps=16))
def test_random_graphs(graph):
    g = before_grouping(graph)
    out = check_pass(group_ops, g, exact=True)
    assert_independent(g, out)


@st.composite
def branchy_graphs(draw) -> Graph:
    """Branches from two inputs, every value [B, 8], that merge now and then (binary ops across
    branches): many same-class ops, some independent, some not, some crosswise."""
    b = IntVar("b", 1, 4) if draw(st.booleans()) else 3
    pool = [Tensor([b, 8], name="x"), Tensor([b, 8], name="y")]
    made = []
    for _ in range(draw(st.integers(4, 16))):
        t = pool[-1 - draw(st.integers(0, len(pool) - 1))]
        kind = draw(st.sampled_from(["linear", "linear_relu", "layernorm", "layernorm_affine", "unary", "binary"]))
        if kind == "linear":
            out = ops.linear(t, _c(8, 8), _c(8))
        elif kind == "linear_relu":
            out = ops.relu(ops.linear(t, _c(8, 8)))
        elif kind == "layernorm":
            out = ops.layernorm(t)
        elif kind == "layernorm_affine":
            out = ops.layernorm(t, _c(8), _c(8))
        elif kind == "unary":
            out = draw(st.sampled_from([ops.tanh, ops.sigmoid, ops.neg]))(t)
        else:
            out = draw(st.sampled_from([ops.add, ops.mul, ops.maximum]))(t, draw(st.sampled_from(pool)))
        pool.append(out)
        made.append(out)
    leaves = [t for t in made if not t.users]
    return Graph.from_outputs({f"o{i}": t for i, t in enumerate(leaves)}, inputs=pool[:2])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=branchy_graphs())
def test_random_branchy_graphs(graph):
    g = before_grouping(graph)
    out = check_pass(group_ops, g, exact=True)
    assert_independent(g, out)
