"""ROCm attention without an AMD GPU, default tier (render level, no CK compile): which ATTENTION
ops take Composable Kernel's fused GEMM-softmax-GEMM (kernels/rocm/attention.py) and which the
SIMT kernel, the head-dim classes, and the lengths, strides and offsets handed to CK, replayed in
numpy through CK's own addressing (element (g..., row, col) at offset + sum g_i * G stride_i +
row * row stride + col * col stride) against the oracle. CK's kernel itself cannot run here (no
AMD GPU, and no emulator runs CK): its numerics are not tested; the SIMT fallback's are, by the
host emulator (test_rocm_own_kernels.py). The rocm_compile tier (hipcc, CK's own
IsSupportedArgument, the mock device): test_rocm_attention_ck.py."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.kernels.common.attention import attention_args
from aitgen.codegen.kernels.rocm import attention as ck_attn
from aitgen.compiler import compile_options
from aitgen.errors import UnsupportedOpError
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.passes import PIPELINE, run_pipeline

from ck_helpers import lowered, source

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_rocm_zoo_compile import lowered as zoo_lowered  # noqa: E402

CK = "rocm/templates/attention_ck.hip.j2"
SIMT = "gpu/templates/attention_simt.cu.j2"


def attn(dt="float16", d=64, dv=None, causal=False, mask=None, sq=128, sk=None, batch=(2, 4), scale=None):
    sk = sk or sq
    q = ag.Tensor([*batch, sq, d], dtype=dt, name="q")
    k = ag.Tensor([*batch, sk, d], dtype=dt, name="k")
    v = ag.Tensor([*batch, sk, dv or d], dtype=dt, name="v")
    m = None
    if mask == "add":
        m = ag.Tensor([batch[0], 1, 1, sk], dtype=dt, name="m")
    elif mask == "bool":
        m = ag.Tensor([batch[0], 1, sq, sk], dtype="bool", name="m")
    return {"y": ops.scaled_dot_product_attention(q, k, v, m, causal=causal, scale=scale)}


def attention_calls(calls):
    return [c for c in calls if "attention" in c.spec.template]


@pytest.mark.parametrize("name, want", [("bert_base", SIMT), ("gpt2", CK), ("vit_b16", CK)])
def test_zoo_attention_routes(name, want):
    """bert's attention has a padding mask (SIMT); gpt2's is causal and vit's unmasked, both
    float16 with head dim 32 read from the packed QKV projection: CK, one translation unit per
    model (both layers share it)."""
    for arch in ("gfx90a", "gfx940"):
        _, calls = zoo_lowered(name, "rocm", arch)
        att = attention_calls(calls)
        assert len(att) == 2 and {c.spec.template for c in att} == {want}
        assert len({c.spec.func for c in att}) == 1
        if want == CK:
            p = att[0].spec.param_dict()
            assert p["causal"] == (name == "gpt2") and p["inst"]["name"] == "d64" and p["ctype"] == "ck::half_t"


@pytest.mark.parametrize("kw, want, cls", [
    (dict(), CK, "d64"),
    (dict(causal=True), CK, "d64"),
    (dict(causal=True, sq=100, sk=77), CK, "d64"),      # CK's causal mask is top-left aligned, as ours
    (dict(dt="bfloat16", d=128), CK, "d128"),
    (dict(d=96), CK, "d128"),
    (dict(d=64, dv=128), CK, "d128"),
    (dict(d=8, dv=8), CK, "d64"),
    (dict(dt="float32"), SIMT, None),
    (dict(d=20), SIMT, None),                           # not a multiple of 8
    (dict(d=63), SIMT, None),
    (dict(d=136, dv=64), SIMT, None),                   # beyond the largest class
    (dict(mask="add"), SIMT, None),
    (dict(mask="bool", causal=True), SIMT, None),
])
def test_routes(kw, want, cls):
    (call,) = attention_calls(lowered(attn(**kw))[1])
    assert call.spec.template == want, kw
    if want == CK:
        assert call.spec.param_dict()["inst"]["name"] == cls
        assert call.spec.param_dict()["causal"] == kw.get("causal", False)


def test_refusal_reasons():
    """Each CK rule names itself: the reason the lowering falls back (head dim 192 has no SIMT
    kernel either, so the rule is checked on the fused graph, before lowering)."""
    cases = {
        "float16 or bfloat16": attn(dt="float32"),
        "mask tensor": attn(mask="add"),
        "multiples of 8": attn(d=20),
        "largest class": attn(d=192),
        "Sk can be 0": attn(sk=ag.IntVar("keys", 0, 64)),
    }
    for reason, outs in cases.items():
        opts = compile_options(target="rocm", arch="gfx90a")
        g = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
        (op,) = [o for o in g.ops if o.kind is OpKind.ATTENTION]
        assert reason in ck_attn.ck_refusal(op, attention_args(op, "rocm")), reason
    with pytest.raises(UnsupportedOpError, match="shared memory"):
        lowered(attn(d=192))   # as before this lowering: the SIMT kernel's limit, named


def test_unaligned_views_fall_back():
    """q/k/v as windows of a packed [B, S, 3*H*D] tensor: with H*D a multiple of 8 every offset
    and stride is, and CK takes it; with D = 8 but a 4-element lead column in front of the
    projection, every operand's offset is 4 mod 8 and its 16-byte vectors would be unaligned."""
    def packed(lead):
        x = ag.Tensor([2, 16, lead + 3 * 2 * 8], dtype="float16", name="x")
        parts = [ops.slice(x, [0, 0, lead + j * 16], [2, 16, lead + (j + 1) * 16]) for j in range(3)]
        q, k, v = (ops.permute(ops.reshape(t, [2, 16, 2, 8]), [0, 2, 1, 3]) for t in parts)
        return {"y": ops.scaled_dot_product_attention(q, k, v, causal=True)}
    (aligned,) = attention_calls(lowered(packed(0))[1])
    (shifted,) = attention_calls(lowered(packed(4))[1])
    assert aligned.spec.template == CK and shifted.spec.template == SIMT


def test_one_unit_across_sizes_and_scales():
    """Sizes, batch, strides and the scale are run-time arguments: a BERT-sized and a GPT-sized
    problem with another scale share the translation unit; causal, dtype and the class split it."""
    funcs = [attention_calls(lowered(o)[1])[0].spec.func for o in
             (attn(), attn(batch=(1, 12), sq=384, scale=0.3), attn(batch=(8,), sq=33, sk=65))]
    assert len(set(funcs)) == 1
    others = [attention_calls(lowered(o)[1])[0].spec.func for o in
              (attn(causal=True), attn(dt="bfloat16"), attn(d=128))]
    assert len(set(funcs + others)) == 4


def _ck_view(flat: np.ndarray, off: int, g_len, g_str, rows, rs, cols, cs) -> np.ndarray:
    """What CK reads: (G..., rows, cols) lengths and strides from an element offset."""
    base = flat[off:]
    return np.lib.stride_tricks.as_strided(base, (*g_len, rows, cols),
                                           [s * flat.itemsize for s in (*g_str, rs, cs)], writeable=False)


def _replay(call, buffers: dict, out_size: int) -> np.ndarray:
    """The CK call's dims applied to numpy: q, k, v read through CK's descriptors (v as B1: (G, Dv,
    Sk) with unit stride along Dv), softmax(scale q k^T [causal]) v in float64, written through the
    result's descriptor into a zeroed buffer of the result's size."""
    d = [int(x) for x in call.dims]
    sq, sk, hd, vd = d[:4]
    g = call.spec.param_dict()["g_dims"]
    g_len = d[4:4 + g]
    gs = [d[4 + g * (1 + t):4 + g * (2 + t)] for t in range(4)]
    rows = d[4 + 5 * g:8 + 5 * g]
    scale = float(np.array(d[8 + 5 * g], np.uint32).view(np.float32))
    off = d[9 + 5 * g:13 + 5 * g]
    flat = [buffers[t.name].reshape(-1).astype(np.float64) for t in call.ptrs[1:4]]
    q = _ck_view(flat[0], off[0], g_len, gs[0], sq, rows[0], hd, 1)
    k = _ck_view(flat[1], off[1], g_len, gs[1], sk, rows[1], hd, 1)
    vt = _ck_view(flat[2], off[2], g_len, gs[2], vd, 1, sk, rows[2])     # B1 = v^T per batch item
    s = scale * q @ np.swapaxes(k, -1, -2)
    if call.spec.param_dict()["causal"]:
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)   # CK: masked where n > m
    p = np.exp(s - s.max(-1, keepdims=True))
    res = (p / p.sum(-1, keepdims=True)) @ np.swapaxes(vt, -1, -2)
    out = np.zeros(out_size)
    o = np.lib.stride_tricks.as_strided(out[off[3]:], (*g_len, sq, vd),
                                        [s * 8 for s in (*gs[3], rows[3], 1)])
    o[...] = res
    return out


@pytest.mark.parametrize("causal, sq", [(True, 24), (False, 24)])
def test_dims_replayed_through_ck_addressing(causal, sq):
    """A self-attention block whose q/k/v are windows of the packed QKV projection and whose result
    is written in [B, S, H, D] order (the passes fold those layouts into the op's views): the CK
    call's lengths, strides and element offsets, read the way CK's descriptors read them, give
    the oracle's attention output."""
    rng = np.random.default_rng(3)
    x = ag.Tensor([2, sq, 64], dtype="float16", name="x")
    qkv = ops.linear(x, ag.constant((rng.standard_normal((192, 64)) * 0.1).astype(np.float16)))
    parts = [ops.slice(qkv, [0, 0, j * 64], [2, sq, (j + 1) * 64]) for j in range(3)]
    q, k, v = (ops.permute(ops.reshape(t, [2, sq, 4, 16]), [0, 2, 1, 3]) for t in parts)
    att = ops.scaled_dot_product_attention(q, k, v, causal=causal)
    y = ops.reshape(ops.permute(att, [0, 2, 1, 3]), [2, sq, 64])
    g, calls = lowered({"y": y})
    (call,) = attention_calls(calls)
    assert call.spec.template == CK
    (op,) = [o for o in g.ops if o.kind is OpKind.ATTENTION]
    assert op.attrs.operand_views is not None and op.attrs.out_view is not None   # really strided
    d = [int(v) for v in call.dims]
    assert call.spec.param_dict()["g_dims"] == 2 and d[4:6] == [2, 4]          # G = (B, H)
    assert d[14:18] == [192, 192, 192, 64] and d[19:23] == [0, 64, 128, 0]      # rows; offsets

    feeds = {"x": (rng.standard_normal((2, sq, 64))).astype(np.float16)}
    src = op.inputs[0]
    assert all(t is src for t in op.inputs[:3])
    packed = ag.reference.run({"p": src}, feeds)["p"] if src.name != "x" else feeds["x"]
    want = ag.reference.run({"y": y}, feeds)["y"].astype(np.float64)
    got = _replay(call, {src.name: packed}, int(np.prod(want.shape)))
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=2e-2, atol=2e-3)


def test_render_prints_the_instance():
    (call,) = attention_calls(lowered(attn(causal=True, dt="bfloat16", d=128))[1])
    src = source(call)
    assert "DeviceBatchedGemmSoftmaxGemmPermute_Xdl_CShuffle" in src and "using T = ck::bhalf_t;" in src
    assert "MaskingSpec::MaskOutUpperTriangle" in src and "kPadMNKO" in src
    assert "1, 256, 128, 128, 64, 128, 32," in src            # block, M, N, K, O, gemm1 K
    assert "S<8, 32, 1>, S<0, 2, 1>, S<0, 2, 1>,\n    1, 4, 2, false," in src   # V: 4-wide along Dv
    (plain,) = attention_calls(lowered(attn())[1])
    assert "MaskingSpec::MaskDisabled" in source(plain)
