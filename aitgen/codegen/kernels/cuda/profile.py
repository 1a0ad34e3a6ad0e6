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
still renders and compiles the binaries (what the CPU tests check).
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Optional

from ....errors import BuildError
from ....ir.dims import Dim, IntVar
from ....ir.dtype import DType
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
from ...build import build_jobs
from ...render import render
from . import conv as conv_k
from . import gemm as gemm_k
from .configs import cutlass_version, default_cache

_CODE = {DType.float32: 0, DType.float16: 1, DType.bfloat16: 2}


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


def env_for(m: Dim, target: int, dims: list[Dim]) -> dict[IntVar, int]:
    """Values of the IntVars in `dims` (all at their upper bound) except M's, which grow from their
    lower bounds, one after the other, until M reaches `target`."""
    env: dict[IntVar, int] = {}
    for d in dims:
        for v in d.vars():
            env[v] = v.upper
    free = m.vars()
    for v in free:
        env[v] = v.lower
    for v in free:
        lo, hi = v.lower, v.upper
        while lo < hi:
            mid = (lo + hi) // 2
            env[v] = mid
            if m.evaluate(env) >= target:
                hi = mid
            else:
                lo = mid + 1
        env[v] = lo
        if m.evaluate(env) >= target:
            break
    return env


@dataclasses.dataclass
class Entry:
    job: int
    m: int
    funcs: list[str]
    bytes: list[int]
    codes: list[int]
    dims: list[int]
    label: str


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
        for m in todo:
            env = env_for(p.m, m, job.dims + [d for t in job.ptrs for d in t.shape])
            nbytes = [int(max(1, _numel(t, env)) * t.dtype.itemsize) for t in job.ptrs]
            entries.append(Entry(j, m, funcs, nbytes, [_CODE.get(t.dtype, 0) for t in job.ptrs],
                                 [int(d.evaluate(env)) for d in job.dims], f"{p.op} {p.layouts} M={m}"))
    return out


def _numel(t: Tensor, env) -> int:
    n = 1
    for d in t.shape:
        n *= int(d.evaluate(env))
    return n


def build_binary(kind: str, sources: dict[str, str], entries: list[Entry], workdir: Path, arch: str,
                 jobs: Optional[int] = None, target_ms: float = 20.0, repeats: int = 5) -> Path:
    """Compile the candidates (in parallel) and the main into `workdir/<kind>_profiler`."""
    workdir.mkdir(parents=True, exist_ok=True)
    funcs = sorted({f for e in entries for f in e.funcs})
    main = render("cuda/templates/profiler_main.cu.j2", kind=kind, funcs=funcs, target_ms=target_ms, repeats=repeats,
                  entries=[dict(label=e.label, funcs=e.funcs, bytes=e.bytes, codes=e.codes, dims=e.dims)
                           for e in entries])
    sources = dict(sources, **{f"{kind}_main.cu": main})
    nvcc = str(locate.nvcc().path)
    flags = load_backend("cuda").compile_flags(arch)

    def compile_one(name: str) -> Path:
        src, obj = workdir / name, workdir / (name + ".o")
        if not (src.exists() and src.read_text() == sources[name] and obj.exists()):
            src.write_text(sources[name])
            cmd = [nvcc, *flags, "-c", str(src), "-o", str(obj)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise BuildError(f"profiler source {name} failed to compile: {' '.join(cmd)}\n"
                                 + "\n".join(r.stderr.splitlines()[:30]))
        return obj

    with cf.ThreadPoolExecutor(max_workers=jobs or build_jobs()) as pool:
        objs = list(pool.map(compile_one, sorted(sources)))
    binary = workdir / f"{kind}_profiler"
    cmd = [nvcc, *[f for f in flags if f.startswith("-gencode")], *map(str, objs), "-o", str(binary)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise BuildError(f"profiler link failed: {' '.join(cmd)}\n" + "\n".join(r.stderr.splitlines()[:30]))
    return binary


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
        r = subprocess.run([str(binary)], capture_output=True, text=True, timeout=3600)
        if r.returncode:
            raise BuildError(f"profiler {binary} failed (exit {r.returncode}): {r.stderr[-2000:]}")
        for line in r.stdout.splitlines():
            row = json.loads(line)
            e = entries[row["entry"]]
            p = all_jobs[e.job].problem
            times = row["times_ms"]
            ok = [(t, c) for t, c in zip(times, p.candidates) if t is not None]
            if not ok:
                continue
            t, best = min(ok, key=lambda tc: tc[0])
            cache.put(p.key(e.m, arch, version), best.as_params(), t)
            report["winners"][e.label] = best.name
            report["profiled"] += 1
    return report
