"""The attention kernel reading q/k/v as strided views (windows of one packed QKV GEMM output, a
sliced and broadcast mask) and writing its result in [B, S, H, D] order, as fuse_parallel_gemms,
fuse_memory_ops and fuse_attention leave it: built once with many cases, compared with the oracle
(float32 within 1e-5 relative to the magnitude, float16 within 2e-3: the kernel's blocked online
softmax sums in another order)."""
import math

import numpy as np

import aitgen as ag
from aitgen import ops

RNG = np.random.default_rng(0)


def _w(*shape):
    return ag.constant((RNG.standard_normal(shape) * 0.3).astype(np.float32))


def _heads(t, b, s, h, d):
    return ops.permute(ops.reshape(t, [b, s, h, d]), [0, 2, 1, 3])


def _merge(a, b, s, h, d):
    return ops.reshape(ops.permute(a, [0, 2, 1, 3]), [b, s, h * d])


def _bert_block(x, mask, b, s, h, d):
    """HF BERT self-attention: three Linears, head split, additive mask, head merge."""
    q, k, v = (_heads(ops.linear(x, _w(h * d, h * d), _w(h * d)), b, s, h, d) for _ in range(3))
    return _merge(ops.scaled_dot_product_attention(q, k, v, mask), b, s, h, d)


def _causal_by_hand(x, b, s, h, d):
    """GPT-2 written out: packed c_attn split, matmul/transpose, scale, causal where, softmax."""
    qkv = ops.linear(x, _w(3 * h * d, h * d), _w(3 * h * d))
    q, k, v = (_heads(t, b, s, h, d) for t in ops.split(qkv, 3, axis=2))
    scores = ops.matmul(q, ops.transpose(k, -1, -2)) / ag.constant(np.float32(math.sqrt(d)))
    tril = ag.constant(np.tril(np.ones((s, s), bool)))
    p = ops.softmax(ops.where(tril, scores, ag.constant(np.finfo(np.float32).min)), -1)
    return _merge(ops.matmul(p, v), b, s, h, d)


def test_strided_attention_cases_equal_the_oracle(tmp_path):
    outputs, feeds, inputs = {}, {}, []

    def inp(name, shape, dtype="float32", data=None):
        t = ag.Tensor(shape, dtype=dtype, name=name)
        inputs.append(t)
        feeds[name] = data if data is not None else RNG.standard_normal(
            [d if isinstance(d, int) else 3 for d in shape]).astype(ag.DType[dtype].np)
        return t

    # 1. BERT block, static: seq 70 > one 64-key block, 12 x 16 heads
    b, s, h, d = 2, 70, 3, 16
    x = inp("x", [b, s, h * d])
    m = np.zeros((b, 1, 1, s), np.float32)
    m[0, ..., -5:] = -10000.0
    outputs["bert"] = _bert_block(x, inp("m", [b, 1, 1, s], data=m), b, s, h, d)
    # 2. the same with dynamic batch and seq (strides are run-time polynomials)
    bd, sd = ag.IntVar("batch", 1, 4), ag.IntVar("seq", 1, 80)
    xd = inp("xd", [bd, sd, h * d])
    outputs["bert_dyn"] = _bert_block(xd, None, bd, sd, h, d)
    # 3. causal attention written out by hand, recognised, packed QKV read in place
    outputs["causal"] = _causal_by_hand(inp("xc", [1, 9, 2 * 8]), 1, 9, 2, 8)
    # 4. float16 windows of an input, a mask sliced out of a table and broadcast over heads
    b4, s4, h4, d4 = 2, 5, 2, 4
    x4 = inp("x4", [b4, s4, 3 * h4 * d4], "float16")
    q4, k4, v4 = (_heads(t, b4, s4, h4, d4) for t in ops.split(x4, 3, axis=2))
    table = inp("table", [b4, 8, 8], "float16")
    mask4 = ops.expand(ops.reshape(ops.slice(table, [1, 2], [1 + s4, 2 + s4], axes=[1, 2]), [b4, 1, s4, s4]),
                       [b4, h4, s4, s4])
    outputs["f16"] = _merge(ops.scaled_dot_product_attention(q4, k4, v4, mask4), b4, s4, h4, d4)
    # 5. multi-query: one k/v head broadcast to every query head
    q5 = _heads(inp("q5", [2, 6, 4 * 8]), 2, 6, 4, 8)
    kv5 = inp("kv5", [2, 6, 2 * 8])
    k5, v5 = (ops.permute(ops.reshape(t, [2, 6, 1, 8]), [0, 2, 1, 3]) for t in ops.split(kv5, 2, axis=2))
    outputs["mqa"] = _merge(ops.scaled_dot_product_attention(q5, k5, v5, causal=True), 2, 6, 4, 8)

    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / "m")
    import json
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    templates = [k["template"] for k in report["kernels"]]
    # every head split/merge, QKV split, mask slice and expand folded: no copy kernel is left
    assert not any("strided_copy" in t for t in templates), [k["op"] for k in report["kernels"]]
    assert sum("attention" in t for t in templates) == 5
    assert sum("gemm" in t for t in templates) == 3  # one packed GEMM per Q/K/V block

    for sizes in ({"batch": 3, "seq": 67}, {"batch": 1, "seq": 1}):
        feeds["xd"] = RNG.standard_normal((sizes["batch"], sizes["seq"], h * d)).astype(np.float32)
        got, want = model.run(feeds), ag.reference.run(outputs, feeds)
        for k, w in want.items():
            assert got[k].shape == w.shape, k
            w64, g64 = w.astype(np.float64), got[k].astype(np.float64)
            tol = 2e-3 if w.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(g64, w64, rtol=tol, atol=tol * max(1.0, float(np.abs(w64).max())),
                                       err_msg=k)


def test_16bit_attention_converts_rows_in_bulk(tmp_path):
    """float16 and bfloat16 attention convert q, k and v rows and the output rows a block at a time
    (aitgen/cpu_convert.h; F16C for float16): head dims that are no multiple of the vector width
    (37 for q and k, 21 for v), two key blocks (150 keys), a query block of 6 rows after 64, an
    additive mask with -inf and causal attention, against the oracle (float16 within 2e-3 of the
    output's magnitude, bfloat16 2e-2: the oracle computes in float32 and rounds once)."""
    rng = np.random.default_rng(12)
    outs, feeds = {}, {}
    for dt in ("float16", "bfloat16"):
        q, k = ag.Tensor([2, 3, 70, 37], dt, name=f"q_{dt}"), ag.Tensor([2, 3, 150, 37], dt, name=f"k_{dt}")
        v, m = ag.Tensor([2, 3, 150, 21], dt, name=f"v_{dt}"), ag.Tensor([2, 1, 70, 150], dt, name=f"m_{dt}")
        outs[f"masked_{dt}"] = ops.scaled_dot_product_attention(q, k, v, m)
        outs[f"causal_{dt}"] = ops.scaled_dot_product_attention(q, k, v, causal=True)
        mask = np.where(rng.random((2, 1, 70, 150)) < 0.2, -np.inf, rng.standard_normal((2, 1, 70, 150)))
        feeds |= {f"q_{dt}": rng.standard_normal((2, 3, 70, 37)), f"k_{dt}": rng.standard_normal((2, 3, 150, 37)),
                  f"v_{dt}": rng.standard_normal((2, 3, 150, 21)), f"m_{dt}": mask}
        feeds = {n: a.astype(ag.DType[dt].np) if n.endswith(dt) else a for n, a in feeds.items()}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    src = "\n".join(f.read_text() for f in (tmp_path / "m" / "obj" / "src").glob("k_*.cpp") if "attention" in f.read_text())
    # 2 dtypes x 2 kernels (bfloat16's AMX path, attention_amx.inc.j2, converts its probabilities too)
    assert src.count("ait::to_f32_block(kp + ") == 4 and src.count("ait::from_f32_block(static_cast<const float*>(vc)") == 4
    got, want = model.run(feeds), ag.reference.run(outs, feeds)
    for name in outs:
        tol = 2e-3 if "float16" in name and "bfloat16" not in name else 2e-2
        g, w = got[name].astype(np.float32), want[name].astype(np.float32)
        assert np.isfinite(g).all(), name
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max(), err_msg=name)
