"""The CUDA attention kernels on a GPU against the oracle (skipped without one).

Tolerances, relative to max(1, largest |oracle output|): float16 4e-3 and bfloat16 2e-2 on the
tensor-core kernel (each probability is rounded to the storage type before P.V, exp2 is the SFU's
approximation; the numpy emulation in test_cuda_attention_compile.py stays within half of this),
float32 2e-5 on the CUDA-core kernel (float32 throughout, another summation order). A whole BERT
layer built in float16 against the float32 oracle: 3e-2 (float16 GEMMs, norms and activations).
Cases share a build: each build costs nvcc runs.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops

pytestmark = pytest.mark.gpu

TOL = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 2e-5}


def _close(got, want, tol, what):
    assert got.shape == want.shape, what
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.isfinite(g).all(), what
    err = np.abs(g - w).max(initial=0.0) / max(1.0, float(np.abs(w).max(initial=0.0)))
    assert err <= tol, f"{what}: error {err:.3g} > {tol}"


class _Cases:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.outs, self.feeds, self.dtypes, self.dynamic = {}, {}, {}, {}

    def input(self, name, shape, dtype, data=None):
        if data is None:
            concrete = [d if isinstance(d, int) else 1 for d in shape]
            data = self.rng.standard_normal(concrete).astype(ag.DType[dtype].np)
        self.feeds[name] = data
        return ag.Tensor(list(shape), dtype, name=name)

    def sdpa(self, name, dtype, b, h, sq, sk, d, dv=None, mask=None, causal=False, kv_heads=None):
        q = self.input(f"{name}_q", [b, h, sq, d], dtype)
        k = self.input(f"{name}_k", [b, kv_heads or h, sk, d], dtype)
        v = self.input(f"{name}_v", [b, kv_heads or h, sk, dv or d], dtype)
        m = None
        if mask == "add":  # BERT's padding mask: -10000 on the last keys of batch item 0, -inf on one
            data = np.zeros((b, 1, 1, sk), np.float32)
            data[0, ..., -max(1, sk // 4):] = -10000.0
            data[-1, ..., 0] = -np.inf
            m = self.input(f"{name}_m", [b, 1, 1, sk], dtype, data.astype(ag.DType[dtype].np))
        elif mask == "bool":  # random, with one query row that may attend to nothing
            data = self.rng.random((b, 1, sq, sk)) < 0.7
            data[0, 0, sq // 2, :] = False
            m = self.input(f"{name}_m", [b, 1, sq, sk], "bool", data)
        self.outs[name] = ops.scaled_dot_product_attention(q, k, v, m, causal=causal)
        self.dtypes[name] = dtype


def _check(model, cases, what):
    got, want = model.run(cases.feeds), ag.reference.run(cases.outs, cases.feeds)
    for name, w in want.items():
        _close(got[name], w, TOL[cases.dtypes[name]], f"{what}: {name}")


def test_attention_cases_equal_the_oracle(gpu_arch, tmp_path):
    c = _Cases()
    for dtype, d in (("float16", 64), ("bfloat16", 128)):
        for i, s in enumerate((1, 17, 64, 77, 128, 130, 257)):
            mask = (None, "add", "bool")[i % 3]
            c.sdpa(f"{dtype}_s{s}", dtype, 2, 3, s, s, d, mask=mask, causal=i % 2 == 1)
        c.sdpa(f"{dtype}_cross", dtype, 1, 2, 40, 300, d, mask="add")          # Sq < Sk, many key tiles
        c.sdpa(f"{dtype}_causal_wide", dtype, 1, 2, 33, 150, d, causal=True)  # top-left causal, Sq < Sk
        c.sdpa(f"{dtype}_mqa", dtype, 2, 4, 70, 70, d, causal=True, kv_heads=1)  # k/v broadcast over heads
    c.sdpa("f32", "float32", 2, 3, 77, 77, 64, mask="add", causal=True)        # CUDA cores
    c.sdpa("f16_d48", "float16", 2, 2, 50, 50, 48, dv=32, mask="bool")           # no tensor-core head dim
    # big batch x heads: four-warp tiles
    c.sdpa("f16_wide", "float16", 8, 16, 256, 256, 64, mask="add")
    model = ag.compile_model(c.outs, target="cuda", arch=gpu_arch, workdir=tmp_path / "m")
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    templates = [k["template"] for k in report["kernels"]]
    assert sum("attention_mma" in t for t in templates) == len(c.outs) - 2
    assert sum("attention_simt" in t for t in templates) == 2
    _check(model, c, "static")


def test_packed_qkv_views_misaligned_and_dynamic(gpu_arch, tmp_path):
    """q, k, v as windows of one [B, S, 3HD(+1)] tensor (the fused QKV GEMM's layout), the result
    written in [B, S, H, D] order; a one-element offset makes every row start off a 16-byte
    boundary (the element-wise copy path); batch and seq are run-time dims."""
    c = _Cases(1)
    bv, sv = ag.IntVar("batch", 1, 4), ag.IntVar("seq", 1, 300)
    for name, dtype, h, d, pad, causal in (("packed", "float16", 4, 64, 0, False),
                                          ("packed_odd", "bfloat16", 2, 128, 1, True)):
        x = c.input(f"{name}_x", [bv, sv, 3 * h * d + pad], dtype)
        q, k, v = (ops.permute(ops.reshape(ops.slice(x, [pad + i * h * d], [pad + (i + 1) * h * d], axes=[2]),
                                           [bv, sv, h, d]), [0, 2, 1, 3]) for i in range(3))
        y = ops.scaled_dot_product_attention(q, k, v, causal=causal)
        c.outs[name] = ops.reshape(ops.permute(y, [0, 2, 1, 3]), [bv, sv, h * d])
        c.dtypes[name] = dtype
    model = ag.compile_model(c.outs, target="cuda", arch=gpu_arch, workdir=tmp_path / "m")
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert [k["template"] for k in report["kernels"]] == ["cuda/templates/attention_mma.cu.j2"] * 2
    for b, s in ((1, 1), (3, 67), (4, 300), (2, 128)):
        for name in c.outs:
            width = c.feeds[f"{name}_x"].shape[2]
            c.feeds[f"{name}_x"] = c.rng.standard_normal((b, s, width)).astype(c.feeds[f"{name}_x"].dtype)
        _check(model, c, f"batch {b} seq {s}")


def test_bert_layer_float16(gpu_arch, tmp_path):
    """A whole BERT layer (packed QKV GEMM, strided attention reads and writes, padding mask) in
    float16 against the float32 oracle; dynamic seq."""
    seq = ag.IntVar("seq", 1, 128)
    _, outputs = ag.models.get("bert_base", batch=2, seq=seq, layers=1, hidden=256, heads=4,
                               intermediate=512, vocab=100, max_position=128)
    model = ag.compile_model(outputs, target="cuda", arch=gpu_arch, workdir=tmp_path / "bert", precision="float16")
    report = json.loads((tmp_path / "bert" / "report.json").read_text())
    templates = [k["template"] for k in report["kernels"]]
    assert sum("attention_mma" in t for t in templates) == 1, templates
    rng = np.random.default_rng(2)
    for s in (77, 128):
        mask = np.ones((2, s), np.int64)
        mask[1, s - 20:] = 0
        feeds = {"input_ids": rng.integers(0, 100, (2, s)), "token_type_ids": rng.integers(0, 2, (2, s)),
                 "attention_mask": mask}
        got, want = model.run(feeds), ag.reference.run(outputs, feeds)
        for name, w in want.items():
            _close(np.asarray(got[name], np.float32), w, 3e-2, f"bert seq {s}: {name}")
