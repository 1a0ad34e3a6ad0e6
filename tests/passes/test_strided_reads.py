"""fuse_memory_ops into GEMM and element-wise reads, and fuse_parallel_gemms beyond attention: a
permute, slice, split part or expand in front of a GEMM's A operand or an element-wise operand
becomes the op's operand view. Exact (a view reads the values the copy would have made), and a
view never lets the memory plan run an op over the operand it reads strided.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, OpKind, Tensor
from aitgen.memory import check_plan, plan_memory
from aitgen.passes import PIPELINE, fuse_memory_ops, run_pipeline
from aitgen.passes.fuse_parallel_gemms import fuse_parallel_gemms
from pass_equivalence import check_pass

RNG = np.random.default_rng(9)


def _c(*shape):
    return ag.constant(RNG.uniform(-0.5, 0.5, size=shape).astype(np.float32))


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops if op.kind is not OpKind.RESHAPE]


def fold(outputs, **kw) -> Graph:
    return check_pass(fuse_memory_ops, Graph.from_outputs(outputs), exact=True, **kw)


def views(g: Graph, kind: OpKind) -> list:
    return [op.attrs.operand_views for op in g.ops if op.kind is kind]


def test_class_token_slice_is_the_head_gemms_rows():
    b = IntVar("b", 1, 4)
    h = Tensor([b, 17, 32], name="h")
    cls = ops.reshape(ops.slice(ops.relu(h), [0], [1], axes=[1]), [b, 32])  # ViT's / BERT's pooler input
    g = fold({"y": ops.linear(cls, _c(10, 32), _c(10))})
    assert kinds(g) == ["relu", "gemm"]
    (v,) = views(g, OpKind.GEMM)
    assert v[1:] == (None, None) and [str(d) for d in v[0].strides] == ["544", "1"]


def test_elementwise_reads_permutes_slices_expands_and_split_parts():
    x = Tensor([4, 6, 8], name="x")
    r = ops.relu(x)
    a = ops.permute(r, [0, 2, 1]) + Tensor([4, 8, 6], name="p")          # a transposed read
    s = ops.tanh(ops.slice(ops.exp(x), [1, 2], [3, 8], axes=[1, 2]))      # a window with an offset
    e = ops.expand(ops.sigmoid(Tensor([4, 1, 8], name="v")), [4, 6, 8]) * x  # a broadcast copy
    p0, p1 = ops.split(ops.neg(x), [3, 5], axis=2)
    outs = {"a": a, "s": s, "e": e, "p": ops.maximum(p0, ops.slice(p1, [0], [3], axes=[2]))}
    g = fold(outs)
    assert "permute" not in kinds(g) and "slice" not in kinds(g) and "expand" not in kinds(g)
    assert "split" not in kinds(g)
    assert all(v is not None and any(x is not None for x in v) for v in views(g, OpKind.FUSED_ELEMENTWISE))


def test_what_stays_a_copy():
    x = Tensor([4, 8], name="x")
    t = ops.permute(ops.relu(x), [1, 0])
    g = fold({"a": ops.exp(t), "b": ops.tanh(t)})  # two readers: the copy stays, both read it
    assert kinds(g) == ["relu", "permute", "exp", "tanh"]
    g = fold({"a": ops.linear(t, _c(3, 4))})  # GEMM rows [8] over a transposed [4, 8]: K strided
    assert kinds(g) == ["relu", "gemm"]  # rows of stride 1, K of stride 8: oneDNN's transposed a
    q = ops.permute(ops.reshape(ops.relu(x), [2, 2, 8]), [1, 0, 2])       # rows that do not fold
    g = fold({"a": ops.linear(q, _c(3, 8))})
    assert kinds(g) == ["relu", "permute", "gemm"]
    g = fold({"a": ops.exp(t)}, opts=compile_options(target="no_such_backend"))  # no kernel reads views
    assert kinds(g) == ["relu", "permute", "exp"]


def test_viewed_operands_are_never_overwritten_in_place():
    x = Tensor([8, 8], name="x")
    r = ops.relu(x)                          # an arena tensor [8, 8], read transposed
    y = ops.exp(ops.permute(r, [1, 0]))      # same shape and size as r, and r dies here
    g = run_pipeline(Graph.from_outputs({"y": ops.linear(y, _c(2, 8))}), compile_options())
    plan = plan_memory(g)
    check_plan(g, plan)
    assert any(op.kind is OpKind.FUSED_ELEMENTWISE and op.attrs.operand_views for op in g.ops)
    assert plan.in_place == []


def test_parallel_gemms_feeding_gemms_pack_and_fold():
    b = IntVar("b", 1, 8)
    x = Tensor([b, 16], name="x")
    t1 = ops.linear(ops.linear(x, _c(24, 16), _c(24)), _c(4, 24), _c(4))  # two towers on one input
    t2 = ops.linear(ops.linear(x, _c(8, 16)), _c(4, 8), _c(4))
    g = check_pass(lambda gr, o: run_pipeline(gr, o), Graph.from_outputs({"a": t1, "b": t2}), exact=False)
    # One packed GEMM [b, 32]; the two second GEMMs read their columns through views, grouped.
    assert kinds(g) == ["gemm", "grouped"]
    (op,) = [op for op in g.ops if op.kind is OpKind.GROUPED]
    assert [m.attrs.operand_views[0] is not None for m in op.attrs.members] == [True, True]
    # A part read by an element-wise op does not pack: alone, its GEMM takes the op as an epilogue.
    t3 = ops.gelu(ops.linear(x, _c(8, 16)))
    g = check_pass(fuse_parallel_gemms, Graph.from_outputs({"a": t1, "c": t3}), exact=True)
    assert kinds(g).count("gemm") == 3


@st.composite
def _readers(draw):
    """A tensor behind a random memory-op chain, read by an element-wise op or a GEMM."""
    n, m, k = draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    x = Tensor([n, m, k], name="x")
    t = ops.relu(x)
    for _ in range(draw(st.integers(1, 3))):
        step = draw(st.sampled_from(["permute", "slice", "expand", "split", "reshape"]))
        if step == "permute":
            t = ops.permute(t, list(draw(st.permutations(range(t.ndim)))))
        elif step == "slice" and t.shape[-1].value >= 2:
            t = ops.slice(t, [1], [t.shape[-1].value], axes=[t.ndim - 1])
        elif step == "expand":
            t = ops.expand(ops.reshape(t, [1] + [d.value for d in t.shape]), [2] + [d.value for d in t.shape])
        elif step == "split" and t.shape[0].value >= 2:
            t = ops.split(t, [1, t.shape[0].value - 1], axis=0)[draw(st.integers(0, 1))]
        elif step == "reshape":
            t = ops.reshape(t, [-1, t.shape[-1].value])
    if draw(st.booleans()):
        y = ops.linear(t, _c(3, t.shape[-1].value))
    else:
        y = draw(st.sampled_from([ops.exp, ops.tanh]))(t) * Tensor([d.value for d in t.shape[-1:]], name="w")
    return Graph.from_outputs({"y": y})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=_readers())
def test_random_chains(graph):
    g = run_pipeline(graph, compile_options(), PIPELINE[:PIPELINE.index(fuse_memory_ops)])
    out = check_pass(fuse_memory_ops, g, exact=True)
    plan = plan_memory(run_pipeline(out, compile_options(), PIPELINE[PIPELINE.index(fuse_memory_ops) + 1:]))
    assert plan.lower_bound_bytes <= plan.arena_bytes
