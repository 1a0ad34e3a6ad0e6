"""The ROCm profiler (codegen/kernels/rocm/profile.py) without an AMD GPU.

Default tier: the candidates of each CK problem (every one passes CK's rules as the lowering's own
checks and test_rocm_gemm_compile.ck_accepts state them; the heuristic's pick first), the
profile cache's round trip into the rendered kernel (a winner stored for (rocm, gfx90a, CK pin,
problem, bucket) is what the lowering instantiates; another arch, pin or backend does not hit),
profile_graph(run=False) rendering its jobs (the hipcc step replaced), the binary's JSON read
into the fastest candidate, and compile_model(profile=True)'s fallback warning.
rocm_compile tier: the profiler binary of one small GEMM with 2 candidates built by hipcc, then
its objects linked against the mock HIP runtime and run: well-formed JSON, each candidate's CK
kernel launched with the sizes asked; the mock has no clock, so every time is null there.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import models, ops
from aitgen.codegen import locate
from aitgen.codegen.backend import load_backend
from aitgen.codegen.kernels.gpu import profiling
from aitgen.codegen.kernels.rocm import configs as ck
from aitgen.codegen.kernels.rocm import profile as rp
from aitgen.codegen.render import render
from aitgen.compiler import _profile, compile_options
from aitgen.errors import BuildError, ProfileFallbackWarning
from aitgen.ir.graph import Graph
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.profiler import ProfileCache
from aitgen.profiler.cache import ProfileKey
from aitgen.runtime import device

from ck_helpers import conv_relu, ffn, hip_env, hipcc, lowered, source
from test_rocm_gemm_compile import SMALL, ck_accepts


def graph_of(outs, arch="gfx90a"):
    opts = compile_options(target="rocm", arch=arch, precision="float16")
    return run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE)), opts


def bmm_graph():
    a = ag.Tensor([4, 64, 96], dtype="float16", name="a")
    b = ag.Tensor([4, 96, 48], dtype="float16", name="b")
    return {"y": ops.bmm(a, b)}


# Layouts, odd sizes (narrow vectors), float32, a batched GEMM and a conv.
PROBLEMS = {
    "ffn": lambda: ffn(),
    "odd_k": lambda: ffn(m=ag.IntImm(64), k=100, n=1002),
    "f32": lambda: ffn(m=ag.IntImm(300), k=64, n=96, dt="float32"),
    "bmm": bmm_graph,
    "conv": lambda: conv_relu(c=12, k=24),
}


def jobs_of(outs, arch="gfx90a"):
    g, opts = graph_of(outs, arch)
    return rp.collect(g, opts)


def concrete(job):
    """(M, N, K, A K-contiguous, B K-contiguous) at the job's largest sizes."""
    p = job.problem
    cfg = p.candidates[0]
    return p.m.upper, p.n.upper, p.k.upper, cfg.a_k_contiguous, cfg.b_k_contiguous


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_candidates_obey_ck_rules_heuristic_first(name):
    jobs = jobs_of(PROBLEMS[name]())
    assert jobs
    for job in jobs:
        cands = job.problem.candidates
        names = [c.name for c in cands]
        assert len(set(names)) == len(names)
        m, n, k, a_kc, b_kc = concrete(job)
        for c in cands:
            c.tile.check()
            assert ck_accepts(c.inst, m, n, k, a_kc, b_kc), (name, c.name, m, n, k)
        # every table row the checks take, none other; the heuristic's instance first
        first = cands[0]
        took = []
        for t in ck.TILES:
            try:
                ck.instance(t, a_kc, b_kc, first.vec_a, first.vec_b, first.vec_c, first.itemsize)
                took.append(t.name)
            except ValueError:
                pass
        assert sorted(c.tile.name for c in cands) == sorted(took)
        want = ck.choose("gfx90a", job.problem.m, job.problem.n, job.problem.l, a_kc, b_kc, first.vec_a, first.vec_b,
                         first.vec_c, "t", first.itemsize)
        assert first.inst == want


def test_a_row_ck_cannot_take_is_no_candidate(monkeypatch):
    """A tile whose B transfer has no thread cluster (192 threads over a 64-wide N) is skipped."""
    bad = ck.Tile("96x64", 192, 96, 64, 1, 2)
    with pytest.raises(ValueError):
        ck.instance(bad, True, True, 8, 8, 8)
    monkeypatch.setattr(ck, "TILES", ck.TILES + (bad,))
    cands = ck.candidates("gfx90a", ag.IntImm(4096), ag.IntImm(4096), ag.IntImm(1), True, True, 8, 8, 8, "t")
    assert [c.tile.name for c in cands] == ["256x128", "128x128", "64x128", "64x64"]


def test_small_zoo_candidate_counts():
    counts = {}
    for name in sorted(SMALL):
        _, outs = models.get(name, **SMALL[name])
        jobs = jobs_of(outs)
        assert jobs and all(len(j.problem.candidates) == len(ck.TILES) for j in jobs)
        counts[name] = (len(jobs), sum(len(j.problem.candidates) for j in jobs))
    print("small zoo (problems, candidates):", counts)
    assert counts["bert_base"][0] >= 3 and counts["resnet50"][0] >= 10


# -- the cache, read by the lowering ----------------------------------------------------------

@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(tmp_path))
    return ProfileCache(tmp_path / "profiler.sqlite")


def kernel_of(outs, arch="gfx90a"):
    _, calls = lowered(outs, arch)
    ck_calls = [c for c in calls if c.spec.template.endswith(("gemm_ck.hip.j2", "conv_ck.hip.j2"))]
    assert len(ck_calls) == 1
    return ck_calls[0].spec.param_dict()["inst"], source(ck_calls[0])


@pytest.mark.parametrize("name", ["ffn", "conv"])
def test_cached_winner_is_what_the_lowering_renders(cache_dir, name):
    outs = PROBLEMS[name]()
    heur, _ = kernel_of(outs)
    job, = jobs_of(outs)
    p = job.problem
    other = next(c for c in p.candidates if c.inst != heur)   # a winner the heuristic would not pick
    m = rp.top_bucket(p)
    key = p.key(m, "gfx90a", ck.ck_version())
    assert (key.backend, key.arch, key.cutlass) == ("rocm", "gfx90a/gfx90a", "ck-" + locate.ck().version)
    # Keys that must not hit: another arch, another CK pin, the CUDA backend, a smaller bucket.
    cache_dir.put(p.key(m, "gfx940", ck.ck_version()), other.as_params(), 0.01)
    cache_dir.put(p.key(m, "gfx90a", "ck-0000000"), other.as_params(), 0.01)
    cache_dir.put(dataclasses.replace(key, backend="cuda"), other.as_params(), 0.01)
    if m > 1:
        cache_dir.put(p.key(m // 2, "gfx90a", ck.ck_version()), other.as_params(), 0.01)
    assert kernel_of(outs)[0] == heur
    cache_dir.put(key, other.as_params(), 0.01)
    inst, src = kernel_of(outs)
    assert inst == other.inst and inst != heur
    assert f"({other.name}" in src   # the unit's header names its instance
    # the instance's numbers reach CK's template arguments
    assert f"1, {other.tile.block}, {other.tile.m}, {other.tile.n}, " in src
    # a stored name the candidates no longer hold falls back to the heuristic
    cache_dir.put(key, {"name": "512x512 gone"}, 0.001)
    assert kernel_of(outs)[0] == heur


def test_profile_key_without_backend_keeps_cuda_keys():
    """Keys stored before the backend field existed (all CUDA's) still hit; ROCm's are apart."""
    k = ProfileKey("gemm", "", "float16->float16", "rcr", "m=1,n=1,k=1,l=1", "sm_80/sm_80", "3.5.1")
    assert "backend" not in json.loads(k.text())
    assert json.loads(dataclasses.replace(k, backend="rocm").text())["backend"] == "rocm"


# -- the driver -------------------------------------------------------------------------------

def test_profile_graph_without_running_renders_every_job(cache_dir, monkeypatch, tmp_path):
    """run=False: the jobs' sources and the main are rendered and handed to the build (replaced
    here: the hipcc step is the rocm_compile tier's); nothing is timed, nothing stored."""
    built = {}

    def fake_build(kind, sources, entries, workdir, arch, jobs=None, **_):
        built[kind] = (sources, entries, arch)
        return Path(workdir) / f"{kind}_profiler"

    monkeypatch.setattr(rp, "build_binary", fake_build)
    x = ag.Tensor([ag.IntVar("tokens", 1, 300), 64], dtype="float16", name="x")
    w = ag.constant(np.ones((128, 64), np.float16), name="w")
    img = ag.Tensor([2, 8, 8, 16], dtype="float16", name="img")
    outs = {"y": ops.relu(ops.linear(ops.relu(ops.linear(x, w)), ag.constant(np.ones((128, 128), np.float16)))),
            "z": ops.relu(ops.conv2d(img, ag.constant(np.ones((32, 3, 3, 16), np.float16)), padding=1))}
    g, opts = graph_of(outs)
    report = rp.profile_graph(g, opts, tmp_path / "prof", cache=cache_dir, run=False)
    assert sorted(built) == ["conv2d", "gemm"] and report["profiled"] == 0 and len(cache_dir) == 0
    assert sorted(Path(b).name for b in report["binaries"]) == ["conv2d_profiler", "gemm_profiler"]
    sources, entries, arch = built["gemm"]
    assert arch == "gfx90a" and len(entries) == 2           # two GEMMs of different K: two jobs
    assert len(sources) == 2 * len(ck.TILES)
    for e in entries:
        assert e.m == 300 and e.dims[0] == 300              # the largest bucket, M at its top
        assert len(e.funcs) == len(ck.TILES)
    for name, text in sources.items():
        assert f"extern \"C\" int {name[:-4]}_profile(int cfg" in text and "AIT_KERNEL" not in text
    e0 = entries[0]
    assert e0.bytes[:3] == [300 * 128 * 2, 300 * 64 * 2, 128 * 64 * 2]   # out, x, w in float16
    main = render("rocm/templates/profiler_main.hip.j2",
                  **profiling.main_params("gemm", sorted(f for e in entries for f in e.funcs), entries, 20.0, 5))
    assert main.count("_profile(int cfg, void* const* p, const int64_t* d);") == 2 * len(ck.TILES)
    assert "hipEventElapsedTime" in main and "hipMalloc" in main
    # once the winners are in the cache, there is nothing left to profile
    for job in rp.collect(g, opts):
        cache_dir.put(job.problem.key(rp.top_bucket(job.problem), "gfx90a", ck.ck_version()),
                      job.problem.candidates[1].as_params(), 0.1)
    built.clear()
    assert rp.profile_graph(g, opts, tmp_path / "prof", cache=cache_dir, run=False)["binaries"] == [] and not built


def test_timing_json_selects_the_fastest(cache_dir):
    outs = ffn()
    g, opts = graph_of(outs)
    jobs = rp.collect(g, opts)
    (_, entries), = rp.render_sources(jobs, None, "gfx90a").values()
    n = len(jobs[0].problem.candidates)
    times = [0.5, None, 0.125, 0.25][:n]
    out = json.dumps({"entry": 0, "times_ms": times}) + "\n"
    won = rp.store(out, entries, jobs, cache_dir, "gfx90a")
    best = jobs[0].problem.candidates[2]
    assert won == {entries[0].label: best.name}
    got, ms = cache_dir.get(jobs[0].problem.key(entries[0].m, "gfx90a", ck.ck_version()))
    assert got["name"] == best.name and ms == 0.125
    assert kernel_of(outs)[0] == best.inst     # and the next build instantiates it
    # every candidate failed: no winner, nothing stored over the old one
    assert rp.store(json.dumps({"entry": 0, "times_ms": [None] * n}), entries, jobs, cache_dir, "gfx90a") == {}
    assert cache_dir.get(jobs[0].problem.key(entries[0].m, "gfx90a", ck.ck_version()))[0]["name"] == best.name
    for bad in ('{"entry": 5, "times_ms": []}', "not json", json.dumps({"entry": 0, "times_ms": [1.0]})):
        with pytest.raises(BuildError, match="profiler"):
            rp.store(bad, entries, jobs, cache_dir, "gfx90a")


def test_compile_model_profile_falls_back_with_a_warning(monkeypatch, tmp_path):
    g, opts = graph_of(ffn())
    opts = dataclasses.replace(opts, profile=True)
    backend = load_backend("rocm")
    called = []
    monkeypatch.setattr(rp, "profile_graph", lambda *a, **k: called.append(a) or {})
    monkeypatch.setattr(device, "rocm_arch", lambda dev=0: None)
    monkeypatch.setattr(device, "rocm_unavailable_reason", lambda: "no AMD GPU driver (/dev/kfd is absent)")
    with pytest.warns(ProfileFallbackWarning, match=r"no AMD GPU here \(no AMD GPU driver.*heuristic"):
        _profile(g, opts, backend, tmp_path, None)
    monkeypatch.setattr(device, "rocm_arch", lambda dev=0: "gfx942")
    with pytest.warns(ProfileFallbackWarning, match="is gfx942, the build is for gfx90a"):
        _profile(g, opts, backend, tmp_path, None)
    assert not called
    monkeypatch.setattr(device, "rocm_arch", lambda dev=0: "gfx90a")   # a GPU of the build's arch: it times
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _profile(g, opts, backend, tmp_path, None)
    assert len(called) == 1 and called[0][2] == tmp_path / "profiler"


# -- rocm_compile tier: the binary itself -------------------------------------------------------

@pytest.fixture(scope="module")
def two_candidate_binary(tmp_path_factory):
    hipcc()
    work = tmp_path_factory.mktemp("rocmprof")
    x = ag.Tensor([ag.IntVar("m", 1, 256), 64], dtype="float16", name="x")
    g, opts = graph_of({"y": ops.relu(ops.linear(x, ag.constant(np.ones((128, 64), np.float16))))})
    jobs = [dataclasses.replace(j, problem=dataclasses.replace(j.problem, candidates=j.problem.candidates[:2]))
            for j in rp.collect(g, opts)]   # two instances: each ~45-90 s of hipcc
    (sources, entries), = rp.render_sources(jobs, None, "gfx90a").values()
    t0 = time.perf_counter()
    binary = rp.build_binary("gemm", sources, entries, work, "gfx90a")
    print(f"2-candidate ROCm profiler binary: {time.perf_counter() - t0:.1f} s of hipcc")
    return work, binary, jobs, entries


@pytest.mark.rocm_compile
def test_profiler_binary_compiles(two_candidate_binary):
    work, binary, jobs, entries = two_candidate_binary
    assert binary.is_file() and len(entries) == 1 and entries[0].m == 256
    syms = subprocess.run(["nm", "--defined-only", str(binary)], check=True, capture_output=True, text=True).stdout
    assert {"prof_0_0_profile", "prof_0_1_profile", "aitgen_profile_all"} <= {ln.split()[-1] for ln in syms.splitlines()}
    assert b"amdgcn-amd-amdhsa--gfx90a" in binary.read_bytes()   # the code object for the build's arch


@pytest.mark.rocm_compile
def test_profiler_runs_on_the_mock_device(two_candidate_binary):
    """The binary's objects as a library on the mock HIP runtime: it allocates, fills, launches
    each candidate's CK kernel (checked by the mock) and prints one JSON line. The mock has no
    clock (hipEventElapsedTime fails there), so each time is null: the format, not the numbers."""
    from aitgen.codegen import mock_build
    from aitgen.codegen.build import Source, build
    from aitgen.runtime.mock import MockDevice
    work, _, jobs, entries = two_candidate_binary
    cxx, flags, rt_link, _ = mock_build._toolchain("rocm", hipcc())
    runtime = work / mock_build.RUNTIMES["rocm"]
    build([Source(Path(rel).name, (Path(mock_build.backends_dir()) / rel).read_text()) for rel in mock_build.SOURCES],
          runtime, compiler=cxx, flags=flags, link_flags=rt_link + [f"-Wl,-soname,{runtime.name}"],
          workdir=work / "obj_mock", progress=False)
    lib = work / "profiler_mock.so"
    subprocess.run([cxx, "-shared", *sorted(map(str, work.glob("*.hip.o"))), "-o", str(lib), str(runtime)],
                   check=True, env=hip_env())
    dev = MockDevice.get(runtime)
    dev.configure("gfx90a")
    m = dev.load_library(lib)
    rt = dev.lib
    rt.aitmock_launch.restype = ctypes.c_char_p
    rt.aitmock_failure.restype = ctypes.c_char_p
    out = work / "stdout.txt"   # the library prints to fd 1: point it at a file for the call
    libc = ctypes.CDLL(None)
    saved, fd = os.dup(1), os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    try:
        rt.aitmock_begin()
        rc = m.aitgen_profile_all()
        libc.fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(fd)
        os.close(saved)
    assert rc == 0
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert rows == [{"entry": 0, "times_ms": [None, None]}]
    launches = [rt.aitmock_launch(i).decode().split("\t") for i in range(rt.aitmock_launch_count())]
    gemms = [ln for ln in launches if "gemm_multiple_d_xdl_cshuffle" in ln[9]]
    # per candidate: the checking launch and the timed one; grids = tiles over M=256, N=128
    tiles = [-(-256 // c.tile.m) * -(-128 // c.tile.n) for c in jobs[0].problem.candidates]
    assert [int(ln[2].split(",")[0]) for ln in gemms] == [tiles[0], tiles[0], tiles[1], tiles[1]]
    failures = [rt.aitmock_failure(i).decode() for i in range(rt.aitmock_failure_count())]
    assert failures and all("hipEventElapsedTime" in f for f in failures), failures
    assert rp.store(out.read_text(), entries, jobs, ProfileCache(work / "p.sqlite"), "gfx90a") == {}
