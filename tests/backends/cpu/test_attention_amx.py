"""bfloat16 attention on AMX (backends/cpu/templates/attention_amx.inc.j2): Q K^T and P V on the
tile unit, the softmax in float32 between them, probabilities rounded to bfloat16.

Against the float32 oracle on shapes that pad every tile dimension (head dims that are not a
multiple of 32, value dims not a multiple of 16, key and query counts off the tile grid), with each
mask kind, causal, strided views of a packed QKV tensor, rows with every key masked (zeros) and a
NaN query (its row NaN), and keys past the AMX path's limit (the float32 path). Each model also runs
with AITGEN_ATTENTION_AMX=0 (the float32 path, in a fresh process): both within bfloat16's tolerance,
and not the same bits, which shows the tile path ran. Skipped on CPUs without AMX-BF16, where the
bfloat16 attention tests of the float32 path (test_bf16_policy.py, the op catalogue) cover it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops


def _has_amx() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " amx_bf16" in flags and " amx_tile" in flags


pytestmark = pytest.mark.skipif(not _has_amx(), reason="needs a CPU with AMX-BF16 (the float32 path runs elsewhere)")

# bfloat16 operands and result (8-bit mantissas) and bfloat16 probabilities: a few 1e-3 of the
# output's magnitude; 2e-2 leaves room and still catches a wrong tile, mask or padding.
TOL = 2e-2


def _cases():
    rng = np.random.default_rng(0)

    def qkv(b, h, sq, sk, d, dv):
        return {"q": rng.standard_normal((b, h, sq, d)).astype(np.float32),
                "k": rng.standard_normal((b, h, sk, d)).astype(np.float32),
                "v": rng.standard_normal((b, h, sk, dv)).astype(np.float32)}

    def tensors(b, h, sq, sk, d, dv):
        return (ag.Tensor([b, h, sq, d], name="q"), ag.Tensor([b, h, sk, d], name="k"),
                ag.Tensor([b, h, sk, dv], name="v"))

    out = {}
    # plain, head dims off the tile grid
    q, k, v = tensors(2, 3, 77, 50, 40, 24)
    out["odd"] = ({"o": ops.scaled_dot_product_attention(q, k, v)}, qkv(2, 3, 77, 50, 40, 24))
    # additive mask per query, a fully masked row, a row masked by a large finite value, a NaN query
    q, k, v = tensors(1, 2, 33, 70, 96, 80)
    m = ag.Tensor([1, 1, 33, 70], name="m")
    f = qkv(1, 2, 33, 70, 96, 80)
    f["m"] = (rng.standard_normal((1, 1, 33, 70)) * 2).astype(np.float32)
    f["m"][0, 0, 5, :] = -np.inf
    f["m"][0, 0, 7, :] = -1e4  # every key far below 0 (HF's padding value): still a softmax, not zeros
    f["q"][0, 1, 9, 3] = np.nan
    out["add_mask"] = ({"o": ops.scaled_dot_product_attention(q, k, v, m)}, f)
    # bool mask broadcast over queries, and causal
    q, k, v = tensors(2, 2, 20, 45, 64, 64)
    keep = ag.Tensor([2, 1, 1, 45], dtype="bool", name="keep")
    f = qkv(2, 2, 20, 45, 64, 64)
    f["keep"] = rng.random((2, 1, 1, 45)) > 0.3
    out["bool_mask"] = ({"o": ops.scaled_dot_product_attention(q, k, v, keep)}, f)
    q, k, v = tensors(1, 2, 40, 40, 32, 32)
    out["causal"] = ({"o": ops.scaled_dot_product_attention(q, k, v, causal=True)}, qkv(1, 2, 40, 40, 32, 32))
    # BERT's layout: q, k, v strided views of one packed [B, S, 3 H D] tensor, mask [B, 1, 1, S]
    x, mk = ag.Tensor([1, 36, 3 * 4 * 32], name="x"), ag.Tensor([1, 1, 1, 36], name="m")
    heads = [ops.permute(ops.reshape(ops.slice(x, [0, 0, i * 128], [1, 36, (i + 1) * 128]), [1, 36, 4, 32]),
                         [0, 2, 1, 3]) for i in range(3)]
    f = {"x": rng.standard_normal((1, 36, 384)).astype(np.float32), "m": np.zeros((1, 1, 1, 36), np.float32)}
    f["m"][0, 0, 0, 30:] = -1e4
    out["packed"] = ({"o": ops.scaled_dot_product_attention(*heads, mk)}, f)
    # more keys than the tile path keeps whole: the float32 path
    q, k, v = tensors(1, 1, 3, 4100, 16, 16)
    out["long"] = ({"o": ops.scaled_dot_product_attention(q, k, v)}, qkv(1, 1, 3, 4100, 16, 16))
    return out


def _run_fp32_path(workdir: Path, feeds: dict, tmp: Path) -> dict:
    np.savez(tmp / "feeds.npz", **feeds)
    code = textwrap.dedent(f"""
        import numpy as np, aitgen as ag
        z = np.load({str(tmp / 'feeds.npz')!r})
        with ag.Model.load({str(workdir)!r}) as m:
            np.savez({str(tmp / 'out.npz')!r}, **m.run({{k: z[k] for k in z.files}}))
    """)
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, AITGEN_ATTENTION_AMX="0"), check=True,
                   capture_output=True, text=True)
    z = np.load(tmp / "out.npz")
    return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name", ["odd", "add_mask", "bool_mask", "causal", "packed", "long"])
def test_bf16_attention_on_amx_matches_the_oracle(tmp_path, name):
    outs, feeds = _cases()[name]
    work = tmp_path / "w"
    with ag.compile_model(outs, target="cpu", workdir=str(work), precision="bfloat16") as model:
        got = model.run(feeds)["o"]
    want = ag.reference.run(outs, feeds)["o"]
    fp32_path = _run_fp32_path(work, feeds, tmp_path)["o"]
    for out in (got, fp32_path):
        assert np.array_equal(np.isnan(out), np.isnan(want))
        fin = np.isfinite(want)
        scale = float(np.abs(want[fin]).max())
        np.testing.assert_allclose(out[fin], want[fin], rtol=0, atol=TOL * scale)
    if name == "add_mask":
        assert (got[0, :, 5] == 0).all() and np.isnan(got[0, 1, 9]).all() and not np.isnan(got[0, 0, 9]).any()
    if name == "long":
        assert np.array_equal(got, fp32_path)   # past kAmxMaxKeys both are the float32 path
    else:
        assert not np.array_equal(got, fp32_path)  # the tile path ran (its probabilities are bfloat16)
