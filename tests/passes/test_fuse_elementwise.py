"""fuse_elementwise: element-wise groups become one FUSED_ELEMENTWISE op, and the oracle agrees.

Not bit-exact for 16-bit graphs: the fused expression computes in float32 without rounding
between its nodes (as every kernel does), so pass_equivalence's 16-bit tolerance applies; float32
graphs come out exact.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, OpKind
from aitgen.ops.registry import Category, get_opdef
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.fuse_elementwise import MAX_OPERANDS, fuse_elementwise, partition_subgraphs
from pass_equivalence import check_pass
from pass_graphgen import random_graphs
from pass_zoo import ZOO, zoo_graph

FUSED = OpKind.FUSED_ELEMENTWISE


def traffic(g: Graph) -> int:
    """Bytes every launching op reads (each distinct operand once) and writes, at upper bounds."""
    total = 0
    for op in g.ops:
        if get_opdef(op.kind).category is Category.VIEW:
            continue
        seen = {id(t): t for t in op.inputs}
        total += sum(t.nbytes_upper() for t in seen.values()) + sum(o.nbytes_upper() for o in op.outputs)
    return total


def fuse(g: Graph, **kw) -> Graph:
    """check_pass, plus the promise of the docstring: fusion never raises memory traffic."""
    out = check_pass(fuse_elementwise, g, exact=False, **kw)
    assert traffic(out) <= traffic(g)
    return out


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def fused_ops(g: Graph):
    return [op for op in g.ops if op.kind is FUSED]


def before_fusion(g: Graph) -> Graph:
    """The graph as the pipeline hands it to fuse_elementwise (epilogues already absorbed)."""
    return run_pipeline(g, compile_options(), PIPELINE[:PIPELINE.index(fuse_elementwise)])


# -- the zoo and random graphs --------------------------------------------------------------------

@pytest.mark.parametrize("model", ZOO)
def test_zoo_as_built_and_as_the_pipeline_hands_it_over(model):
    fuse(zoo_graph(model))
    fuse(before_fusion(zoo_graph(model)))


@given(random_graphs())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_graphs(graph):
    note(str(graph))
    assert_groups_acyclic(graph, partition_subgraphs(graph))
    out = fuse(graph)
    for op in fused_ops(out):
        assert len(op.attrs.expr.nodes) >= 2 and len(op.inputs) <= MAX_OPERANDS
    assert not any(len(g) < 2 for g in partition_subgraphs(out))  # nothing left to fuse
    assert kinds(fuse_elementwise(out.copy(), compile_options())) == kinds(out)


@st.composite
def tangled_dags(draw):
    """Element-wise ops interleaved with ops outside any group (softmax, linear), each reading one
    or two random earlier tensors: the paths that leave a group and come back (rule 3)."""
    x = ag.Tensor([3, 8], name="x")
    w = ag.constant(np.linspace(-0.5, 0.5, 64, dtype=np.float32).reshape(8, 8), name="w")
    pool = [x]
    for _ in range(draw(st.integers(2, 24))):
        a, b = (pool[-1 - draw(st.integers(0, min(len(pool) - 1, 6)))] for _ in range(2))
        kind = draw(st.sampled_from(["add", "mul", "sub", "tanh", "relu", "softmax", "linear"]))
        if kind in ("add", "mul", "sub"):
            pool.append(getattr(ops, kind)(a, b))
        elif kind == "softmax":
            pool.append(ops.softmax(a, -1))
        elif kind == "linear":
            pool.append(ops.linear(a, w))
        else:
            pool.append(getattr(ops, kind)(a))
    picks = {id(pool[-1]): pool[-1]}
    for t in draw(st.lists(st.sampled_from(pool[1:]), max_size=3)):
        picks.setdefault(id(t), t)
    return Graph.from_outputs({f"o{i}": t for i, t in enumerate(picks.values())})


@given(tangled_dags())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_tangled_dags_stay_acyclic(graph):
    note(str(graph))
    assert_groups_acyclic(graph, partition_subgraphs(graph))  # fusing a cycle would hang the sort
    fuse(graph)


def assert_groups_acyclic(graph: Graph, groups) -> None:
    """Kahn's algorithm over the ops with each group contracted to one node."""
    node = {id(op): id(op) for op in graph.ops}
    for g in groups:
        node.update({id(op): id(g[0]) for op in g})
    succ = {n: set() for n in node.values()}
    for op in graph.ops:
        for o in op.outputs:
            succ[node[id(op)]].update(node[id(u)] for u in o.users if id(u) in node and node[id(u)] != node[id(op)])
    indeg = {n: 0 for n in succ}
    for n in succ:
        for m in succ[n]:
            indeg[m] += 1
    ready = [n for n, d in indeg.items() if d == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    assert done == len(succ), "the groups form a cycle"


# -- unit cases -----------------------------------------------------------------------------------

def test_chain_becomes_one_op_with_one_output():
    x, y = ag.Tensor([4, 8], name="x"), ag.Tensor([8], name="y")
    out = fuse(Graph.from_outputs({"z": ops.tanh(ops.relu(x) * 2.0 + y)}))
    assert kinds(out) == ["fused_elementwise"]
    (op,) = out.ops
    assert [n.kind for n in op.attrs.expr.nodes] == [OpKind.RELU, OpKind.MUL, OpKind.ADD, OpKind.TANH]
    assert len(op.outputs) == 1 and out.outputs["z"] is op.outputs[0]
    assert len(op.inputs) == 3  # x, the scalar 2, y: each read once


def test_diamond_and_shared_operand():
    x = ag.Tensor([3, 5], name="x")
    a = ops.relu(x)
    out = fuse(Graph.from_outputs({"d": ops.tanh(a) + ops.sigmoid(a) * x}))
    assert kinds(out) == ["fused_elementwise"]
    assert out.ops[0].inputs == [x for x in out.inputs]  # x once, although three ops read it


def test_intermediate_read_outside_becomes_an_extra_output():
    x = ag.Tensor([4, 6], name="x")
    a = ops.relu(x) * 2.0
    g = ops.linear(a, ag.constant(np.ones((3, 6), np.float32)))  # reads a outside the group
    out = fuse(Graph.from_outputs({"y": a + 1.0, "g": g}))
    (op,) = fused_ops(out)
    assert len(op.outputs) == 2 and len(op.attrs.expr.nodes) == 3  # relu, mul, add; nothing twice
    gemm = next(o for o in out.ops if o.kind is OpKind.GEMM)
    assert gemm.inputs[0] in op.outputs


def test_graph_outputs_keep_their_names_and_an_intermediate_output_is_exported():
    x = ag.Tensor([2, 3], name="x")
    a = ops.exp(x)
    b = ops.neg(a)
    out = fuse(Graph.from_outputs({"a": a, "b": ops.abs(b), "again": a}))
    (op,) = out.ops
    assert out.outputs["a"] is out.outputs["again"] and out.outputs["a"] in op.outputs
    assert len(op.outputs) == 2 and out.outputs["b"] in op.outputs


def test_no_fusion_across_an_op_outside_the_group():
    x = ag.Tensor([4, 6], name="x")
    t = ops.relu(x)
    u = ops.linear(t, ag.constant(np.ones((6, 6), np.float32)))
    out = fuse(Graph.from_outputs({"v": t + u}))
    assert kinds(out) == ["relu", "gemm", "add"]  # relu + add in one kernel would need the gemm inside


def test_partition_by_shape_keeps_a_broadcast_producer_out():
    x = ag.Tensor([16, 8], name="x")
    c = ag.Tensor([1, 8], name="c")
    s = ops.tanh(c * 2.0)              # [1, 8]: its own group
    out = fuse(Graph.from_outputs({"z": ops.relu(x * s) - 1.0}))
    shapes = sorted([int(d.value) for d in op.outputs[0].shape] for op in fused_ops(out))
    assert kinds(out) == ["fused_elementwise", "fused_elementwise"] and shapes == [[1, 8], [16, 8]]


def test_single_ops_stay_as_they_are():
    x = ag.Tensor([4, 4], name="x")
    w = ag.constant(np.ones((4, 4), np.float32))
    g = Graph.from_outputs({"y": ops.linear(ops.relu(ops.linear(ops.sigmoid(x), w)), w)})
    assert kinds(fuse(g)) == ["sigmoid", "gemm", "relu", "gemm"]


def test_fusion_off_is_a_no_op():
    x = ag.Tensor([4, 4], name="x")
    g = Graph.from_outputs({"y": ops.relu(x) + 1.0})
    out = check_pass(fuse_elementwise, g, exact=True, opts=compile_options(fusion=False))
    assert str(out) == str(g)


def test_dynamic_dims_and_mixed_dtypes():
    n = ag.IntVar("n", 1, 8)
    x, y = ag.Tensor([n, 5], name="x"), ag.Tensor([n, 5], name="y")
    m = ops.greater(x, y)
    z = ops.where(m, x * 2.0, ops.cast(ops.cast(y, "int32"), "float32"))
    out = fuse(Graph.from_outputs({"z": z, "m": ops.logical_not(m)}))
    assert kinds(out) == ["fused_elementwise"]
    assert [o.dtype.value for o in out.ops[0].outputs] == ["float32", "bool"]


def test_an_earlier_fused_op_is_inlined():
    x = ag.Tensor([3, 4], name="x")
    from aitgen.ops.fused import Expr, ExprNode
    from aitgen.ir.op import NoAttrs
    from aitgen.ir.dtype import DType
    e = Expr(1, (ExprNode(OpKind.RELU, NoAttrs(), (0,), DType.float32),
                 ExprNode(OpKind.NEG, NoAttrs(), (1,), DType.float32)), (2,))
    (f,) = ops.fused_elementwise([x], e)
    out = fuse(Graph.from_outputs({"y": ops.exp(f) + f}))
    (op,) = out.ops
    assert [n.kind for n in op.attrs.expr.nodes] == [OpKind.RELU, OpKind.NEG, OpKind.EXP, OpKind.ADD]


def test_operand_limit_splits_a_wide_group():
    xs = [ag.Tensor([2, 3], name=f"x{i}") for i in range(MAX_OPERANDS + 8)]
    acc = xs[0]
    for x in xs[1:]:
        acc = acc + x
    out = fuse(Graph.from_outputs({"y": acc}))
    assert len(fused_ops(out)) == 2 and all(len(op.inputs) <= MAX_OPERANDS for op in out.ops)


def test_kernel_counts_fall_on_the_zoo():
    # bert's attention-mask prep (cast, 1 - m, * -10000) and embedding adds are the groups left
    # once the epilogues took the rest; mobilenet and resnet have none left.
    g = before_fusion(zoo_graph("bert_base"))
    out = fuse_elementwise(g.copy(), compile_options())
    assert len(out.ops) < len(g.ops)


def test_memory_plan_runs_single_output_groups_in_place_and_multi_output_ones_safely():
    from aitgen.memory import check_plan, plan_memory
    x = ag.Tensor([4, 64], name="x")
    u = ops.layernorm(x)                                   # an arena tensor that dies in the group
    one = ops.tanh(ops.sigmoid(u) * u + 1.0)               # one output: may overwrite u
    v = ops.layernorm(x, eps=1e-3)
    a = ops.exp(v) * 2.0                                   # read by the group and by the reduction
    two = ops.relu(a) - v                                  # two outputs: a and two
    outs = {"one": ops.reduce_sum(one, axes=[-1]), "two": ops.reduce_sum(two, axes=[-1]),
            "a": ops.reduce_max(a, axes=[-1])}
    from aitgen.passes.group_ops import group_ops
    from test_memory_planning import assert_simulation_matches
    ungrouped = [p for p in PIPELINE if p is not group_ops]  # the two groups would be one op
    g = run_pipeline(Graph.from_outputs(outs), compile_options(), ungrouped)
    plan = plan_memory(g)
    check_plan(g, plan)
    fused = fused_ops(g)
    assert sorted(len(op.outputs) for op in fused) == [1, 2]
    in_place = {id(to.producer) for _, _, to in plan.in_place}
    assert [len(op.outputs) for op in fused if id(op) in in_place] == [1]
    # Grouped (the whole pipeline), the single-output member still runs over u, and only it.
    g = run_pipeline(Graph.from_outputs(outs), compile_options(), PIPELINE)
    plan = plan_memory(g)
    check_plan(g, plan)
    (grouped,) = [op for op in g.ops if op.kind is OpKind.GROUPED and op.attrs.kind is FUSED]
    # u comes from the grouped layernorms (u and v read x alike, so they are one group too).
    assert [(frm.producer.attrs.kind, to.producer) for _, frm, to in plan.in_place] == [(OpKind.LAYERNORM, grouped)]
    assert_simulation_matches(g, plan)
