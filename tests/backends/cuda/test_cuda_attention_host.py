"""The CUDA attention kernels run whole on the host, against the oracle, without a GPU.

cuda_host_emu.py compiles the rendered kernels with g++ and runs every CUDA thread as a fiber;
backends/cuda/include/aitgen/cuda_attention.cuh gives the tensor-core primitives (ldmatrix,
mma.sync m16n8k16, cp.async) host versions with the PTX ISA's lane mapping, exchanged through the
emulated warp shuffles. So the tiling, the two-stage cp.async ring, the per-warp edge tests, masks,
tails, strided and misaligned operands, the staged stores and the argument decoding all run here;
what stays for a GPU is the PTX itself and timing.

Tolerances, relative to max(1, largest |oracle output|): float16 2e-3, bfloat16 1.6e-2 (each
probability is rounded to the storage type before P.V, as on the GPU), float32 1e-5.
"""
from __future__ import annotations

import cuda_host_emu as emu  # beside this file (pytest puts the test's folder on sys.path)
import numpy as np
import pytest

import aitgen as ag
from aitgen import ops

TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}


@pytest.fixture
def attention_emu(monkeypatch):
    # The emulator builds every kernel into one translation unit, each inside a namespace of its
    # own: the attention header must be included once at file scope first, like the others.
    monkeypatch.setattr(emu, "PRELUDE", emu.PRELUDE + '#include "aitgen/cuda_attention.cuh"\n')
    return emu


class _Cases:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.outs, self.feeds, self.dtypes = {}, {}, {}

    def input(self, name, shape, dtype, data=None):
        if data is None:
            data = self.rng.standard_normal([d if isinstance(d, int) else 1 for d in shape]).astype(ag.DType[dtype].np)
        self.feeds[name] = data
        return ag.Tensor(list(shape), dtype, name=name)

    def sdpa(self, name, dtype, b, h, sq, sk, d, dv=None, mask=None, causal=False, kv_heads=None):
        q = self.input(f"{name}_q", [b, h, sq, d], dtype)
        k = self.input(f"{name}_k", [b, kv_heads or h, sk, d], dtype)
        v = self.input(f"{name}_v", [b, kv_heads or h, sk, dv or d], dtype)
        m = None
        if mask == "add":  # padding on batch item 0, and one key of the last removed outright
            data = np.zeros((b, 1, 1, sk), np.float32)
            data[0, ..., -3:] = -10000.0
            data[-1, ..., 1] = -np.inf
            m = self.input(f"{name}_m", [b, 1, 1, sk], dtype, data.astype(ag.DType[dtype].np))
        elif mask == "bool":  # random, and query row 1 may attend to nothing
            data = self.rng.random((b, 1, sq, sk)) < 0.7
            data[0, 0, 1, :] = False
            m = self.input(f"{name}_m", [b, 1, sq, sk], "bool", data)
        self.outs[name] = ops.scaled_dot_product_attention(q, k, v, m, causal=causal)
        self.dtypes[name] = dtype

    def packed(self, name, dtype, b, s, h, d, pad, causal):
        """q, k, v as windows of one [B, S, 3HD + pad] tensor starting at element `pad`, the result
        written in [B, S, H, D] order (fuse_memory_ops folds the slices and permutes)."""
        x = self.input(f"{name}_x", [b, s, 3 * h * d + pad], dtype)
        q, k, v = (ops.permute(ops.reshape(ops.slice(x, [pad + i * h * d], [pad + (i + 1) * h * d], axes=[2]),
                                           [b, s, h, d]), [0, 2, 1, 3]) for i in range(3))
        y = ops.scaled_dot_product_attention(q, k, v, causal=causal)
        self.outs[name] = ops.reshape(ops.permute(y, [0, 2, 1, 3]), [b, s, h * d])
        self.dtypes[name] = dtype


def _check(got, want, cases, what):
    for name, w in want.items():
        g64, w64 = got[name].astype(np.float64), w.astype(np.float64)
        assert g64.shape == w64.shape and np.isfinite(g64).all(), (what, name)
        err = np.abs(g64 - w64).max(initial=0.0) / max(1.0, float(np.abs(w64).max(initial=0.0)))
        assert err <= TOL[cases.dtypes[name]], f"{what}: {name}: error {err:.3g}"


def test_attention_kernels_run_on_the_host(attention_emu, tmp_path):
    c = _Cases()
    # tensor cores: key tiles streamed through the ring (70, 130 keys), causal + bool mask with an
    # empty row, additive mask with -inf, Sq < Sk, k/v broadcast over heads
    c.sdpa("f16_causal_bool", "float16", 1, 2, 40, 70, 64, mask="bool", causal=True)
    c.sdpa("bf16_add_d128", "bfloat16", 1, 1, 20, 130, 128, mask="add")
    c.sdpa("f16_mqa", "float16", 2, 2, 18, 18, 64, causal=True, kv_heads=1)
    # packed QKV: rows 16-byte aligned (cp.async) and one element off (the element-wise path)
    c.packed("packed_f16_d128", "float16", 1, 24, 2, 128, 0, False)
    c.packed("packed_bf16_odd", "bfloat16", 2, 21, 1, 64, 1, True)
    # CUDA cores: float32, head dims 48 / 32, and a run-time head dim (scale from it)
    c.sdpa("f32_causal_add", "float32", 1, 2, 20, 40, 64, mask="add", causal=True)
    c.sdpa("f16_d48", "float16", 1, 2, 19, 35, 48, dv=32, mask="bool")
    c.sdpa("bf16_dyn_d", "bfloat16", 1, 2, 9, 33, ag.IntVar("d", 1, 64))
    # four-warp tiles (sized for the bound of seq) at small run-time sizes: per-warp edges
    seq = ag.IntVar("seq", 1, 4096)
    c.sdpa("f16_dyn_seq", "float16", 2, 1, seq, seq, 64, causal=True)
    for n, s in (("q", 9), ("k", 33), ("v", 33)):  # head dim 24 at run time
        c.feeds[f"bf16_dyn_d_{n}"] = c.rng.standard_normal((1, 2, s, 24)).astype(ag.DType["bfloat16"].np)

    graph, plan, calls = attention_emu.lower(c.outs)
    kinds = [cl.spec.template.rsplit("/", 1)[-1] for cl in calls]
    assert kinds.count("attention_mma.cu.j2") == 6 and kinds.count("attention_simt.cu.j2") == 3, kinds
    warps = [cl.spec.param_dict()["warps"] for cl in calls if "mma" in cl.spec.template]
    assert warps.count(4) == 1  # f16_dyn_seq; the static ones are small: one-warp tiles
    model = attention_emu.Emulated(graph, plan, calls, attention_emu.build(calls, tmp_path))
    for s in (77, 16, 1):
        for n in ("q", "k", "v"):
            c.feeds[f"f16_dyn_seq_{n}"] = c.rng.standard_normal((2, 1, s, 64)).astype(np.float16)
        _check(model.run(c.feeds), ag.reference.run(c.outs, c.feeds), c, f"seq {s}")
