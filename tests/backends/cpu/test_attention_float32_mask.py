"""A float32 additive mask beside bfloat16 q/k/v (as torch's bf16 autocast keeps a bias added to bf16
scores): the ATTENTION op takes it (ops/attention.py), precision="bfloat16" keeps an attention op's
float32 mask float32 (convert_precision's mixed policy) and fuse_attention takes the float32 source
of a mask that convert_precision had cast to bf16 for an op-by-op softmax(QK^T s + mask)V.

The mask has fine structure on a large offset (512 + a ramp of 0..3): bfloat16's spacing at 512
is 4, so a mask stored bf16 loses the ramp and the attention pattern with it. Each case runs on the
CPU (the AMX tile path where the CPU has AMX-BF16, else the float32 flash path) and must agree with
the float32 reference (rtol/atol 2e-2 x max|reference|, bfloat16 operands) and differ from the
reference computed with the mask rounded to bfloat16 by more than 0.1 x max|reference|.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import aitgen as ag
from aitgen import ops

B, H, S, D = 1, 2, 40, 32
TOL = 2e-2
rng = np.random.default_rng(5)


def _inputs():
    q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3))
    ramp = np.linspace(0.0, 3.0, S, dtype=np.float32)
    mask = (512.0 + ramp[None, None, None, :] * rng.permutation(S)[None, None, :, None] / S).astype(np.float32)
    return q, k, v, np.broadcast_to(mask, (B, 1, S, S)).copy()


def _reference(q, k, v, mask):
    bf = lambda x: x.astype(ml_dtypes.bfloat16).astype(np.float32)  # noqa: E731
    s = (bf(q) @ np.swapaxes(bf(k), -1, -2)) / math.sqrt(D) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ bf(v)


def _check(got, q, k, v, mask):
    want = _reference(q, k, v, mask)
    rounded = _reference(q, k, v, mask.astype(ml_dtypes.bfloat16).astype(np.float32))
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * scale)
    # the case is one where rounding the mask matters: a bf16 mask could not pass the check above
    assert float(np.abs(rounded - want).max()) > 0.1 * scale


def _feeds(q, k, v, mask, names=("q", "k", "v", "mask")):
    return dict(zip(names, (q, k, v, mask)))


def test_op_takes_a_float32_mask_beside_bf16_operands(tmp_path):
    q, k, v, mask = _inputs()
    tq, tk, tv = (ag.Tensor([B, H, S, D], "bfloat16", name=n) for n in "qkv")
    tm = ag.Tensor([B, 1, S, S], "float32", name="mask")
    y = ops.scaled_dot_product_attention(tq, tk, tv, mask=tm, name="attn")
    m = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path)
    bf = ml_dtypes.bfloat16
    got = m.run({"q": q.astype(bf), "k": k.astype(bf), "v": v.astype(bf), "mask": mask})["y"]
    _check(got.astype(np.float32), q, k, v, mask)


def test_bfloat16_build_keeps_the_attention_mask_float32(tmp_path):
    q, k, v, mask = _inputs()
    tq, tk, tv = (ag.Tensor([B, H, S, D], "float32", name=n) for n in "qkv")
    tm = ag.Tensor([B, 1, S, S], "float32", name="mask")
    y = ops.scaled_dot_product_attention(tq, tk, tv, mask=tm, name="attn")
    m = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, precision="bfloat16")
    _check(m.run(_feeds(q, k, v, mask))["y"], q, k, v, mask)


def test_fused_attention_takes_the_float32_mask(tmp_path):
    # written out op by op, as an importer writes it: fuse_attention makes it one op after
    # convert_precision has cast the mask to bfloat16 for the bf16 scores
    q, k, v, mask = _inputs()
    tq, tk, tv = (ag.Tensor([B, H, S, D], "float32", name=n) for n in "qkv")
    tm = ag.Tensor([B, 1, S, S], "float32", name="mask")
    s = ops.add(ops.mul(ops.matmul(tq, ops.permute(tk, [0, 1, 3, 2])), 1.0 / math.sqrt(D)), tm)
    y = ops.matmul(ops.softmax(s, -1), tv, name="pv")
    m = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, precision="bfloat16")
    report = (tmp_path / "report.json").read_text()
    assert "attention" in report, "the pattern was not fused into an attention op"
    _check(m.run(_feeds(q, k, v, mask))["y"], q, k, v, mask)
