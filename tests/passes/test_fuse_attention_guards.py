"""fuse_attention on the forms importers produce: torch's decomposition of scaled_dot_product_attention
(a guard that zeroes rows whose every key is masked), torch's ONNX export of a bool-masked SDPA
(where(isnan(p), 0, p)), and nn.MultiheadAttention's q/k scaling before the head split.

The guard is exact to take in: on a row whose scores are all -inf the guarded graph gives zeros and
the attention op gives zeros (its oracle says so); elsewhere the guard passes the softmax through.
The tests prove it on masks with fully masked rows: the oracle's outputs before and after the pass
agree (check_pass, rtol 1e-5: the fused op scales q first and computes scores in float32) and
those rows are exactly zero in both.
"""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.ir import Graph
from aitgen.passes import fuse_attention
from pass_equivalence import check_pass, make_feeds, run_oracle

B, H, S, D = 2, 2, 5, 4
NEG = -np.inf
# Query rows 1 and 3 of batch 0 see no key at all; batch 1 is a padding mask.
MASK = np.zeros((B, 1, S, S), np.float32)
MASK[0, :, 1, :] = NEG
MASK[0, :, 3, :] = NEG
MASK[1, :, :, 3:] = NEG
EMPTY = [(0, 1), (0, 3)]


def _qkv():
    return [ag.Tensor([B, H, S, D], name=n) for n in "qkv"]


def _scores(q, k, scale=0.5):
    return ops.bmm(q, k, trans_b=True) * ag.constant(np.float32(scale)) + ag.constant(MASK)


def _torch_guard(s, p):
    """torch's decomposition: where(~any(~(s == -inf), -1, keepdim), 0, p), as the importer writes
    any: cast to int32, reduce_max, != 0."""
    keep = ops.logical_not(ops.equal(s, NEG))
    any_ = ops.not_equal(ops.reduce_max(ops.cast(keep, "int32"), axes=[-1], keepdims=True), 0)
    zeros = ag.constant(np.zeros((B, H, S, S), np.float32))
    return ops.where(ops.logical_not(any_), zeros, p)


def _fused(y) -> tuple[Graph, Graph]:
    g = Graph.from_outputs({"y": y})
    return g, check_pass(fuse_attention, g, exact=False)


def _prove_zero_rows(before: Graph, after: Graph) -> None:
    feeds = make_feeds(before)
    a, b = run_oracle(before, feeds)["y"], run_oracle(after, feeds)["y"]
    for bi, row in EMPTY:
        assert np.all(a[bi, :, row] == 0) and np.all(b[bi, :, row] == 0)
    assert np.isfinite(a).all() and np.isfinite(b).all()


def test_torch_sdpa_guard_is_taken_in_and_exact():
    q, k, v = _qkv()
    s = _scores(q, k)
    y = ops.bmm(_torch_guard(s, ops.softmax(s, -1)), v)
    before, after = _fused(y)
    assert [op.kind.value for op in after.ops] == ["attention"]
    _prove_zero_rows(before, after)


def test_inverted_guard_where_row_has_a_key():
    q, k, v = _qkv()
    s = _scores(q, k)
    has_key = ops.reduce_min(ops.cast(ops.equal(s, NEG), "float32"), axes=[3], keepdims=True)  # all(s == -inf)
    guard = ops.where(ops.equal(has_key, 0.0), ops.softmax(s, -1), ag.constant(np.float32(0)))
    before, after = _fused(ops.bmm(guard, v))
    assert [op.kind.value for op in after.ops] == ["attention"]
    _prove_zero_rows(before, after)


def test_onnx_isnan_guard():
    q, k, v = _qkv()
    s = _scores(q, k)
    p = ops.softmax(s, -1)
    y = ops.bmm(ops.where(ops.isnan(p), ag.constant(np.float32(0)), p), v)
    before, after = _fused(y)
    assert [op.kind.value for op in after.ops] == ["attention"]
    _prove_zero_rows(before, after)


@pytest.mark.parametrize("case", ["elementwise_cond", "wrong_axis", "nonzero_fill", "any_not_all",
                                  "cond_read_elsewhere", "nan_guard_on_other"])
def test_guards_that_are_not_the_empty_row_guard_stay(case):
    q, k, v = _qkv()
    s = _scores(q, k)
    p = ops.softmax(s, -1)
    zeros = ag.constant(np.zeros((B, H, S, S), np.float32))
    extra = {}
    if case == "elementwise_cond":      # zeroes single keys, not whole rows
        w = ops.where(ops.equal(s, NEG), zeros, p)
    elif case == "wrong_axis":          # a column of -inf is not an empty row
        cond = ops.logical_not(ops.not_equal(ops.reduce_max(ops.cast(ops.logical_not(ops.equal(s, NEG)), "int32"),
                                                            axes=[2], keepdims=True), 0))
        w = ops.where(cond, zeros, p)
    elif case == "nonzero_fill":
        w = ops.where(ops.isnan(p), ag.constant(np.float32(1.0)), p)
    elif case == "any_not_all":         # where(any(s == -inf), 0, p) zeroes padded rows too
        cond = ops.not_equal(ops.reduce_max(ops.cast(ops.equal(s, NEG), "int32"), axes=[3], keepdims=True), 0)
        w = ops.where(cond, zeros, p)
    elif case == "cond_read_elsewhere":
        cond = ops.logical_not(ops.not_equal(ops.reduce_max(ops.cast(ops.logical_not(ops.equal(s, NEG)), "int32"),
                                                            axes=[3], keepdims=True), 0))
        extra["c"] = ops.cast(cond, "float32")
        w = ops.where(cond, zeros, p)
    else:                               # isnan of another tensor
        other = ag.Tensor([B, H, S, S], name="o")
        w = ops.where(ops.isnan(other), zeros, p)
    g = Graph.from_outputs({"y": ops.bmm(w, v), **extra})
    out = check_pass(fuse_attention, g, exact=True)
    assert "attention" not in [op.kind.value for op in out.ops]


def test_mha_scales_q_and_k_before_the_head_split():
    # nn.MultiheadAttention as torch.export decomposes it: q and k of [S, B*H, D] multiplied by
    # scale**0.5, then viewed [S, B, H, D] and permuted to heads; the scales reach the op.
    sq, b, h, d = 5, 2, 2, 4
    qf, kf, vf = (ag.Tensor([sq, b * h, d], name=n) for n in ("q", "k", "v"))
    c = ag.constant(np.float32(d ** -0.25))

    def heads(t, perm):
        return ops.permute(ops.reshape(t, [sq, b, h, d]), perm)

    scores = ops.bmm(heads(qf * c, [1, 2, 0, 3]), heads(kf * c, [1, 2, 3, 0]))
    p = ops.softmax(scores, -1)
    y = ops.bmm(_torch_guard_shape(scores, p, (b, h, sq, sq)), heads(vf, [1, 2, 0, 3]))
    _, after = _fused(y)
    (att,) = [op for op in after.ops if op.kind.value == "attention"]
    assert att.attrs.scale == pytest.approx(d ** -0.5, rel=1e-6)
    assert not any(op.kind.value == "mul" for op in after.ops)


def _torch_guard_shape(s, p, shape):
    keep = ops.logical_not(ops.equal(s, NEG))
    any_ = ops.not_equal(ops.reduce_max(ops.cast(keep, "int32"), axes=[-1], keepdims=True), 0)
    return ops.where(ops.logical_not(any_), ag.constant(np.zeros(shape, np.float32)), p)
