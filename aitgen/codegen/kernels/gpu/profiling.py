"""What the GPU backends' profilers share (CUDA: kernels/cuda/profile.py, ROCm: kernels/rocm/profile.py).

Both time the candidate configs of a graph's GEMM-shaped kernels the same way: each candidate is
the model's own template rendered in profiler mode (an `extern "C" int <func>_profile(cfg, p, d)`
entry), one translation unit each; per op kind one binary links them with a main (the backend's
profiler_main template) that allocates every operand, times every candidate per entry (one problem
at one M bucket) with the platform's events, and prints one JSON line per entry:

  {"entry": i, "times_ms": [median per candidate, or null where it cannot run the problem]}

Here: the cache file, sizing an entry (IntVars set so M reaches the bucket), compiling the binary,
and reading its output into winners. Backend-specific: which ops are jobs, their templates, the
compiler and the profile key's version.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ....errors import BuildError
from ....ir.dims import Dim, IntImm, IntVar
from ....ir.dtype import DType
from ....ir.tensor import Tensor
from ....profiler.cache import ProfileCache
from ....profiler.select import Problem
from ...build import build_jobs, default_cache_dir
from ...render import render

# How the mains fill each buffer: its storage type's code (random values, so the math units switch real bits).
CODE = {DType.float32: 0, DType.float16: 1, DType.bfloat16: 2}


def default_cache() -> ProfileCache:
    """The build cache dir's profile file (AITGEN_CACHE_DIR or ~/.cache/aitgen), beside the object
    cache, so every build on a machine (either backend: the key names it) shares what was measured."""
    return ProfileCache(default_cache_dir() / "profiler.sqlite")


@dataclasses.dataclass
class Entry:
    job: int
    m: int
    funcs: list[str]
    bytes: list[int]
    codes: list[int]
    dims: list[int]
    label: str


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


def numel(t: Tensor, env) -> int:
    n = 1
    for d in t.shape:
        n *= int(d.evaluate(env))
    return n


def entry(job: int, m: int, problem: Problem, ptrs: Sequence[Tensor], dims: Sequence[Dim], funcs: list[str]) -> Entry:
    """One binary entry: job `job` with M at `m`, every other size at its largest."""
    dims = [d if isinstance(d, Dim) else IntImm(int(d)) for d in dims]   # conv windows are plain ints
    env = env_for(problem.m, m, dims + [d for t in ptrs for d in t.shape])
    return Entry(job, m, funcs, [int(max(1, numel(t, env)) * t.dtype.itemsize) for t in ptrs],
                 [CODE.get(t.dtype, 0) for t in ptrs], [int(d.evaluate(env)) for d in dims],
                 f"{problem.op} {problem.layouts} M={m}")


def main_params(kind: str, funcs: list[str], entries: list[Entry], target_ms: float, repeats: int) -> dict:
    return dict(kind=kind, funcs=funcs, target_ms=target_ms, repeats=repeats,
                entries=[dict(label=e.label, funcs=e.funcs, bytes=e.bytes, codes=e.codes, dims=e.dims)
                         for e in entries])


def build_binary(kind: str, sources: dict[str, str], entries: list[Entry], workdir: Path, *, main_template: str,
                 suffix: str, compiler: str, flags: list[str], link_flags: list[str], env: Optional[dict] = None,
                 jobs: Optional[int] = None, target_ms: float = 20.0, repeats: int = 5) -> Path:
    """Compile the candidates (in parallel; an unchanged source keeps its object) and the main
    rendered from `main_template` into `workdir/<kind>_profiler`."""
    workdir.mkdir(parents=True, exist_ok=True)
    funcs = sorted({f for e in entries for f in e.funcs})
    main = render(main_template, **main_params(kind, funcs, entries, target_ms, repeats))
    sources = dict(sources, **{f"{kind}_main{suffix}": main})

    def compile_one(name: str) -> Path:
        src, obj = workdir / name, workdir / (name + ".o")
        if not (src.exists() and src.read_text() == sources[name] and obj.exists()):
            src.write_text(sources[name])
            cmd = [compiler, *flags, "-c", str(src), "-o", str(obj)]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode:
                raise BuildError(f"profiler source {name} failed to compile: {' '.join(cmd)}\n"
                                 + "\n".join(r.stderr.splitlines()[:30]))
        return obj

    with cf.ThreadPoolExecutor(max_workers=jobs or build_jobs()) as pool:
        objs = list(pool.map(compile_one, sorted(sources)))
    binary = workdir / f"{kind}_profiler"
    cmd = [compiler, *link_flags, *map(str, objs), "-o", str(binary)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise BuildError(f"profiler link failed: {' '.join(cmd)}\n" + "\n".join(r.stderr.splitlines()[:30]))
    return binary


def run_binary(binary: Path, env: Optional[dict] = None, timeout: float = 3600) -> str:
    r = subprocess.run([str(binary)], capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode:
        raise BuildError(f"profiler {binary} failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def fastest(stdout: str, entries: list[Entry], problems: Callable[[int], Problem]) -> list[tuple[Entry, Any, float]]:
    """(entry, its fastest candidate, that time) per line of a binary's output; `problems(job)`
    gives the job's problem, whose candidates are in the order the entry's funcs are. An entry
    whose every candidate failed (all null) has no winner: its bucket stays with the heuristic."""
    out = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            e = entries[int(row["entry"])]
            times = row["times_ms"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise BuildError(f"profiler output line {line[:200]!r} is not an entry's timings ({err})") from err
        cands = problems(e.job).candidates
        if len(times) != len(cands):
            raise BuildError(f"profiler entry {e.label}: {len(times)} times for {len(cands)} candidates")
        ok = [(float(t), i) for i, t in enumerate(times) if t is not None and float(t) >= 0]
        if ok:
            t, i = min(ok)   # ties: the earlier candidate (the heuristic's pick comes first on ROCm)
            out.append((e, cands[i], t))
    return out
