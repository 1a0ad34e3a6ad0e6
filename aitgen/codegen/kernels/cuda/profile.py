"""Time the candidate configs of a graph's GEMM-shaped kernels on the GPU and cache the winners:
the CUDA backend's timing driver (aitgen.profiler holds the candidates, heuristic, cache and
selection it feeds).

profile_graph(graph, opts) runs after the pass pipeline (the graph the lowering will see):
  1. every gemm / bmm / conv2d / grouped GEMM with a CUTLASS kernel is a job: its kernel source is
     the model's own template rendered in profiler mode, once per candidate config (one
     translation unit each, so nvcc compiles them in parallel);
  2. each job is timed per M bucket not yet in the cache, at sizes that put M at the bucket's top
     (IntVars chosen within their bounds), N, K and the batch at their largest;
  3. per op kind ONE binary links every job's candidates and a main (profiler_main.cu.j2) that
     times them with CUDA events and prints JSON; the fastest config per bucket goes to the cache.
The lowering then reads the winners (configs.py, select.dispatch). Without a GPU nothing runs: `run=False`
still renders and compiles the binaries (what the CPU tests check). Sizing entries, building the
binary and reading its output are shared with ROCm's profiler (kernels/gpu/profiling.py).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

from ....ir.dims import Dim
from ....ir.graph import Graph
from ....ir.op import OpKind
from ....ir.tensor import Tensor
from ....ops.fused import split_operands
from ....ops.grouped import member_ops
from ....options import CompileOptions
from ....profiler.cache import ProfileCache
from ....profiler.candidates import GemmConfig
from ....profiler.select import Problem, m_buckets
from ... import locate
from ...backend import load_backend
from ...render import render
from ..gpu import profiling
from ..gpu.profiling import Entry, env_for  # noqa: F401 - this module's API before they were shared
from . import conv as conv_k
from . import gemm as gemm_k
from .configs import cutlass_version, default_cache


@dataclasses.dataclass
class Job:
    kind: str                  # the binary it joins: "gemm" (gemm, bmm), "conv2d", "grouped_gemm"
    template: str              # cuda/templates/...
    params: dict               # without configs / profiler
    ptrs: list[Tensor]
    dims: list[Dim]
    problem: Problem


def collect(graph: Graph, opts: CompileOptions) -> list[Job]:
    """The jobs of a graph, one per op with a CUTLASS kernel (equal kernels once)."""
    arch, tf32 = opts.arch or "sm_80", opts.allow_tf32
    jobs: dict[str, Job] = {}
    for op in graph.ops:
        if op.kind in (OpKind.GEMM, OpKind.BMM):
            g = gemm_k.gemm_problem(op) if op.kind is OpKind.GEMM else gemm_k.bmm_problem(op)
            k = gemm_k.gemm_kernel(g, arch, tf32)
            if k.problem is not None:
                job = Job("gemm", "cuda/templates/" + k.template, k.params, [g.out, g.a, g.b] +
                          [ld.tensor for ld in k.plan.loads], k.dims, k.problem)
            else:
                continue
        elif op.kind is OpKind.CONV2D:
            template, params, dims, problem, plan = conv_k.conv_kernel(op, arch, tf32)
            if problem is None:
                continue
            own, _ = split_operands(op.inputs, op.attrs)
            job = Job("conv2d", "cuda/templates/" + template, params, [op.outputs[0], own[0], own[1]] +
                      [ld.tensor for ld in plan.loads], dims, problem)
        elif op.kind is OpKind.GROUPED and op.attrs.kind is OpKind.GEMM:
            problems = [gemm_k.gemm_problem(m) for m in member_ops(op)]
            found = gemm_k._grouped_kernel(problems, arch, tf32)  # noqa: SLF001 - the lowering's own rule
            if found is None:
                continue
            params, ptrs, dims = found
            job = Job("grouped_gemm", "cuda/templates/gemm_grouped.cu.j2", params, ptrs, dims,
                      gemm_k.grouped_problem(problems, params))
        else:
            continue
        key = json.dumps([job.template, job.params, [str(d) for d in job.dims]], sort_keys=True, default=str)
        jobs.setdefault(key, job)
    return list(jobs.values())


def render_sources(jobs: list[Job], cache: Optional[ProfileCache], build_arch: str,
                   only_missing: bool = True) -> dict[str, tuple[dict[str, str], list[Entry], list[list[GemmConfig]]]]:
    """Per binary kind: {source name: text}, its entries, and each job's candidate list."""
    version = cutlass_version()
    out: dict[str, tuple[dict[str, str], list[Entry], list]] = {}
    for j, job in enumerate(jobs):
        p = job.problem
        todo = [m for m in m_buckets(p.m)
                if not (only_missing and cache is not None and cache.get(p.key(m, build_arch, version)) is not None)]
        if not todo:
            continue
        sources, entries, cands = out.setdefault(job.kind, ({}, [], []))
        funcs = []
        for c, cfg in enumerate(p.candidates):
            func = f"prof_{j}_{c}"
            params = dict(job.params, configs=[dict(cfg.as_params(), max_m=None)], profiler=True)
            sources[f"{func}.cu"] = render(job.template, func=func, **params)
            funcs.append(func)
        cands.append(list(p.candidates))
        entries += [profiling.entry(j, m, p, job.ptrs, job.dims, funcs) for m in todo]
    return out


def build_binary(kind: str, sources: dict[str, str], entries: list[Entry], workdir: Path, arch: str,
                 jobs: Optional[int] = None, target_ms: float = 20.0, repeats: int = 5) -> Path:
    """Compile the candidates (in parallel) and the main into `workdir/<kind>_profiler`."""
    flags = load_backend("cuda").compile_flags(arch)
    return profiling.build_binary(kind, sources, entries, workdir, main_template="cuda/templates/profiler_main.cu.j2",
                                  suffix=".cu", compiler=str(locate.nvcc().path), flags=flags,
                                  link_flags=[f for f in flags if f.startswith("-gencode")], jobs=jobs,
                                  target_ms=target_ms, repeats=repeats)


def profile_graph(graph: Graph, opts: CompileOptions, workdir, *, cache: Optional[ProfileCache] = None,
                  run: bool = True, jobs: Optional[int] = None) -> dict:
    """Profile what the lowering of `graph` (after the pipeline) will instantiate; store winners.
    Returns {"binaries": [paths], "profiled": n entries, "winners": {label: config name}}."""
    cache = cache if cache is not None else default_cache()
    arch = opts.arch or "sm_80"
    all_jobs = collect(graph, opts)
    per_kind = render_sources(all_jobs, cache, arch)
    report = {"binaries": [], "profiled": 0, "winners": {}}
    version = cutlass_version()
    for kind, (sources, entries, _) in per_kind.items():
        binary = build_binary(kind, sources, entries, Path(workdir), arch, jobs=jobs)
        report["binaries"].append(str(binary))
        if not run:
            continue
        out = profiling.run_binary(binary)
        for e, best, t in profiling.fastest(out, entries, lambda j: all_jobs[j].problem):
            cache.put(all_jobs[e.job].problem.key(e.m, arch, version), best.as_params(), t)
            report["winners"][e.label] = best.name
            report["profiled"] += 1
    return report
