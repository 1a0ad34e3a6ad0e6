"""Constant GEMM weights on a CPU without oneDNN's brgemm matmul (no AVX-512), where the matmul is
its sgemm-based `gemm:jit` implementation. A float32 weight is packed once for oneDNN's packed sgemm
(backends/cpu/src/onednn_sgemm.cpp; tests/backends/cpu/test_packed_sgemm.py). Without it
(AITGEN_PACKED_SGEMM=0, or a product sgemm cannot take) the matmul primitive gets the weight stored
K-contiguous (sgemm's transposed B, `ba` for [K, N]), not in the layout `any` gives, which sgemm
repacks on every call (make_matmul's gemm_weight_layout in backends/cpu/src/onednn_kernels.cpp; 2x
on [128, 768] x [768, 3072] on an AVX2 EPYC).

The run is a subprocess with ONEDNN_MAX_CPU_ISA=AVX2, so any x86 machine dispatches as an AVX2-only
one does, and ONEDNN_VERBOSE=1, whose exec lines name the weight's layout. Numbers against the
oracle, float32, rtol 1e-5, atol 1e-5 x max|reference|.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from cpu_cases import Seeded, check

S = Seeded(777)
TOL = 1e-5

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="ONEDNN_MAX_CPU_ISA=AVX2 exists on x86 only")

_RUN = r"""
import json, sys
import numpy as np
import aitgen as ag
m = ag.Model(sys.argv[1])
feeds = {k: np.load(v) for k, v in json.loads(sys.argv[2]).items()}
for _ in range(2):
    out = m.run(feeds)
np.save(sys.argv[3], out["y"])
print("impls", json.dumps(m.kernel_report()["onednn_impls"]))
"""


def _graph():
    x = ag.Tensor([2, 24, 40], name="x")
    h = ops.gemm(x, S.const((40, 96), scale=0.1), S.const((96,)), name="fc1")   # [K, N] weight
    w2 = S.const((64, 96), scale=0.1)                                           # [N, K], read transposed
    y = ops.gemm(ops.tanh(h), ops.permute(w2, [1, 0]), name="fc2")
    return {"y": y}


def _run_under_avx2(tmp_path, **env_extra) -> subprocess.CompletedProcess:
    outs = _graph()
    if not (tmp_path / "m").exists():
        ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = {"x": S.rand((2, 24, 40))}
    want = ag.reference.run(outs, feeds)["y"]
    np.save(tmp_path / "x.npy", feeds["x"])
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", ONEDNN_VERBOSE="1", OMP_NUM_THREADS="2", **env_extra)
    r = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path / "m"), json.dumps({"x": str(tmp_path / "x.npy")}),
                        str(tmp_path / "y.npy")], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    check({"y": np.load(tmp_path / "y.npy")}, {"y": want}, TOL)
    return r


def _impls(r) -> dict:
    return json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("impls "))[len("impls "):])


def test_constant_weights_packed_for_sgemm_under_avx2(tmp_path):
    r = _run_under_avx2(tmp_path)
    impls = _impls(r)
    assert len(impls) == 2 and all(v == "gemm:jit:f32:packed_sgemm" for v in impls.values()), impls
    # no matmul primitive ran: both products went through the packed weights
    assert not [ln for ln in r.stdout.splitlines() if ",exec," in ln and ",matmul," in ln], r.stdout[-3000:]


def test_constant_weights_k_contiguous_under_avx2(tmp_path):
    r = _run_under_avx2(tmp_path, AITGEN_PACKED_SGEMM="0")
    assert all(v == "gemm:jit:f32" for v in _impls(r).values()), _impls(r)
    execs = [ln for ln in r.stdout.splitlines() if ln.startswith("onednn_verbose") and ",exec," in ln
             and ",matmul," in ln]
    assert len(execs) >= 2, r.stdout[-3000:]
    for ln in execs:
        assert ",gemm:" in ln, ln  # the sgemm-based implementation, as without AVX-512
        wei = next(f for f in ln.split() if f.startswith("wei_f32"))
        assert wei.endswith((":ba::f0", ":acb::f0")), ln  # K-contiguous ([K, N] or [1, K, N]), both weights
