"""Float32 products with constant weights through oneDNN's packed sgemm, on a CPU without AVX-512
(backends/cpu/src/onednn_sgemm.cpp): the weight packed once per constants version and thread count,
the bias as C's initial value, the fused epilogue in the kernel's loop.

The model runs in a subprocess with ONEDNN_MAX_CPU_ISA=AVX2, so any x86 machine dispatches as an
AVX2-only one does (elsewhere oneDNN's brgemm matmul prepacks the weight itself and this path is not
taken). Each product is checked to have run packed (the kernel report names `:packed_sgemm`), and
every output against the oracle, float32, rtol 1e-5, atol 1e-5 x max|reference|: at three sizes of
a dynamic M (the weight is packed at the first), with NaN and +-inf in the input, after
set_constants (a re-pack), at 1 and 2 threads (a pack each), and, for the same build with the
switch off (AITGEN_PACKED_SGEMM=0), the matmul primitive agreeing with it.
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
from cpu_cases import Seeded, check, cpu_flags

S = Seeded(4242)
TOL = 1e-5

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="ONEDNN_MAX_CPU_ISA=AVX2 exists on x86 only")

# Runs the build for each feed set in turn (saved as feeds_<i>.npz), then applies the new constants
# (constants.npz) and runs the last feed set again; threads come from the plan. Writes out_<i>.npz
# and the kernel report.
_RUN = r"""
import json, sys
import numpy as np
import aitgen as ag
work, tmp, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
m = ag.Model.load(work)
for i, threads in enumerate(plan["threads"]):
    m.set_num_threads(threads)
    feeds = dict(np.load(f"{tmp}/feeds_{i}.npz"))
    np.savez(f"{tmp}/out_{i}.npz", **m.run(feeds))
m.set_constants(dict(np.load(f"{tmp}/constants.npz")))
feeds = dict(np.load(f"{tmp}/feeds_{len(plan['threads']) - 1}.npz"))
np.savez(f"{tmp}/out_new.npz", **m.run(feeds))
print("impls", json.dumps(m.kernel_report()["onednn_impls"]))
"""


def _graph():
    m = ag.IntVar("m", 1, 200)
    x = ag.Tensor([m, 192], name="x")
    r = ag.Tensor([m, 160], name="r")
    w1 = ag.constant(S.rand((160, 192)) * 0.1, name="w1")    # [N, K] as torch's Linear: K-contiguous
    b1 = ag.constant(S.rand((160,)), name="b1")
    w2 = ag.constant(S.rand((160, 96)) * 0.1, name="w2")     # [K, N]: transposed before packing
    w3 = ag.constant(S.rand((80, 96)) * 0.1, name="w3")     # 80 columns: the next part 64-byte aligned
    w4 = ag.constant(S.rand((96, 160)) * 0.1, name="w4")
    b4 = ag.constant(S.rand((96,)), name="b4")
    h = ops.gelu(ops.linear(x, w1, b1)) + r                  # erf GELU and a residual: the loop
    wide = ops.slice(x, [64], [160], axes=[1])               # a strided source: rows of 192, 96 read
    outs = {
        "h": h,
        "y": ops.gemm(h, w2),                                # no bias: beta 0
        # both products write into one [m, 168] concat: each result at a row stride of 176
        "cat": ops.tanh(ops.concat([ops.linear(wide, w3), ops.linear(h, w4, b4)], axis=1)),
    }
    return outs, {"w1": w1, "b1": b1, "w2": w2, "w3": w3, "w4": w4, "b4": b4}


def _feeds(rows: int, special: bool = False) -> dict:
    f = {"x": S.rand((rows, 192)), "r": S.rand((rows, 160))}
    if special:  # NaN and +-inf reach the sums, the bias add and the epilogue as numpy has them
        f["x"][0, 3] = np.nan
        f["x"][1, :] = np.inf
        f["x"][2, 5] = -np.inf
    return f


def _run(tmp_path, work, feeds: list, threads: list, new_constants: dict, **env_extra):
    for i, f in enumerate(feeds):
        np.savez(tmp_path / f"feeds_{i}.npz", **f)
    np.savez(tmp_path / "constants.npz", **new_constants)
    env = dict(os.environ, **{"ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "2", **env_extra})
    r = subprocess.run([sys.executable, "-c", _RUN, str(work), str(tmp_path), json.dumps({"threads": threads})],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    impls = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("impls "))[len("impls "):])
    outs = [dict(np.load(tmp_path / f"out_{i}.npz")) for i in range(len(feeds))]
    return outs, dict(np.load(tmp_path / "out_new.npz")), impls


def test_packed_sgemm_matches_the_oracle(tmp_path):
    outs, consts = _graph()
    work = tmp_path / "m"
    ag.compile_model(outs, target="cpu", workdir=work)
    feeds = [_feeds(37), _feeds(1), _feeds(200, special=True), _feeds(64)]
    threads = [2, 2, 2, 1]
    new = {k: S.rand(c.shape) * 0.1 for k, c in consts.items()}
    got, got_new, impls = _run(tmp_path, work, feeds, threads, new)

    packed = [k for k, v in impls.items() if v.endswith(":packed_sgemm")]
    assert len(packed) == 4, impls
    for g, f in zip(got, feeds):
        with np.errstate(invalid="ignore", over="ignore"):
            want = ag.reference.run(outs, f)
        for k in want:   # NaN where the oracle has NaN, infinities where it has them
            np.testing.assert_array_equal(np.isnan(g[k]), np.isnan(want[k]), err_msg=k)
            np.testing.assert_array_equal(np.isinf(g[k]) * np.sign(g[k]), np.isinf(want[k]) * np.sign(want[k]),
                                          err_msg=k)
        finite = {k: np.where(np.isfinite(want[k]), want[k], 0) for k in want}
        check({k: np.where(np.isfinite(want[k]), g[k], 0) for k in want}, finite, TOL)
    for name, c in consts.items():  # the re-packed weights
        c.value = new[name]
    check(got_new, ag.reference.run(outs, feeds[-1]), TOL)

    # The same build with the switch off runs the matmul primitive, and agrees.
    plain, _, plain_impls = _run(tmp_path, work, feeds[:1], [2], new, AITGEN_PACKED_SGEMM="0")
    assert not any(v.endswith(":packed_sgemm") for v in plain_impls.values()), plain_impls
    check(plain[0], got[0], TOL)


@pytest.mark.skipif("avx512f" not in cpu_flags(), reason="needs a CPU with AVX-512 (oneDNN's avx512_core kernels)")
def test_no_packed_sgemm_on_avx512(tmp_path):
    # oneDNN 3.2's AVX-512 packed sgemm crashed (segfault) for 2..15 rows M; with AVX-512 the path
    # is off and every product runs the matmul primitive, at those M too, against the oracle.
    outs, consts = _graph()
    work = tmp_path / "m"
    ag.compile_model(outs, target="cpu", workdir=work)
    feeds = [_feeds(6), _feeds(2), _feeds(15, special=True), _feeds(37)]
    new = {k: c.value for k, c in consts.items()}
    got, _, impls = _run(tmp_path, work, feeds, [2, 1, 2, 2], new, ONEDNN_MAX_CPU_ISA="AVX512_CORE")
    assert impls and not any(v.endswith(":packed_sgemm") for v in impls.values()), impls
    for g, f in zip(got, feeds):
        with np.errstate(invalid="ignore", over="ignore"):
            want = ag.reference.run(outs, f)
        for k in want:
            np.testing.assert_array_equal(np.isnan(g[k]), np.isnan(want[k]), err_msg=k)
        check({k: np.where(np.isfinite(want[k]), g[k], 0) for k in want},
              {k: np.where(np.isfinite(want[k]), want[k], 0) for k in want}, TOL)


def test_packed_sgemm_float16_storage(tmp_path):
    # float16 storage computes in float32 on oneDNN's CPUs without avx512_fp16 (always, under AVX2):
    # operands and the weight (before packing) converted into float32 scratch, the result back.
    # The oracle computes in float32 and rounds each op's result: rtol/atol 2e-3 (x max|reference|).
    m = ag.IntVar("m", 1, 64)
    x = ag.Tensor([m, 96], "float16", name="x")
    w1 = ag.constant((S.rand((80, 96)) * 0.1).astype(np.float16), name="w1")
    b1 = ag.constant(S.rand((80,)).astype(np.float16), name="b1")
    w2 = ag.constant((S.rand((96, 48)) * 0.1).astype(np.float16), name="w2")
    outs = {"y": ops.gelu(ops.linear(x, w1, b1)), "z": ops.gemm(x, w2)}
    work = tmp_path / "m"
    ag.compile_model(outs, target="cpu", workdir=work)
    feeds = [{"x": S.rand((n, 96)).astype(np.float16)} for n in (33, 64)]
    new = {"w1": (S.rand((80, 96)) * 0.1).astype(np.float16), "b1": S.rand((80,)).astype(np.float16),
           "w2": (S.rand((96, 48)) * 0.1).astype(np.float16)}
    got, got_new, impls = _run(tmp_path, work, feeds, [2, 1], new)
    assert len(impls) == 2 and all(v.endswith(":packed_sgemm") for v in impls.values()), impls
    for g, f in zip(got, feeds):
        check(g, ag.reference.run(outs, f), 2e-3)
    w1.value, b1.value, w2.value = new["w1"], new["b1"], new["w2"]
    check(got_new, ag.reference.run(outs, feeds[-1]), 2e-3)
