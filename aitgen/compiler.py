"""compile_model: outputs -> passes -> memory plan -> kernels -> one shared library + weights."""
from __future__ import annotations

import hashlib
import json
import struct
import time
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
from safetensors.numpy import save_file

from .codegen import build as build_mod
from .codegen.backend import load_backend
from .codegen.lower import lower_graph
from .codegen.program import build_program
from .codegen.render import render
from .codegen.report import write_graph_json, write_report
from .ir.graph import Graph, Outputs
from .options import CompileOptions
from .passes import PIPELINE, PassFn, run_pipeline
from .passes.memory_planning import memory_planning

WEIGHTS = "weights.safetensors"


def pick_target(target: str) -> str:
    """"auto": CUDA when a GPU and its driver answer, else the CPU."""
    if target != "auto":
        return target
    from ._paths import backends_dir
    from .runtime.device import cuda_available
    # CUDA only where a GPU answers and this installation has the CUDA backend.
    has_cuda = (backends_dir() / "cuda" / "backend.yaml").exists()
    return "cuda" if has_cuda and cuda_available() else "cpu"


def write_weights(graph: Graph, path: Path) -> tuple[dict[int, dict], int]:
    """Save every constant by its (unique, C-safe) name; return the table the container reads."""
    consts = [t for t in graph.tensors if t.is_constant]
    save_file({t.name: np.ascontiguousarray(t.value) for t in consts}, str(path))
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    table = {}
    for i, t in enumerate(consts):
        begin, end = header[t.name]["data_offsets"]
        table[id(t)] = {"index": i, "name": t.name, "dtype": _code(t), "nbytes": end - begin, "offset": begin}
    return table, hlen


def _tensor_meta(t) -> dict:
    return {"dtype": t.dtype.value, "shape": [str(d) for d in t.shape], "max_shape": [d.upper for d in t.shape]}


def _code(t) -> int:
    from .codegen.cexpr import CODE
    return CODE[t.dtype]


def compile_model(outputs: Union[Outputs, Graph], target: str = "auto", workdir: Union[str, Path] = "build/model",
                  *, fusion: bool = True, precision: Optional[str] = None, arch: Optional[str] = None,
                  num_runtimes: int = 1, verify: bool = False, dump_passes: Optional[str] = None,
                  name: str = "model", progress: bool = False, extra_flags: Sequence[str] = (),
                  extra_passes: Sequence[PassFn] = (), load: bool = True, cuda_graph: bool = False,
                  allow_tf32: bool = False, jobs: Optional[int] = None, profile: bool = False):
    """Compile `outputs` (a Tensor, list, dict name -> Tensor, or Graph) into `workdir` and load it.

    `arch` (CUDA: "sm_80" or "sm_90a"; "sm_90" means sm_90a) defaults to the present GPU's, else
    sm_80 (backends/cuda/backend.yaml). `precision` ("float16" / "bfloat16") converts float32
    compute and constants (passes/convert_precision.py). `cuda_graph` makes the loaded model replay
    its run sequence as CUDA graphs (Model.load(cuda_graph=...) overrides it). `load=False` builds
    only — no device is needed — and returns the workdir Path. `extra_flags` are appended to every
    compile and to the link (e.g. sanitizer flags); they are part of the object-cache key and the
    library's name. `extra_passes` run after PIPELINE and before memory planning
    (aitgen.debug.bisect exposes every intermediate as an output this way). `jobs` caps parallel
    compiles (default: every core). `profile` (CUDA, a GPU present) times the candidate configs of
    every GEMM/conv kernel not yet in the profile cache before lowering (aitgen.profiler); without
    it, or without a GPU, the kernels take the cached winners, else the heuristic's choice."""
    from .runtime.device import cuda_capability
    from .runtime.model import Model

    t0 = time.perf_counter()
    target = pick_target(target)
    backend = load_backend(target)
    arch = backend.resolve_arch(arch, cuda_capability)
    opts = CompileOptions(target=target, fusion=fusion, precision=precision, arch=arch, verify=verify,
                          dump_passes=dump_passes, allow_tf32=allow_tf32, cuda_graph=cuda_graph, profile=profile)
    graph = outputs.copy() if isinstance(outputs, Graph) else Graph.from_outputs(outputs, name=name)
    num_ops = len(graph.ops)
    # Memory planning runs last: it needs the final schedule and the names name_graph gives.
    graph = run_pipeline(graph, opts, list(PIPELINE) + list(extra_passes) + [memory_planning])

    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    constants, header_len = write_weights(graph, work / WEIGHTS)
    if opts.profile and backend.uses_cutlass:
        from .profiler.runner import profile_graph
        from .runtime.device import cuda_available
        if cuda_available():
            profile_graph(graph, opts, work / "profiler", jobs=jobs)
    calls = lower_graph(graph, target, arch=arch, opts=opts)
    unique = {}
    for c in calls:
        unique.setdefault(c.spec.func, c.spec)
    suffix = backend.source_suffix
    sources = [build_mod.Source(f"{func}{suffix}", render(spec.template, func=func, **spec.param_dict()))
               for func, spec in unique.items()]
    program = build_program(graph, calls, constants, header_len)
    sources.append(build_mod.Source(f"model{suffix}", render(backend.template("model"), **program)))
    from ._paths import backends_dir
    for rel in backend.static_sources:
        sources.append(build_mod.Source(Path(rel).name, (backends_dir() / rel).read_text()))
    # The library is named by its content: a process that loaded an earlier build of this workdir
    # would otherwise get the stale image back from dlopen, which caches by path.
    cflags = backend.compile_flags(arch) + [str(f) for f in extra_flags]
    lflags = backend.link_flags() + [str(f) for f in extra_flags]
    digest = hashlib.sha256("\0".join([s.name + s.text for s in sources] + cflags).encode())
    library = f"model_{digest.hexdigest()[:16]}.so"
    result = build_mod.build(sources, work / library, compiler=backend.compiler, flags=cflags,
                             link_flags=lflags, workdir=work / "obj", progress=progress, jobs=jobs)
    for old in work.glob("model_*.so"):
        if old.name != library:
            old.unlink()
    meta = {"library": library, "target": target, "arch": arch, "cuda_graph": cuda_graph, "name": graph.name,
            "inputs": {t.name: _tensor_meta(t) for t in graph.inputs},
            "outputs": {k: _tensor_meta(t) for k, t in graph.outputs.items()}}
    (work / "model.json").write_text(json.dumps(meta, indent=1))
    write_report(work, graph, num_ops=num_ops, calls=calls, unique_kernels=len(unique), build=result,
                 seconds=time.perf_counter() - t0, target=target)
    # What `aitgen inspect DIR` draws: the final graph, the kernels each op became, the memory plan.
    write_graph_json(work, graph, calls)
    if not load:
        return work
    return Model.load(work, num_runtimes=num_runtimes)
