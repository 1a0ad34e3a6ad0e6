"""fuse_memory_ops: head splits/merges and QKV splits fold into the attention's strided reads and
writes; permute chains compose. The oracle must agree bit for bit: a strided view reads the very
same values the copies would have produced."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntImm, IntVar
from aitgen.passes import dedup, fuse_memory_ops, fuse_parallel_gemms, run_pipeline
from aitgen.passes.fuse_memory_ops import View, reshape_view
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph

RNG = np.random.default_rng(0)


def _kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _heads(t, b, s, h, d):
    return ops.permute(ops.reshape(t, [b, s, h, d]), [0, 2, 1, 3])


# -- the view algebra ---------------------------------------------------------------------------

def test_reshape_view_splits_and_merges_contiguous_groups():
    v = View.dense((2, 6, 12))
    r = reshape_view(v, (2, 6, 3, 4))
    assert r.strides == (72, 12, 4, 1)
    assert reshape_view(r, (12, 12)).strides == (12, 1)


def test_reshape_view_refuses_a_regrouping_that_needs_a_copy():
    # [2, 3] transposed ([3, 2], strides (1, 3)) cannot be flattened without a copy
    assert reshape_view(View((3, 2), (1, 3), IntImm(0)), (6,)) is None


def test_reshape_view_symbolic_dims():
    b, s = IntVar("b", 1, 4), IntVar("s", 1, 16)
    v = View.dense((b, s, 96))  # a packed QKV result
    part = View((b, s, 32), v.strides, IntImm(32))  # its key window
    r = reshape_view(part, (b, s, 2, 16))
    assert r.strides == (s * 96, 96, 16, 1) and r.offset == 32


# -- attention operands -------------------------------------------------------------------------

def _bert_like(b=2, s=5, h=2, d=4, packed=False, mask=True):
    x = ag.Tensor([b, s, h * d], name="x")
    m = ag.Tensor([b, 1, 1, s], name="m") if mask else None
    if packed:  # what fuse_parallel_gemms leaves: one GEMM, a split
        qkv = ops.linear(x, ag.constant(RNG.standard_normal((3 * h * d, h * d)).astype(np.float32)))
        q, k, v = ops.split(qkv, 3, axis=2)
    else:
        q, k, v = (ops.linear(x, ag.constant(RNG.standard_normal((h * d, h * d)).astype(np.float32)))
                   for _ in range(3))
    a = ops.scaled_dot_product_attention(_heads(q, b, s, h, d), _heads(k, b, s, h, d), _heads(v, b, s, h, d), m)
    return ops.reshape(ops.permute(a, [0, 2, 1, 3]), [b, s, h * d])


@pytest.mark.parametrize("packed", [False, True])
def test_head_permutes_and_split_fold_into_the_attention(packed):
    g = Graph.from_outputs({"y": ops.relu(_bert_like(packed=packed))})
    out = check_pass(fuse_memory_ops, g, exact=True)
    assert "permute" not in _kinds(out) and "split" not in _kinds(out)
    attn = next(op for op in out.ops if op.kind.value == "attention")
    assert attn.attrs.out_view is not None and tuple(attn.outputs[0].shape) == (2, 5, 2, 4)
    if packed:  # q, k and v are three windows of one tensor
        assert attn.inputs[0] is attn.inputs[1] is attn.inputs[2]
        assert [v.offset for v in attn.attrs.operand_views[:3]] == [0, 8, 16]


def test_dynamic_batch_and_seq():
    b, s = IntVar("batch", 1, 4), IntVar("seq", 1, 8)
    g = Graph.from_outputs({"y": _bert_like(b=b, s=s, packed=True)})
    out = check_pass(fuse_memory_ops, g, exact=True)
    assert "permute" not in _kinds(out) and "split" not in _kinds(out)


def test_a_copy_read_elsewhere_stays_and_the_attention_reads_it():
    x = ag.Tensor([2, 4, 3, 8], name="x")
    q = ops.permute(x, [0, 2, 1, 3])
    r = ops.reshape(q, [2, 3, 32])  # a second reader of the permute's output
    y = ops.scaled_dot_product_attention(q, q, q)
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": y, "r": r}), exact=True)
    assert _kinds(out).count("permute") == 1


def test_a_view_without_unit_head_stride_is_not_folded():
    x = ag.Tensor([2, 8, 5], name="x")  # [B, D, S]: permuted to [B, S, D], D is strided
    q = ops.permute(x, [0, 2, 1])
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.scaled_dot_product_attention(q, q, q)}),
                     exact=True)
    assert _kinds(out) == ["permute", "attention"]


def test_mask_slices_and_expands_fold():
    q = ag.Tensor([2, 3, 4, 8], name="q")
    big = ag.Tensor([2, 6, 6], name="big")  # a mask cut out of a larger table, broadcast over heads
    m = ops.expand(ops.reshape(ops.slice(big, [1, 0], [5, 4], axes=[1, 2]), [2, 1, 4, 4]), [2, 3, 4, 4])
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.scaled_dot_product_attention(q, q, q, m)}),
                     exact=True)
    assert _kinds(out) == ["attention"]


def test_write_chain_with_a_reshape_between_permutes():
    # (A softmax reads the result: it takes no strided views, so what stays a copy shows.)
    q = ag.Tensor([2, 3, 4, 6], name="q")
    a = ops.scaled_dot_product_attention(q, q, q)                  # [B, H, S, D]
    t = ops.permute(ops.reshape(ops.permute(a, [0, 2, 1, 3]), [2, 4, 3, 2, 3]), [0, 2, 1, 3, 4])
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.softmax(t, -1)}), exact=True)
    assert _kinds(out) == ["attention", "softmax"]
    # moving half of the head dim outward cannot be a unit-stride write: only the first permute folds
    t = ops.permute(ops.reshape(ops.permute(a, [0, 2, 1, 3]), [2, 4, 3, 2, 3]), [0, 3, 1, 2, 4])
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.softmax(t, -1)}), exact=True)
    assert _kinds(out) == ["attention", "reshape", "permute", "softmax"]
    # a write chain that would leave the head dim strided stays a copy
    t = ops.permute(a, [0, 1, 3, 2])
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.softmax(t, -1)}), exact=True)
    assert _kinds(out) == ["attention", "permute", "softmax"]


# -- permute chains -----------------------------------------------------------------------------

def test_permute_of_permute_is_one_permute():
    x = ag.Tensor([2, 3, 4, 5], name="x")
    y = ops.permute(ops.permute(x, [0, 2, 3, 1]), [1, 0, 3, 2])
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.softmax(y, -1)}), exact=True)
    assert _kinds(out) == ["permute", "softmax"]


def test_inverse_permutes_vanish_but_an_output_keeps_its_buffer():
    x = ag.Tensor([2, 3, 4], name="x")
    y = ops.permute(ops.permute(ops.relu(x), [2, 0, 1]), [1, 2, 0])
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.relu(y)}), exact=True)
    assert _kinds(out) == ["relu", "relu"]
    # the output would be the graph input itself: the copy stays
    out = check_pass(fuse_memory_ops, Graph.from_outputs({"y": ops.permute(ops.permute(x, [2, 0, 1]), [1, 2, 0])}),
                     exact=True)
    assert _kinds(out) == ["permute"]


def test_fusion_off_changes_nothing():
    g = Graph.from_outputs({"y": _bert_like(packed=True)})
    out = fuse_memory_ops(g.copy(), compile_options(fusion=False))
    assert str(out) == str(g)


# -- random chains (hypothesis) -------------------------------------------------------------------

@st.composite
def _chains(draw):
    """q, k, v and the result of one attention, each behind a random chain of memory ops."""
    b, h, s, d = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    x = ag.Tensor([b, s, 3 * h * d + 2], name="x")
    y = ops.slice(ops.relu(x), [1], [3 * h * d + 1], axes=[2])  # a window with an offset
    parts = ops.split(y, 3, axis=2)
    qkv = []
    for p in parts:
        t = ops.reshape(p, [b, s, h, d])
        t = ops.permute(t, draw(st.sampled_from([[0, 2, 1, 3], [2, 0, 1, 3]])))
        if draw(st.booleans()):
            t = ops.permute(ops.permute(t, [1, 0, 2, 3]), [1, 0, 2, 3])
        qkv.append(t)
    q, k, v = qkv
    if tuple(q.shape) != tuple(k.shape) or tuple(k.shape) != tuple(v.shape):
        k, v = (ops.permute(t, [1, 0, 2, 3]) if tuple(t.shape) != tuple(q.shape) else t for t in (k, v))
    a = ops.scaled_dot_product_attention(q, k, v, causal=draw(st.booleans()))
    out = ops.permute(a, draw(st.sampled_from([[0, 2, 1, 3], [2, 1, 0, 3], [0, 1, 2, 3]])))
    if draw(st.booleans()):
        out = ops.reshape(out, [int(np.prod([n.value for n in out.shape[:2]])), -1])
    return Graph.from_outputs({"y": ops.relu(out)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=_chains())
def test_random_chains_fold_exactly(graph):
    out = check_pass(fuse_memory_ops, graph, exact=True)
    assert "split" not in _kinds(out) and "slice" not in _kinds(out)


# -- the zoo ------------------------------------------------------------------------------------

def _up_to_dedup(graph: Graph) -> Graph:
    from aitgen.passes import PIPELINE
    return run_pipeline(graph, compile_options(), PIPELINE[:PIPELINE.index(dedup) + 1])


@pytest.mark.parametrize("model", ZOO)
def test_zoo(model):
    g = fuse_parallel_gemms(_up_to_dedup(zoo_graph(model)), compile_options())
    out = check_pass(fuse_memory_ops, g, exact=True)
    name = model.split("@")[0]
    if name in ("bert_base", "vit_b16", "gpt2"):
        # ViT keeps one: its image's patches (patchify_conv), which the patch GEMM cannot read
        # through one row stride, so they are copied once
        assert _kinds(out).count("permute") == (name == "vit_b16") and "split" not in _kinds(out)
