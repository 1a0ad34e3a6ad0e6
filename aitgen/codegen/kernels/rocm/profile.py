"""Time the candidate Composable Kernel instances of a graph's GEMM-shaped kernels on an AMD GPU
and cache the winners: the ROCm backend's timing driver, CUDA's (kernels/cuda/profile.py) in
structure, sharing its entry sizing, build and output parsing (kernels/gpu/profiling.py) and its
sqlite cache (aitgen.profiler; keys name backend "rocm", the arch and the CK pin).

profile_graph(graph, opts) runs after the pass pipeline (the graph the lowering will see):
  1. every gemm / bmm / conv2d is a job (equal kernels once): its problem and candidates come from
     the lowering's own setup (gemm_setup / conv_setup, configs.candidates), and each candidate is
     the model's CK template rendered in profiler mode, one translation unit each;
  2. each job is timed at its largest M bucket only, the one configs.pick reads: a ROCm unit
     holds one instance (configs.py says why), so smaller buckets would be timed for nothing;
  3. per op kind ONE binary links every job's candidates and profiler_main.hip.j2, which times
     them with HIP events and prints JSON; the fastest per entry goes to the cache.
`run=False` (no AMD GPU) still renders and compiles the binary; compile_model(profile=True) without
a GPU of the build's arch warns and keeps the heuristic's instances.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Optional

from ....ir.dims import Dim
from ....ir.graph import Graph
from ....ir.op import OpKind
from ....ir.tensor import Tensor
from ....options import CompileOptions
from ....profiler.cache import ProfileCache
from ....profiler.select import Problem, m_buckets
from ... import locate
from ...backend import load_backend
from ...render import render
from ..gpu import profiling
from ..gpu.profiling import Entry
from . import conv as conv_k
from . import gemm as gemm_k
from .configs import ck_version, default_cache

DEFAULT_ARCH = "gfx90a"


def _hip_env() -> dict:
    """hipcc with HIP_PLATFORM=amd (Debian's picks nvcc otherwise when both are installed)."""
    return dict(os.environ, **locate.HIP_ENV)


@dataclasses.dataclass
class Job:
    kind: str                  # the binary it joins: "gemm" (gemm, bmm) or "conv2d"
    template: str              # rocm/templates/...
    params: dict               # without `inst` / profiler
    ptrs: list[Tensor]
    dims: list[Dim]
    problem: Problem


def collect(graph: Graph, opts: CompileOptions) -> list[Job]:
    """The jobs of a graph, one per op with a CK kernel (equal kernels once)."""
    arch = opts.arch or DEFAULT_ARCH
    jobs: dict[str, Job] = {}
    for op in graph.ops:
        if op.kind in (OpKind.GEMM, OpKind.BMM):
            g = gemm_k.gemm_problem(op) if op.kind is OpKind.GEMM else gemm_k.bmm_problem(op)
            k = gemm_k.gemm_setup(g, arch)
            job = Job("gemm", "rocm/templates/gemm_ck.hip.j2", k.params, k.ptrs, k.dims, k.problem)
        elif op.kind is OpKind.CONV2D:
            k = conv_k.conv_setup(op, arch)
            job = Job("conv2d", "rocm/templates/conv_ck.hip.j2", k.params, k.ptrs, k.dims, k.problem)
        else:
            continue
        key = json.dumps([job.template, job.params, job.problem.layouts, [str(d) for d in job.dims]],
                         sort_keys=True, default=str)
        jobs.setdefault(key, job)
    return list(jobs.values())


def top_bucket(p: Problem) -> int:
    """The only bucket a ROCm kernel is profiled and built for: M's largest (configs.pick)."""
    return m_buckets(p.m)[-1]


def render_sources(jobs: list[Job], cache: Optional[ProfileCache], build_arch: str,
                   only_missing: bool = True) -> dict[str, tuple[dict[str, str], list[Entry]]]:
    """Per binary kind: {source name: text} (one unit per candidate) and its entries."""
    version = ck_version()
    out: dict[str, tuple[dict[str, str], list[Entry]]] = {}
    for j, job in enumerate(jobs):
        p = job.problem
        m = top_bucket(p)
        if only_missing and cache is not None and cache.get(p.key(m, build_arch, version)) is not None:
            continue
        sources, entries = out.setdefault(job.kind, ({}, []))
        funcs = []
        for c, cfg in enumerate(p.candidates):
            func = f"prof_{j}_{c}"
            sources[f"{func}.hip"] = render(job.template, func=func, **dict(job.params, inst=cfg.inst, profiler=True))
            funcs.append(func)
        entries.append(profiling.entry(j, m, p, job.ptrs, job.dims, funcs))
    return out


def build_binary(kind: str, sources: dict[str, str], entries: list[Entry], workdir: Path, arch: str,
                 jobs: Optional[int] = None, target_ms: float = 20.0, repeats: int = 5) -> Path:
    """Compile the candidates (in parallel) and the main with hipcc into `workdir/<kind>_profiler`."""
    flags = load_backend("rocm").compile_flags(arch)
    offload = [f for f in flags if f.startswith("--offload-arch")]
    return profiling.build_binary(kind, sources, entries, workdir, main_template="rocm/templates/profiler_main.hip.j2",
                                  suffix=".hip", compiler=str(locate.hipcc().path), flags=flags, link_flags=offload,
                                  env=_hip_env(), jobs=jobs, target_ms=target_ms, repeats=repeats)


def store(stdout: str, entries: list[Entry], jobs: list[Job], cache: ProfileCache, arch: str) -> dict[str, str]:
    """Read a binary's output and store each entry's fastest candidate: {entry label: its name}."""
    version, won = ck_version(), {}
    for e, best, t in profiling.fastest(stdout, entries, lambda j: jobs[j].problem):
        cache.put(jobs[e.job].problem.key(e.m, arch, version), best.as_params(), t)
        won[e.label] = best.name
    return won


def profile_graph(graph: Graph, opts: CompileOptions, workdir, *, cache: Optional[ProfileCache] = None,
                  run: bool = True, jobs: Optional[int] = None) -> dict:
    """Profile what the lowering of `graph` (after the pipeline) will instantiate; store winners.
    Returns {"binaries": [paths], "profiled": n entries, "winners": {label: instance name}}."""
    cache = cache if cache is not None else default_cache()
    arch = opts.arch or DEFAULT_ARCH
    all_jobs = collect(graph, opts)
    report = {"binaries": [], "profiled": 0, "winners": {}}
    for kind, (sources, entries) in render_sources(all_jobs, cache, arch).items():
        binary = build_binary(kind, sources, entries, Path(workdir), arch, jobs=jobs)
        report["binaries"].append(str(binary))
        if not run:
            continue
        won = store(profiling.run_binary(binary), entries, all_jobs, cache, arch)
        report["winners"].update(won)
        report["profiled"] += len(won)
    return report
