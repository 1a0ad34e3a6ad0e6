"""GPU tier for the CUTLASS kernels: gemm (every layout), bmm, conv2d and grouped GEMM with fused
epilogues, built for the present GPU's arch and compared with the oracle (aitgen.reference, which
evaluates the graph before fusion, rounding each op's result to the storage type). Each dtype is one
build holding every case, so the tier costs three builds. Dynamic M runs at two sizes, so both sides
of a bucket bound of the dispatch run. The profiler runs once on a small GEMM and must store
winners that the next build uses.

Tolerances, as max |got - want| <= rtol * |want| + atol * max(1, max |want|):
  float16   1e-2 / 1e-2  the kernels accumulate in float32 and round once; the oracle rounds the
                         product, the bias add, each activation: a few float16 ulps (2^-10) apart
  bfloat16  4e-2 / 4e-2  likewise with bfloat16's ulp (2^-7)
  float32   2e-3 / 2e-3  TF32 (10-bit mantissa operands, float32 accumulation) when asked;
            1e-4 / 1e-4  the SIMT float32 kernel otherwise (summation order only)
"""
from __future__ import annotations

import dataclasses
import json
import subprocess

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops

pytestmark = pytest.mark.gpu

TOL = {"float16": (1e-2, 1e-2), "bfloat16": (4e-2, 4e-2), "tf32": (2e-3, 2e-3), "float32": (1e-4, 1e-4)}


def close(got, want, tol, what):
    g, w = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    rtol, atol = TOL[tol]
    scale = max(float(np.max(np.abs(w), initial=0.0)), 1.0)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale, err_msg=what)


def _const(rng, shape, dt, scale):
    return ag.constant((rng.standard_normal(shape) * scale).astype(np.float32).astype(dt))


def cases(dt: str):
    """(outputs, input factory taking M) covering the kernels' variants."""
    rng = np.random.default_rng(0)
    m = ag.IntVar("m", 1, 512)
    x = ag.Tensor([m, 256], dtype=dt, name="x")
    res = ag.Tensor([m, 384], dtype=dt, name="res")
    col = ag.Tensor([m, 1], dtype=dt, name="col")
    xt = ag.Tensor([256, 96], dtype=dt, name="xt")   # stored [K, M]
    outs = {
        # linear + bias + GELU + residual (rcr; on sm_90a the residual is the TMA-fetched C)
        "ffn": ops.gelu(ops.linear(x, _const(rng, (384, 256), dt, 0.06), _const(rng, (384,), dt, 0.5))) + res,
        # row/col/scalar loads and a DAG reading the accumulator twice
        "loads": ops.tanh(ops.gemm(x, _const(rng, (256, 384), dt, 0.06)) * col) * 0.5
        + ops.sigmoid(ops.gemm(x, _const(rng, (256, 384), dt, 0.06))),
        "rrr": ops.gemm(x, _const(rng, (256, 128), dt, 0.06), layout="rrr"),
        "crr": ops.gemm(xt, _const(rng, (256, 64), dt, 0.06), layout="crr"),
        "ccr": ops.gemm(xt, _const(rng, (64, 256), dt, 0.06), layout="ccr"),
        "oddk": ops.relu(ops.gemm(ag.Tensor([40, 7], dtype=dt, name="o"), _const(rng, (7, 9), dt, 0.3))),
    }
    bt = ag.IntVar("bt", 1, 4)
    q = ag.Tensor([bt, 4, 64, 32], dtype=dt, name="q")
    k = ag.Tensor([bt, 4, 64, 32], dtype=dt, name="k")
    mask = ag.Tensor([bt, 1, 1, 64], dtype=dt, name="mask")
    outs["scores"] = ops.bmm(q, k, trans_b=True) * (32 ** -0.5) + mask     # partial batch broadcast: 2nd pass
    outs["bmm_tn"] = ops.bmm(q, k, trans_a=True) + ag.Tensor([bt, 4, 32, 32], dtype=dt, name="r4")
    outs["bmm_shared"] = ops.matmul(q, _const(rng, (32, 48), dt, 0.2))     # b shared: folds into one GEMM
    img = ag.Tensor([bt, 12, 12, 32], dtype=dt, name="img")
    outs["conv"] = ops.relu(ops.conv2d(img, _const(rng, (32, 3, 3, 32), dt, 0.06), _const(rng, (32,), dt, 0.5),
                                       padding=1)) + img
    outs["conv_s2"] = ops.conv2d(img, _const(rng, (16, 3, 3, 32), dt, 0.06), stride=2, padding=(0, 1, 1, 0))
    outs["conv_dw"] = ops.conv2d(img, _const(rng, (32, 3, 3, 1), dt, 0.3), padding=1, groups=32)
    outs["conv_rgb"] = ops.conv2d(ag.Tensor([bt, 16, 16, 3], dtype=dt, name="rgb"), _const(rng, (8, 3, 3, 3), dt, 0.3))
    for i, (kk, n) in enumerate([(64, 128), (32, 64), (128, 32)]):     # towers: one grouped GEMM
        t = ag.Tensor([m, kk], dtype=dt, name=f"t{i}")
        outs[f"tower{i}"] = ops.relu(ops.linear(t, _const(rng, (n, kk), dt, 0.1), _const(rng, (n,), dt, 0.5)))

    def feeds(mv: int, bv: int) -> dict:
        r = np.random.default_rng(mv)
        shapes = {"x": (mv, 256), "res": (mv, 384), "col": (mv, 1), "xt": (256, 96), "o": (40, 7),
                  "q": (bv, 4, 64, 32), "k": (bv, 4, 64, 32), "mask": (bv, 1, 1, 64), "r4": (bv, 4, 32, 32),
                  "img": (bv, 12, 12, 32), "rgb": (bv, 16, 16, 3), "t0": (mv, 64), "t1": (mv, 32), "t2": (mv, 128)}
        return {n: r.uniform(-1, 1, s).astype(dt) for n, s in shapes.items()}
    return outs, feeds


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_kernels_match_the_oracle(dt, gpu_arch, tmp_path):
    outs, feeds = cases(dt)
    model = ag.compile_model(outs, target="cuda", arch=gpu_arch, workdir=tmp_path)
    try:
        for mv, bv in ((37, 1), (300, 3)):   # M on both sides of the dispatch's 64 bound
            f = feeds(mv, bv)
            got = model.run(f)
            want = ag.reference.run(outs, f)
            for name in outs:
                close(got[name], want[name], dt, f"{name} M={mv}")
    finally:
        model.close()


@pytest.mark.parametrize("tf32", [False, True])
def test_float32_simt_and_tf32(tf32, gpu_arch, tmp_path):
    rng = np.random.default_rng(1)
    x = ag.Tensor([ag.IntVar("m", 1, 256), 192], dtype="float32", name="x")
    img = ag.Tensor([2, 10, 10, 16], dtype="float32", name="img")
    outs = {"ffn": ops.gelu(ops.linear(x, _const(rng, (96, 192), "float32", 0.1), _const(rng, (96,), "float32", 0.5))),
            "conv": ops.relu(ops.conv2d(img, _const(rng, (16, 3, 3, 16), "float32", 0.1), padding=1)) + img}
    model = ag.compile_model(outs, target="cuda", arch=gpu_arch, workdir=tmp_path, allow_tf32=tf32)
    try:
        f = {"x": rng.uniform(-1, 1, (100, 192)).astype(np.float32),
             "img": rng.uniform(-1, 1, (2, 10, 10, 16)).astype(np.float32)}
        got, want = model.run(f), ag.reference.run(outs, f)
        for name in outs:
            close(got[name], want[name], "tf32" if tf32 else "float32", name)
    finally:
        model.close()


def test_profiler_stores_winners_that_the_build_uses(gpu_arch, tmp_path, monkeypatch):
    from aitgen.codegen.kernels.cuda import gemm as gemm_k
    from aitgen.codegen.kernels.cuda import configs as cuda_configs
    from aitgen.codegen.kernels.cuda import profile as cuda_profile
    from aitgen.compiler import compile_options
    from aitgen.ir.graph import Graph
    from aitgen.passes import PIPELINE, run_pipeline
    from aitgen.profiler import ProfileCache, select

    rng = np.random.default_rng(2)
    x = ag.Tensor([256, 512], dtype="float16", name="x")
    outs = {"y": ops.relu(ops.linear(x, _const(rng, (512, 512), "float16", 0.05)))}
    opts = compile_options(target="cuda", arch=gpu_arch)
    g = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    (job,) = cuda_profile.collect(g, opts)
    job.problem = dataclasses.replace(job.problem, candidates=job.problem.candidates[:3])  # keep the build short
    cache = ProfileCache(tmp_path / "profile.sqlite")
    (kind, (sources, entries, _)), = cuda_profile.render_sources([job], cache, gpu_arch).items()
    binary = cuda_profile.build_binary(kind, sources, entries, tmp_path / "prof", gpu_arch)
    r = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = [json.loads(line) for line in r.stdout.splitlines()]
    times = row["times_ms"]
    assert len(times) == 3 and all(t is None or t > 0 for t in times) and any(t is not None for t in times)
    best = job.problem.candidates[min((i for i, t in enumerate(times) if t is not None), key=lambda i: times[i])]
    cache.put(job.problem.key(256, gpu_arch, cuda_configs.cutlass_version()), best.as_params(), 1.0)
    # The lowering reads the winner from the cache the build uses.
    monkeypatch.setattr(cuda_configs, "default_cache", lambda: cache)
    op = next(o for o in g.ops if o.kind is ag.OpKind.GEMM)
    kern = gemm_k.gemm_kernel(gemm_k.gemm_problem(op), gpu_arch, False)
    assert [c["name"] for c in select.dispatch(kern.problem, gpu_arch, cache, cuda_configs.cutlass_version())] == [best.name]
    model = ag.compile_model(outs, target="cuda", arch=gpu_arch, workdir=tmp_path / "model")
    try:
        f = {"x": rng.uniform(-1, 1, (256, 512)).astype(np.float16)}
        close(model.run(f)["y"], ag.reference.run(outs, f)["y"], "float16", "profiled gemm")
    finally:
        model.close()
