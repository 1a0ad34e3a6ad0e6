"""Attention against an explicit loop over batch entries and query rows (float64), and torch SDPA.

Tolerances (vs float64 truth): float32 rtol=atol=1e-5 (O(1) outputs); float16 rtol=atol=2e-3;
bfloat16 rtol=atol=2e-2 (the oracle computes in float32 and rounds the output once).
"""

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError

TOL = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2)}


def _truth(q, k, v, mask=None, causal=False, scale=None):
    """Loop over every broadcast batch index and every query row; softmax written out by hand."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    sq, sk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    if mask is not None:
        mask = np.broadcast_to(mask, batch + (sq, sk))
    out = np.zeros(batch + (sq, dv))
    for idx in np.ndindex(*batch):
        qb = np.broadcast_to(q, batch + q.shape[-2:])[idx]
        kb = np.broadcast_to(k, batch + k.shape[-2:])[idx]
        vb = np.broadcast_to(v, batch + v.shape[-2:])[idx]
        for i in range(sq):
            logits, allowed = [], []
            for j in range(sk):
                s = float(np.dot(qb[i], kb[j])) * scale
                ok = not (causal and j > i)
                if mask is not None:
                    m = mask[idx][i, j]
                    if mask.dtype == np.bool_:
                        ok = ok and bool(m)
                    else:
                        s += float(m)
                ok = ok and s != -np.inf
                logits.append(s)
                allowed.append(ok)
            if not any(allowed):
                continue  # nothing to attend: zeros
            top = max(s for s, ok in zip(logits, allowed) if ok)
            w = np.array([np.exp(s - top) if ok else 0.0 for s, ok in zip(logits, allowed)])
            out[idx][i] = (w / w.sum()) @ vb
    return out


def _rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(ag.DType[dtype].np)


def _close(got, want, dtype="float32"):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def _sdpa(q, k, v, mask=None, dtype="float32", **kw):
    """Build q/k/v (and mask) inputs, run the oracle, return (output, output tensor)."""
    ts = [ag.Tensor(a.shape, dtype, name=n) for a, n in ((q, "q"), (k, "k"), (v, "v"))]
    feeds = {"q": q, "k": k, "v": v}
    mt = None
    if mask is not None:
        mt = ag.Tensor(mask.shape, "bool" if mask.dtype == np.bool_ else dtype, name="mask")
        feeds["mask"] = mask
    y = ops.scaled_dot_product_attention(*ts, mask=mt, **kw)
    return ag.reference.run(y, feeds)["output_0"], y


@pytest.mark.parametrize("qs,ks,vs", [
    ((5, 8), (5, 8), (5, 8)),                        # rank 2
    ((3, 4, 8), (3, 6, 8), (3, 6, 5)),               # Dv != D, Sq != Sk
    ((2, 3, 4, 8), (2, 3, 7, 8), (2, 3, 7, 8)),      # [B, H, S, D]
    ((2, 4, 3, 8), (2, 1, 5, 8), (2, 1, 5, 4)),      # k/v shared across heads (broadcast)
    ((4, 3, 8), (2, 1, 3, 8), (1, 4, 3, 8)),         # ranks differ, all three broadcast
])
def test_attention_random_shapes(qs, ks, vs):
    rng = np.random.default_rng(0)
    q, k, v = _rand(rng, qs), _rand(rng, ks), _rand(rng, vs)
    got, y = _sdpa(q, k, v)
    want = _truth(q, k, v)
    assert tuple(d.value for d in y.shape) == want.shape
    _close(got, want)


@pytest.mark.parametrize("sq,sk", [(4, 4), (3, 6), (6, 3), (1, 5)])
def test_attention_causal_top_left(sq, sk):
    rng = np.random.default_rng(1)
    q, k, v = _rand(rng, (2, 2, sq, 8)), _rand(rng, (2, 2, sk, 8)), _rand(rng, (2, 2, sk, 8))
    got, _ = _sdpa(q, k, v, causal=True)
    _close(got, _truth(q, k, v, causal=True))
    # Row 0 sees key 0 only, whatever Sq and Sk are.
    np.testing.assert_allclose(got[..., 0, :], v[..., 0, :], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mshape", [(4, 6), (2, 1, 1, 6), (1, 3, 4, 1), (3, 4, 6), (2, 3, 4, 6), (6,)])
def test_attention_additive_mask_broadcasting(mshape):
    rng = np.random.default_rng(2)
    q, k, v = _rand(rng, (2, 3, 4, 8)), _rand(rng, (2, 3, 6, 8)), _rand(rng, (2, 3, 6, 8))
    mask = (rng.standard_normal(mshape) * 2).astype(np.float32)
    mask[rng.random(mshape) < 0.2] = -np.inf
    got, _ = _sdpa(q, k, v, mask)
    want = _truth(q, k, v, mask)
    assert np.isfinite(got).all()
    _close(got, want)


def test_attention_bool_mask_and_causal_combined():
    rng = np.random.default_rng(3)
    q, k, v = _rand(rng, (2, 2, 5, 8)), _rand(rng, (2, 2, 5, 8)), _rand(rng, (2, 2, 5, 8))
    keep = rng.random((2, 1, 1, 5)) < 0.7  # a key-padding mask, True = attend
    keep[0, 0, 0, 0] = False  # query 0 of batch 0 then has no key left: zeros, not NaN
    got, _ = _sdpa(q, k, v, keep, causal=True)
    want = _truth(q, k, v, keep, causal=True)
    assert np.isfinite(got).all() and not got[0, :, 0].any()
    _close(got, want)


def test_attention_custom_scale():
    rng = np.random.default_rng(4)
    q, k, v = _rand(rng, (3, 4, 16)), _rand(rng, (3, 4, 16)), _rand(rng, (3, 4, 16))
    got, y = _sdpa(q, k, v, scale=0.3)
    assert y.producer.attrs.scale == 0.3
    _close(got, _truth(q, k, v, scale=0.3))


def test_attention_dynamic_batch_and_seq():
    batch, seq = ag.IntVar("batch", 1, 4), ag.IntVar("seq", 1, 64)
    q, k, v = (ag.Tensor([batch, 2, seq, 8], name=n) for n in "qkv")
    mask = ag.Tensor([batch, 1, 1, seq], name="mask")
    outs = {"plain": ops.scaled_dot_product_attention(q, k, v, mask=mask),
            "causal": ops.scaled_dot_product_attention(q, k, v, causal=True)}
    assert outs["plain"].shape[0] is batch and outs["plain"].shape[2] is seq
    rng = np.random.default_rng(5)
    for b, s in [(1, 3), (3, 9)]:
        qa, ka, va = (_rand(rng, (b, 2, s, 8)) for _ in range(3))
        m = np.where(rng.random((b, 1, 1, s)) < 0.3, -np.inf, 0.0).astype(np.float32)
        res = ag.reference.run(outs, {"q": qa, "k": ka, "v": va, "mask": m})
        _close(res["plain"], _truth(qa, ka, va, m))
        _close(res["causal"], _truth(qa, ka, va, causal=True))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_low_precision(dtype):
    rng = np.random.default_rng(6)
    q, k, v = (_rand(rng, (2, 2, 6, 16), dtype) for _ in range(3))
    mask = _rand(rng, (6, 6), dtype)
    got, y = _sdpa(q, k, v, mask, dtype=dtype, causal=True)
    assert y.dtype == ag.DType[dtype] and got.dtype == ag.DType[dtype].np
    _close(got, _truth(q, k, v, mask, causal=True), dtype)


@pytest.mark.parametrize("case", ["plain", "causal_sq_lt_sk", "causal_sq_gt_sk", "float_mask", "bool_mask",
                                  "causal_bool_mask", "dv"])
def test_attention_matches_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(7)
    sq, sk, dv = {"causal_sq_lt_sk": (3, 7), "causal_sq_gt_sk": (7, 3)}.get(case, (5, 5)) + (8,)
    if case == "dv":
        sk, dv = 6, 12
    q, k, v = _rand(rng, (2, 3, sq, 8)), _rand(rng, (2, 3, sk, 8)), _rand(rng, (2, 3, sk, dv))
    mask = None
    if case == "float_mask":
        mask = _rand(rng, (2, 1, sq, sk))
    elif case.endswith("bool_mask"):
        mask = rng.random((sq, sk)) < 0.6
        mask[1] = False  # a fully masked query row: torch (>= 2.5) and aitgen both give zeros
    causal = case.startswith("causal")
    got, _ = _sdpa(q, k, v, mask, causal=causal, scale=0.25 if case == "plain" else None)
    tm = None if mask is None else torch.from_numpy(mask)
    want = F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                                          attn_mask=tm, is_causal=causal,
                                          scale=0.25 if case == "plain" else None)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


# -- bad inputs -------------------------------------------------------------------------------

def _t(shape, dtype="float32", name=None):
    return ag.Tensor(shape, dtype, name=name)


def test_attention_head_dim_mismatch():
    with pytest.raises(ShapeError, match=r"attention 'att': head dim of q \(8\) and k \(6\) differ"):
        ops.scaled_dot_product_attention(_t([2, 4, 8]), _t([2, 5, 6]), _t([2, 5, 6]), name="att")


def test_attention_key_length_mismatch():
    with pytest.raises(ShapeError, match=r"attention.*key length of k \(5\) and v \(4\) differ"):
        ops.scaled_dot_product_attention(_t([2, 4, 8]), _t([2, 5, 8]), _t([2, 4, 8]))


def test_attention_batch_not_broadcastable():
    with pytest.raises(ShapeError, match=r"attention.*batch dims of q, k, v do not broadcast"):
        ops.scaled_dot_product_attention(_t([3, 4, 8]), _t([2, 5, 8]), _t([2, 5, 8]))


@pytest.mark.parametrize("mshape", [(4, 4), (3, 4, 5), (2, 2, 4, 5), (7, 1, 4, 5)])
def test_attention_mask_not_broadcastable(mshape):
    # [3, 4, 5]/[2, 2, 4, 5] would grow the [2, 4, 5] scores; [4, 4] has the wrong key length.
    with pytest.raises(ShapeError, match=r"attention.*mask .* does not broadcast to the scores \[2, 4, 5\]"):
        ops.scaled_dot_product_attention(_t([2, 4, 8]), _t([2, 5, 8]), _t([2, 5, 8]), mask=_t(mshape))


def test_attention_qkv_dtype_mismatch():
    with pytest.raises(DTypeError, match=r"attention.*q, k, v dtypes differ"):
        ops.scaled_dot_product_attention(_t([4, 8]), _t([4, 8], "float16"), _t([4, 8]))


def test_attention_int_mask():
    with pytest.raises(DTypeError, match=r"attention.*mask dtype int32 must be bool, q's dtype"):
        ops.scaled_dot_product_attention(_t([4, 8]), _t([4, 8]), _t([4, 8]), mask=_t([4, 4], "int32"))


def test_attention_float_mask_of_other_dtype():
    with pytest.raises(DTypeError, match=r"attention.*mask dtype float64 must be bool, q's dtype float16 or float32"):
        ops.scaled_dot_product_attention(_t([4, 8], "float16"), _t([4, 8], "float16"), _t([4, 8], "float16"),
                                         mask=_t([4, 4], "float64"))
    # float32 beside narrow operands is accepted (autocast's bias; the kernels add it in float32)
    y = ops.scaled_dot_product_attention(_t([4, 8], "float16"), _t([4, 8], "float16"), _t([4, 8], "float16"),
                                         mask=_t([4, 4]))
    assert y.dtype.value == "float16"


def test_attention_int_operands():
    with pytest.raises(DTypeError, match=r"attention.*needs a float operand"):
        ops.scaled_dot_product_attention(_t([4, 8], "int32"), _t([4, 8], "int32"), _t([4, 8], "int32"))


def test_attention_rank_one():
    with pytest.raises(ShapeError, match=r"attention.*q must have rank >= 2"):
        ops.scaled_dot_product_attention(_t([8]), _t([4, 8]), _t([4, 8]))


def test_attention_graph_verifies():
    s = ag.IntVar("s", 1, 16)
    q = _t([2, s, 8], name="q")
    y = ops.scaled_dot_product_attention(q, q, q, mask=_t([s, s], "bool", name="m"), causal=True)
    ag.verify(ag.Graph.from_outputs(y))
