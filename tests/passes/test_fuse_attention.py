"""fuse_attention: softmax(Q·Kᵀ·scale + mask)·V spelt out op by op becomes one attention op.
Held to 1e-5: the fused op scales q before the product and computes the scores in float32."""
from __future__ import annotations

import math

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar
from aitgen.passes import fuse_attention
from pass_equivalence import check_pass

B, H, S, D = 2, 3, 5, 4
RNG = np.random.default_rng(0)
TRIL = np.tril(np.ones((S, S), bool))


def _qkv(b=B, h=H, s=S, d=D):
    return [ag.Tensor([b, h, s, d], name=n) for n in "qkv"]


def _c(v):
    return ag.constant(np.asarray(v, np.float32))


def _attention_op(g: Graph):
    (op,) = [op for op in g.ops if op.kind.value == "attention"]
    return op


def _check(y, **extra):
    out = check_pass(fuse_attention, Graph.from_outputs({"y": y, **extra}), exact=False)
    return out, _attention_op(out)


def test_matmul_transpose_div_and_additive_mask():
    q, k, v = _qkv()
    m = ag.Tensor([B, 1, 1, S], name="m")
    s = ops.matmul(q, ops.transpose(k, -1, -2)) / _c(math.sqrt(D)) + m
    out, op = _check(ops.matmul(ops.softmax(s, -1), v))
    assert [o.kind.value for o in out.ops] == ["attention"]
    assert op.inputs == [out.input("q"), out.input("k"), out.input("v"), out.input("m")]
    assert op.attrs.scale == pytest.approx(1 / math.sqrt(D)) and not op.attrs.causal


def test_mask_on_the_left_and_scale_on_the_left():
    q, k, v = _qkv()
    m = ag.Tensor([S, S], name="m")
    s = m + _c(0.25) * ops.bmm(q, k, trans_b=True)
    _, op = _check(ops.bmm(ops.softmax(s, 3), v))
    assert op.attrs.scale == 0.25 and len(op.inputs) == 4


def test_prescaled_q_and_k_without_a_score_scale():
    q, k, v = _qkv()
    s = ops.bmm(q * _c(0.5), k * _c(0.5), trans_b=True)
    out, op = _check(ops.bmm(ops.softmax(s, -1), v))
    assert op.attrs.scale == 0.25 and len(out.ops) == 1


def test_no_scale_means_scale_one():
    q, k, v = _qkv()
    _, op = _check(ops.bmm(ops.softmax(ops.bmm(q, k, trans_b=True), -1), v))
    assert op.attrs.scale == 1.0


@pytest.mark.parametrize("fill", [-np.inf, np.finfo(np.float32).min])
def test_causal_where(fill):
    q, k, v = _qkv()
    s = ops.where(ag.constant(TRIL), ops.bmm(q, k, trans_b=True) * _c(0.5), _c(fill))
    out, op = _check(ops.bmm(ops.softmax(s, -1), v))
    assert op.attrs.causal and len(op.inputs) == 3 and len(out.ops) == 1


def test_causal_additive_constant_and_padding_mask_become_causal_plus_mask():
    q, k, v = _qkv()
    pad = ag.Tensor([B, 1, 1, S], name="pad")
    causal = ag.constant(np.where(TRIL, 0.0, -np.inf).astype(np.float32)[None, None])
    s = ops.where(ag.constant(TRIL), ops.bmm(q, k, trans_b=True) + pad, _c(-np.inf))
    _, op = _check(ops.bmm(ops.softmax(s, -1), v))
    assert op.attrs.causal and op.inputs[3] is not None
    s = ops.bmm(q, k, trans_b=True) + causal
    _, op = _check(ops.bmm(ops.softmax(s, -1), v))
    assert op.attrs.causal and len(op.inputs) == 3


def test_inverted_where_and_a_runtime_bool_mask():
    q, k, v = _qkv()
    drop = ag.Tensor([B, 1, S, S], dtype="bool", name="drop")
    s = ops.where(drop, _c(-np.inf), ops.bmm(q, k, trans_b=True))
    out = check_pass(fuse_attention, Graph.from_outputs({"y": ops.bmm(ops.softmax(s, -1), v)}), exact=False,
                     seed=3)
    assert sorted(o.kind.value for o in out.ops) == ["attention", "logical_not"]


def test_two_dimensional_gemm_form_and_transposed_v():
    q, k, vt = ag.Tensor([S, D], name="q"), ag.Tensor([S, D], name="k"), ag.Tensor([D + 1, S], name="vt")
    s = ops.gemm(q, k, layout="rcr") * _c(0.3)
    out, op = _check(ops.gemm(ops.softmax(s, -1), vt, layout="rcr"))
    assert [o.kind.value for o in out.ops] == ["permute", "attention"] and op.attrs.scale == pytest.approx(0.3)


def test_key_permute_is_reused():
    # HF style: k is [B, S, H, D] permuted straight to [B, H, D, S]
    q = ag.Tensor([B, H, S, D], name="q")
    k4, v = ag.Tensor([B, S, H, D], name="k4"), ag.Tensor([B, H, S, D], name="v")
    s = ops.matmul(q, ops.permute(k4, [0, 2, 3, 1]))
    out, op = _check(ops.matmul(ops.softmax(s, -1), v))
    perm = next(o for o in out.ops if o.kind.value == "permute")
    assert perm.attrs.perm == (0, 2, 1, 3) and perm.inputs[0] is out.input("k4") and op.inputs[1] is perm.outputs[0]


def test_dynamic_dims():
    b, s = IntVar("b", 1, 3), IntVar("s", 1, 6)
    q, k, v = _qkv(b=b, s=s)
    m = ag.Tensor([b, 1, 1, s], name="m")
    y = ops.bmm(ops.softmax(ops.bmm(q, k, trans_b=True) * _c(0.5) + m, -1), v)
    _check(y)


def _arange_prefix(s):
    """torch.export's arange(s) for a dynamic s: a prefix of the longest table."""
    return ops.slice(ag.constant(np.arange(s.upper, dtype=np.int64)), [0], [s])


@pytest.mark.parametrize("kind", ["causal", "shifted", "one_row"])
def test_a_mask_computed_from_prefixes_is_causal_when_it_is_the_pattern(kind):
    """GPT-2 exported with a dynamic seq computes its causal mask at run time from arange(seq),
    which the static import folds to a constant: both must give causal=True. A mask that is not
    the pattern (a diagonal shifted by one) or covers one row only (broadcast over queries) stays
    an operand."""
    b, s = IntVar("b", 1, 3), IntVar("s", 1, 6)
    q, k, v = _qkv(b=b, s=s)
    cols = ops.reshape(_arange_prefix(s), [1, s])
    if kind == "one_row":  # keys <= 0 for every query: [1, s], the pattern's first row only
        keep = ops.less_equal(cols, ag.constant(np.int64(0)))
    else:
        rows = ops.reshape(_arange_prefix(s), [s, 1])
        keep = ops.less_equal(cols - rows, ag.constant(np.int64(1 if kind == "shifted" else 0)))
        keep = ops.logical_and(keep, ops.expand(ag.constant(np.bool_(True)), [s, s]))  # torch's full(True)
    sc = ops.where(keep, ops.bmm(q, k, trans_b=True) * _c(0.5), _c(-np.inf))
    out, op = _check(ops.bmm(ops.softmax(sc, -1), v))
    assert op.attrs.causal == (kind == "causal")
    assert (len(out.ops) == 1) == (kind == "causal")  # the mask's ops die with it


def test_a_broadcast_zero_fill_guard_fuses_as_a_constant_one():
    """torch's full_like(probs, 0) with a dynamic batch imports as expand(0, [b, ...]); the row
    guard where(~any(s != -inf), 0, probs) must be taken in as with the static constant."""
    b = IntVar("b", 1, 3)
    q, k, v = _qkv(b=b)
    keep = ag.Tensor([b, 1, 1, S], dtype="bool", name="keep")
    sc = ops.where(keep, ops.bmm(q, k, trans_b=True), _c(-np.inf))
    probs = ops.softmax(sc, -1)
    any_key = ops.reduce_max(ops.cast(ops.logical_not(ops.equal(sc, _c(-np.inf))), "int32"), [3], keepdims=True)
    empty = ops.logical_not(ops.not_equal(any_key, ag.constant(np.int32(0))))
    guarded = ops.where(empty, ops.expand(_c(0.0), [b, H, S, S]), probs)
    out, op = _check(ops.bmm(guarded, v))
    assert [o.kind.value for o in out.ops] == ["attention"]


@pytest.mark.parametrize("case", ["scores_read_twice", "probs_are_an_output", "softmax_axis_2",
                                  "scale_outside_mask", "two_masks", "finite_fill_with_additive_mask",
                                  "mask_grows_the_scores", "tensor_scale"])
def test_not_attention(case):
    q, k, v = _qkv()
    m = ag.Tensor([B, 1, 1, S], name="m")
    scores = ops.bmm(q, k, trans_b=True)
    extra = {}
    s = scores * _c(0.5)
    if case == "scores_read_twice":
        extra["s"] = ops.relu(scores)
    elif case == "softmax_axis_2":
        p = ops.softmax(s, 2)
    elif case == "scale_outside_mask":
        s = (scores + m) * _c(0.5)
    elif case == "two_masks":
        s = ops.where(ag.Tensor([B, 1, S, S], dtype="bool", name="keep"), s + m, _c(-np.inf))
    elif case == "finite_fill_with_additive_mask":
        s = ops.where(ag.constant(TRIL), s + m, _c(-1e38))
    elif case == "mask_grows_the_scores":
        s = s + ag.Tensor([4, B, H, S, S], name="big")
    elif case == "tensor_scale":
        s = scores * ag.Tensor([1], name="t")
    if case != "softmax_axis_2":
        p = ops.softmax(s, -1)
    if case == "probs_are_an_output":
        extra["p"] = p
    v_ = v if case != "mask_grows_the_scores" else ag.Tensor([4, B, H, S, D], name="v5")
    out = check_pass(fuse_attention, Graph.from_outputs({"y": ops.matmul(p, v_), **extra}), exact=True)
    assert not any(op.kind.value == "attention" for op in out.ops)


def test_fusion_off_changes_nothing():
    q, k, v = _qkv()
    g = Graph.from_outputs({"y": ops.bmm(ops.softmax(ops.bmm(q, k, trans_b=True), -1), v)})
    assert str(fuse_attention(g.copy(), compile_options(fusion=False))) == str(g)


def test_recognised_gpt2_style_block_matches_the_builtin_attention():
    # the whole block hand-built (packed c_attn split, heads, causal where, merge): same numbers
    b, s, h, d = 2, S, 2, 4
    x = ag.Tensor([b, s, h * d], name="x")
    qkv = ops.linear(x, ag.constant(RNG.standard_normal((3 * h * d, h * d)).astype(np.float32)))
    q, k, v = (ops.permute(ops.reshape(t, [b, s, h, d]), [0, 2, 1, 3]) for t in ops.split(qkv, 3, axis=2))
    scores = ops.matmul(q, ops.transpose(k, -1, -2)) / _c(math.sqrt(d))
    p = ops.softmax(ops.where(ag.constant(TRIL), scores, _c(np.finfo(np.float32).min)), -1)
    y = ops.reshape(ops.permute(ops.matmul(p, v), [0, 2, 1, 3]), [b, s, h * d])
    out = check_pass(fuse_attention, Graph.from_outputs({"y": y}), exact=False)
    assert _attention_op(out).attrs.causal
