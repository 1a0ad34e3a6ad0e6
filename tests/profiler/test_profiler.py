"""aitgen.profiler without a GPU: candidates, the heuristic, M buckets and their dispatch, the sqlite
cache, and what the CUDA backend's timing driver (codegen/kernels/cuda/profile.py) collects and
renders for a graph (compiling it: the cuda_compile tier)."""
from __future__ import annotations

import dataclasses
import sqlite3

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.kernels.cuda import profile as cuda_profile
from aitgen.compiler import compile_options
from aitgen.ir.dims import IntImm, IntVar
from aitgen.ir.dtype import DType
from aitgen.ir.graph import Graph
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.profiler import ProfileCache, ProfileKey, choose_gemm, gemm_candidates
from aitgen.profiler import candidates as cands
from aitgen.profiler import select

KEY = ProfileKey("gemm", "{s2 = relu(s0) -> s2}|row:float16", "float16->float16", "rcr", "m=512,n=768,k=768,l=1",
                 "sm_90a/sm_90a", "4.2.0.0")


def test_cache_round_trip_and_replace(tmp_path):
    cache = ProfileCache(tmp_path / "p.sqlite")
    assert cache.get(KEY) is None and len(cache) == 0
    assert not (tmp_path / "p.sqlite").exists()  # a lookup creates nothing
    cfg = gemm_candidates("sm_90a", DType.float16)[0]
    cache.put(KEY, cfg.as_params(), 0.125)
    got, ms = ProfileCache(tmp_path / "p.sqlite").get(KEY)  # a new handle: it is on disk
    assert got == cfg.as_params() and ms == 0.125
    assert cands.GemmConfig.from_params("sm_90a", got) == cfg
    other = gemm_candidates("sm_90a", DType.float16)[1]
    cache.put(KEY, other.as_params(), 0.1)  # a re-profile replaces the row
    assert cache.get(KEY)[0]["name"] == other.name and len(cache) == 1
    with sqlite3.connect(tmp_path / "p.sqlite") as con:  # the key's fields are columns for humans
        assert con.execute("SELECT op, arch FROM profile").fetchall() == [("gemm", "sm_90a/sm_90a")]


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ProfileKey)])
def test_every_key_field_separates_entries(tmp_path, field):
    cache = ProfileCache(tmp_path / "p.sqlite")
    cache.put(KEY, {"name": "a"}, 1.0)
    changed = dataclasses.replace(KEY, **{field: getattr(KEY, field) + "x"})
    assert cache.get(changed) is None and cache.get(KEY)[0] == {"name": "a"}


def test_problem_key_names_bucket_arch_and_version():
    p = select.Problem("gemm", "e", DType.bfloat16, DType.bfloat16, "rcr", "sm_90a", IntVar("m", 1, 4096),
                       IntImm(768), IntImm(3072), IntImm(1), gemm_candidates("sm_90a", DType.bfloat16))
    k = p.key(256, "sm_90a", "4.2.0.0")
    assert (k.op, k.dtypes, k.layouts, k.bucket, k.arch, k.cutlass) == (
        "gemm", "bfloat16->bfloat16", "rcr", "m=256,n=768,k=3072,l=1", "sm_90a/sm_90a", "4.2.0.0")


def test_heuristic_is_deterministic_and_follows_its_rule():
    f16, f32 = DType.float16, DType.float32
    assert choose_gemm("sm_90a", f16, 8192, 8192, 8192) == choose_gemm("sm_90a", f16, 8192, 8192, 8192)
    # Large problems: the biggest tile, the cluster that multicasts (every SM busy anyway).
    assert choose_gemm("sm_90a", f16, 8192, 8192, 8192).name == "sm90_128x256x64_c2x1_cooperative"
    assert choose_gemm("sm_80", f16, 4096, 4096, 4096).name == "sm80_128x256x32_w64x64x32_s3"
    assert choose_gemm("sm_80", f32, 4096, 4096, 4096).name == "sm80_128x256x16_w64x64x16_s3"
    # Few tiles and a deep K: split-K until the units fill the SMs (12 x 11 = 132 on sm_90a).
    assert choose_gemm("sm_90a", f16, 128, 768, 16384).name == "sm90_128x64x64_c1x1_cooperative_splitk11"
    assert choose_gemm("sm_80", f16, 16, 4096, 4096).name == "sm80_64x64x32_w32x32x32_s5_splitk5"
    # No split-K in the kernel (conv, batched): the smallest tiles.
    assert choose_gemm("sm_90a", f16, 128, 768, 16384, streamk=False).name == "sm90_64x64x64_c1x1_pingpong"
    assert choose_gemm("sm_90a", f16, 512, 768, 768).name == "sm90_64x64x64_c1x1_pingpong"
    assert choose_gemm("sm_80", f16, 512, 128, 64).name == "sm80_64x64x32_w32x32x32_s5"
    for arch in ("sm_80", "sm_90a"):  # every answer runs a candidate the profiler would also time
        for m in (1, 64, 200, 1000, 5000, 20000):
            assert cands.base(choose_gemm(arch, f16, m, 1024, 1024)) in gemm_candidates(arch, f16)


def test_m_buckets():
    assert select.m_buckets(IntImm(384)) == [384]
    assert select.m_buckets(IntVar("b", 1, 100)) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert select.m_buckets(IntVar("b", 3, 16)) == [4, 8, 16]
    seq = IntVar("s", 8, 128)
    assert select.m_buckets(IntVar("b", 1, 4) * seq) == [8, 16, 32, 64, 128, 256, 512]


def _problem(m):
    return select.Problem("gemm", "", DType.float16, DType.float16, "rcr", "sm_90a", m, IntImm(768), IntImm(768),
                          IntImm(1), gemm_candidates("sm_90a", DType.float16))


def test_dispatch_merges_buckets_and_prefers_the_cache(tmp_path):
    p = _problem(IntVar("b", 1, 4096))
    heur = select.dispatch(p, "sm_90a", None, "4.2.0.0")
    assert all(a["name"] != b["name"] for a, b in zip(heur, heur[1:]))
    assert heur[-1]["max_m"] is None and all(c["max_m"] is not None for c in heur[:-1])
    bounds = [c["max_m"] for c in heur[:-1]]
    assert bounds == sorted(bounds) and heur[0]["name"] == "sm90_64x64x64_c1x1_pingpong" and bounds[0] == 512
    # A profiled winner for the bucket 128 < M <= 256 splits it off.
    cache = ProfileCache(tmp_path / "p.sqlite")
    win = cands.find(p.candidates, "sm90_256x128x64_c1x2_cooperative")
    cache.put(p.key(256, "sm_90a", "4.2.0.0"), win.as_params(), 0.01)
    prof = select.dispatch(p, "sm_90a", cache, "4.2.0.0")
    at = [c for c in prof if c["name"] == win.name]
    assert len(at) == 1 and at[0]["max_m"] == 256
    before = prof[prof.index(at[0]) - 1]
    assert before["max_m"] == 128
    # A winner the candidates no longer hold falls back to the heuristic.
    cache.put(p.key(256, "sm_90a", "4.2.0.0"), {"name": "gone"}, 0.01)
    assert select.dispatch(p, "sm_90a", cache, "4.2.0.0") == heur


def _graph(outs, arch="sm_80"):
    opts = compile_options(target="cuda", arch=arch)
    return run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE)), opts


def test_runner_collects_jobs_and_sizes_each_bucket():
    b = IntVar("batch", 1, 64)
    x = ag.Tensor([b, 256], dtype="float16", name="x")
    w = ag.constant(np.ones((256, 256), np.float16), name="w")
    y = ops.relu(ops.linear(ops.relu(ops.linear(x, w)), w))  # a chain of two equal kernels: one job
    g, opts = _graph({"y": y})
    jobs = cuda_profile.collect(g, opts)
    assert len(jobs) == 1 and jobs[0].kind == "gemm"
    per = cuda_profile.render_sources(jobs, None, "sm_80")
    sources, entries, job_cands = per["gemm"]
    assert len(sources) == len(gemm_candidates("sm_80", DType.float16)) == len(job_cands[0])
    assert [e.m for e in entries] == [1, 2, 4, 8, 16, 32, 64]
    e = entries[3]
    assert e.dims[:4] == [8, 256, 256, 1]                      # M at the bucket, N, K, L
    assert e.bytes == [8 * 256 * 2, 8 * 256 * 2, 256 * 256 * 2]  # out, x, w
    assert all("_profile(int cfg" in s for s in sources.values())


def test_env_for_reaches_the_bucket_with_several_vars():
    b, s = IntVar("b", 1, 8), IntVar("s", 16, 512)
    m = b * s
    for target in (16, 100, 256, 4096):
        env = cuda_profile.env_for(m, target, [m])
        assert target <= m.evaluate(env) < 2 * target  # the bucket's top, not far past it
        assert all(v.lower <= env[v] <= v.upper for v in (b, s))


def test_bucket_dispatch_is_rendered_in_order(tmp_path):
    """The kernel's run-time switch: `if (m <= bound)` per config in order, the last unconditional."""
    from aitgen.codegen.kernels.cuda import gemm as gemm_k
    from aitgen.codegen.render import render
    p = _problem(IntVar("b", 1, 4096))
    cache = ProfileCache(tmp_path / "p.sqlite")
    win = cands.find(p.candidates, "sm90_256x128x64_c1x2_cooperative")
    cache.put(p.key(256, "sm_90a", "4.2.0.0"), win.as_params(), 0.01)
    configs = select.dispatch(p, "sm_90a", cache, "4.2.0.0")
    x = ag.Tensor([IntVar("b", 1, 4096), 768], dtype="float16", name="x")
    g, _ = _graph({"y": ops.gemm(x, ag.Tensor([768, 768], dtype="float16", name="w"))}, "sm_90a")
    kern = gemm_k.gemm_kernel(gemm_k.gemm_problem(g.ops[-1]), "sm_90a", False)
    src = render("cuda/templates/gemm_sm90.cu.j2", func="k_test", **dict(kern.params, configs=configs, profiler=False))
    branches = [ln.strip() for ln in src.splitlines() if "::run(p, d," in ln and "Config" in ln]
    want = [f"if (m <= {c['max_m']}) return Config{i}::run" for i, c in enumerate(configs[:-1])]
    assert [b.split("(p, d")[0] for b in branches[:-1]] == want
    assert branches[-1].startswith(f"Config{len(configs) - 1}::run")
    assert f"using Config{configs.index(next(c for c in configs if c['name'] == win.name))} = Gemm<256, 128, 64, 1, 2" \
        in src
