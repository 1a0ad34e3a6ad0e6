"""compile_model: outputs -> passes -> memory plan -> kernels -> one shared library + weights.

The target's capabilities are asked once (compile_options) and travel in the options; the memory
plan is a value handed from plan_memory to lowering, the program and the reports."""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import time
import uuid
import warnings
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
from safetensors.numpy import save_file

from .codegen import build as build_mod
from .codegen.backend import load_backend
from .codegen.loop_body import prepare_loops
from .codegen.lower import capabilities, lower_graph
from .codegen import streams as streams_mod
from .codegen.mock_build import build_mock, node_table
from .codegen.program import build_program, user_name
from .codegen.render import render
from .codegen.report import precision_summary, write_graph_json, write_report
from .errors import PrecisionFallbackWarning, RuntimeInputTypeError, TargetError, WorkdirError
from .ir.graph import Graph, Outputs
from .memory import MemoryPlan, plan_memory
from .options import CompileOptions
from .passes import PIPELINE, PassFn, PassRecord, run_passes
from .passes.convert_precision import precision_policy as precision_policy_of
from .passes.runner import graph_cost
from .runtime.artifacts import GPU_TARGETS   # CUDA graphs (HIP graphs), several streams, device archs
from .runtime.lock import LOCK_NAME, workdir_lock

WEIGHTS = "weights.safetensors"
MODEL_JSON = "model.json"
FORMAT = 2   # model.json's layout; aitgen.runtime.artifacts reads this one only
# Kernel file systems: a build there fails half-way or writes where it must not.
_SYSTEM_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))
_LIBRARY = re.compile(r"model_[0-9a-f]{16}\.so")
_DRAWINGS = ("graph.html", "memory.png")   # what `aitgen inspect DIR` draws from graph.json
# A second build into a workdir waits for the first; CUDA builds of large models take many minutes.
BUILD_LOCK_TIMEOUT = 3600.0




def pick_target(target: str) -> str:
    """"auto": CUDA when an NVIDIA GPU and its driver answer, else ROCm when an AMD GPU does, else the CPU."""
    if target != "auto":
        return target
    from ._paths import backends_dir
    from .runtime.device import cuda_available, rocm_available
    # A GPU backend only where its GPU answers and this installation has the backend.
    if (backends_dir() / "cuda" / "backend.yaml").exists() and cuda_available():
        return "cuda"
    if (backends_dir() / "rocm" / "backend.yaml").exists() and rocm_available():
        return "rocm"
    return "cpu"


def device_capability(target: str):
    """What the present GPU of `target` is, as backend.yaml's `capabilities` keys it: a callable,
    asked only when no arch is given (resolve_arch)."""
    from .runtime.device import cuda_capability, rocm_arch
    return rocm_arch if target == "rocm" else cuda_capability


# More streams than this find no more independent work in any model seen so far.
MAX_STREAMS = 16


def compile_options(target: str = "cpu", **kw) -> CompileOptions:
    """CompileOptions for `target` (a backend's name, not "auto") with its capabilities asked once
    (CompileOptions.caps), as compile_model makes them: what runs the passes by hand uses this."""
    return CompileOptions(target=target, caps=capabilities(target), **kw)


def _safetensors_array(t) -> np.ndarray:
    """A constant as safetensors stores it: the sub-byte types (one element per byte, which
    safetensors has no name for) as their bytes, U8; model.json's "constants" keeps the dtype."""
    a = np.ascontiguousarray(t.value)
    return a.view(np.uint8) if t.dtype.itemsize == 1 and t.dtype.value in _UNPACKED else a


_UNPACKED = ("int4", "uint4", "int2", "uint2", "float4_e2m1fn")


def write_weights(graph: Graph, path: Path, build_id: str) -> tuple[dict[int, dict], int, dict[str, dict]]:
    """Save every constant by its (unique, C-safe) name, the file tagged with `build_id`; return the
    table the container reads, the header length (compiled into the library) and model.json's
    "constants". The id has a fixed length, so the header length, and with it the library, does not
    depend on its value."""
    consts = [t for t in graph.tensors if t.is_constant]
    save_file({t.name: _safetensors_array(t) for t in consts}, str(path),
              metadata={"aitgen_build_id": build_id})
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    table, meta = {}, {}
    for i, t in enumerate(consts):
        begin, end = header[t.name]["data_offsets"]
        table[id(t)] = {"index": i, "name": t.name, "dtype": _code(t), "nbytes": end - begin, "offset": begin}
        meta[t.name] = {"dtype": t.dtype.value, "shape": header[t.name]["shape"], "offset": begin,
                        "nbytes": end - begin}
    return table, hlen, meta


def _tensor_meta(t) -> dict:
    return {"dtype": t.dtype.value, "shape": [str(d) for d in t.shape], "min_shape": [d.lower for d in t.shape],
            "max_shape": [d.upper for d in t.shape]}


def check_workdir(workdir) -> Path:
    """`workdir` as an absolute path, or WorkdirError: not a path, empty, holding a NUL, a file
    (or under one), or under /proc, /sys or /dev other than /dev/shm (symlinks followed)."""
    if not isinstance(workdir, (str, os.PathLike)):
        raise WorkdirError(f"workdir must be a path (str or os.PathLike), got {type(workdir).__name__}")
    text = os.fspath(workdir)
    if not isinstance(text, str):
        raise WorkdirError(f"workdir must be a str path, got {type(text).__name__} {text[:80]!r}")
    if not text:
        raise WorkdirError("workdir is empty: name the folder to build into (e.g. 'build/model')")
    if "\0" in text:
        raise WorkdirError(f"workdir {text[:200]!r} contains a NUL character")
    path = Path(os.path.abspath(text))
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as e:   # a symlink loop
        raise WorkdirError(f"workdir {path}: cannot resolve it ({e})") from None
    shm = Path("/dev/shm")  # a plain tmpfs under /dev: a fine place to build
    for tree in _SYSTEM_TREES:
        if (real == tree or tree in real.parents) and not (real == shm or shm in real.parents):
            raise WorkdirError(f"workdir {path} lies under {tree}, a kernel file system: build elsewhere")
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == path else f"lies under {p}, which is a file"
                raise WorkdirError(f"workdir {path} {what}, not a folder")
            break
    return path


def _prepare_workdir(work: Path) -> None:
    """Under the workdir lock: clear what a hostile or crashed workdir may hold where this build
    writes. Symlinks at the folders the build fills are removed (files are replaced by rename
    anyway); temp files of a killed build (a weights file may be gigabytes) go."""
    for sub in ("obj", "profiler"):
        p = work / sub
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            p.unlink()
    ours = tuple(f".{n}." for n in (WEIGHTS, MODEL_JSON, "report.json", "graph.json")) + (".model_",)
    for tmp in work.glob(".*.tmp"):
        if tmp.name.startswith(ours) and (tmp.is_symlink() or tmp.is_file()):
            tmp.unlink(missing_ok=True)


def _code(t) -> int:
    from .codegen.cexpr import CODE
    return CODE[t.dtype]


def compile_model(outputs: Union[Outputs, Graph], target: str = "auto", workdir: Union[str, Path] = "build/model",
                  *, fusion: bool = True, precision: Optional[str] = None, arch: Optional[str] = None,
                  num_runtimes: int = 1, verify: bool = False, dump_passes: Optional[str] = None,
                  name: str = "model", progress: bool = False, extra_flags: Sequence[str] = (),
                  extra_passes: Sequence[PassFn] = (), load: bool = True, cuda_graph: Optional[bool] = None,
                  allow_tf32: bool = False, winograd: bool = True, jobs: Optional[int] = None, profile: bool = False,
                  check_kernels: bool = True, streams: int = 1, precision_policy: Optional[str] = None,
                  calibration=None, calibration_method: str = "minmax"):
    """Compile `outputs` (a Tensor, list, dict name -> Tensor, or Graph) into `workdir` and load it.

    `arch` (CUDA: "sm_80" or "sm_90a"; "sm_90" means sm_90a; ROCm: "gfx90a" or "gfx940", and
    "gfx942" where hipcc takes it) defaults to the present GPU's, else sm_80 / gfx90a
    (backends/<target>/backend.yaml). `precision` ("float16" / "bfloat16") converts float32
    compute and constants (passes/convert_precision.py); "int8" quantises GEMMs/convs with constant
    weights (passes/quantize_int8.py, CPU) with activation scales calibrated on `calibration` (an
    iterable of input dicts; required: no dynamic quantisation) by `calibration_method` ("minmax",
    "percentile", "entropy"; aitgen/quant/calibrate.py); `precision_policy` "mixed" (torch.autocast's:
    only GEMM/conv/attention operands narrow; the CPU's default for bfloat16) or "uniform" (every float
    tensor; the default elsewhere). `cuda_graph` makes the loaded model replay
    its run sequence as CUDA graphs (HIP graphs on ROCm; Model.load(cuda_graph=...) overrides it);
    None: on for a GPU model whose inputs are all of static shape (one graph, captured at the second
    run). `load=False` builds
    only — no device is needed — and returns the workdir Path. `extra_flags` are appended to every
    compile and to the link (e.g. sanitizer flags); they are part of the object-cache key and the
    library's name. `extra_passes` run after PIPELINE and before memory planning
    (aitgen.debug.bisect exposes every intermediate as an output this way). `jobs` caps parallel
    compiles (default: every core). `profile` (CUDA or ROCm, a GPU of the build's arch present) times
    the candidate configs of every GEMM/conv kernel not yet in the profile cache before lowering
    (aitgen.profiler); without it the kernels take the cached winners, else the heuristic's choice,
    and without such a GPU a ProfileFallbackWarning says so.
    `check_kernels` (backends with oneDNN kernels: the CPU) loads the library and runs it once on
    zeros at its inputs' smallest shapes, so that every GEMM/conv kernel creates its primitive, and
    writes which oneDNN implementation each got into report.json (onednn_impls, reference_kernels,
    kernel_check); a reference implementation is a ReferenceKernelWarning naming the op. Other shapes
    create their primitives at their first run, and Model.run warns then. `streams` (CUDA and ROCm, 1..16,
    default 1: off until measured on a GPU) runs independent kernels on up to that many streams,
    ordered by events (codegen/streams.py). `winograd` (the CPU): float32 3x3 stride-1 convolutions
    with a constant weight run as Winograd F(4x4, 3x3) where the run's shape makes it pay (32+
    channels, 16+ tiles of 4x4 outputs; backends/cpu/include/aitgen/cpu_winograd.h), about twice as
    fast as the direct form alone and rounding at about 1e-5 of the output's magnitude; False keeps
    every convolution direct."""
    from .runtime.model import Model

    t0 = time.perf_counter()
    work = check_workdir(workdir)
    target = pick_target(target)
    if precision == "int8" and target != "cpu":   # QGEMM/QCONV2D have CPU kernels only (oneDNN int8)
        raise TargetError(f'precision="int8" runs on the CPU backend only; the target is {target} '
                          '(pass target="cpu")')
    backend = load_backend(target)
    arch = backend.resolve_arch(arch, device_capability(target))
    graph = outputs.copy() if isinstance(outputs, Graph) else Graph.from_outputs(outputs, name=name)
    if cuda_graph is None:
        cuda_graph = target in GPU_TARGETS and all(d.is_static for t in graph.inputs for d in t.shape)
    elif not isinstance(cuda_graph, bool):
        raise RuntimeInputTypeError(f"cuda_graph must be True, False or None, got {type(cuda_graph).__name__}")
    if isinstance(streams, bool) or not isinstance(streams, int) or not 1 <= streams <= MAX_STREAMS:
        raise RuntimeInputTypeError(f"streams must be an int in [1, {MAX_STREAMS}], got {streams!r}")
    if not isinstance(winograd, bool):
        raise RuntimeInputTypeError(f"winograd must be True or False, got {type(winograd).__name__}")
    if streams > 1 and target not in GPU_TARGETS:
        raise TargetError(f"streams={streams}: several streams apply to GPU builds (CUDA, ROCm); "
                          f"the target is {target}")
    feeds = None
    if precision == "int8":   # checked before any pass: a bad feed is the caller's, named as such
        from .quant.calibrate import check_feeds
        feeds = tuple(check_feeds(calibration, graph.inputs))
    elif calibration is not None:
        from .errors import CalibrationError
        raise CalibrationError(f'calibration applies to precision="int8", not precision={precision!r}')
    opts = compile_options(target, fusion=fusion, precision=precision, arch=arch, verify=verify,
                           dump_passes=dump_passes, allow_tf32=allow_tf32, winograd=winograd, cuda_graph=cuda_graph, profile=profile,
                           streams=streams, precision_policy=precision_policy, calibration=feeds,
                           calibration_method=calibration_method)
    num_ops = len(graph.ops)
    run = run_passes(graph, opts, list(PIPELINE) + list(extra_passes))
    # LOOP bodies compile with the same options; their constants join the outer graph's weights.
    graph = prepare_loops(run.graph, opts)
    # After every pass: the plan needs the final schedule and the names name_graph gives.
    start = time.perf_counter()
    plan = plan_memory(graph, opts.caps)
    # report.json lists memory planning after the passes, as the stage that ran last.
    stages = run.records + [PassRecord("memory_planning", time.perf_counter() - start, len(graph.ops),
                                       *graph_cost(graph))]

    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WorkdirError(f"cannot create workdir {work}: {e.strerror}") from None
    build_mod.replace_symlink(work / LOCK_NAME)   # nobody can hold a lock through a link
    # One build at a time per workdir, from its weights until the Model it returns has read them
    # (Model.load from this thread passes the lock): two builds with other weights would otherwise
    # each load the last one's weights.
    with workdir_lock(work, exclusive=True, timeout=BUILD_LOCK_TIMEOUT):
        _prepare_workdir(work)
        # Every file is written under a temp name and renamed into place, model.json last: a build
        # that dies leaves the previous build whole, or a mismatch the loader refuses, never a
        # half-written file. A symlink in the workdir is replaced, never written through.
        build_id = uuid.uuid4().hex
        fd, weights_tmp = build_mod.new_temp(work / WEIGHTS)
        os.close(fd)
        try:
            constants, header_len, constants_meta = write_weights(graph, weights_tmp, build_id)
            result, calls, n_unique, library, mock = _build_library(graph, plan, backend, target, arch, opts, constants,
                                                              header_len, work, extra_flags, progress, jobs)
            os.replace(weights_tmp, work / WEIGHTS)
        finally:
            weights_tmp.unlink(missing_ok=True)
        meta = {"format": FORMAT, "library": library, "library_sha256": _sha256_file(work / library),
                "build_id": build_id, "target": target, "arch": arch, "cuda_graph": cuda_graph, "name": graph.name,
                "inputs": {user_name(graph, t): _tensor_meta(t) for t in graph.inputs},  # as the library names them
                "outputs": {k: _tensor_meta(t) for k, t in graph.outputs.items()},
                "constants": constants_meta,
                # What the loader checks a GPU against, so loading needs nothing of the compiler.
                "device_archs": dict(backend.capabilities),
                # Which ops each kernel runs: the runtime's warnings about a kernel name the ops.
                "kernel_ops": _kernel_ops(calls),
                # Sizes bound during the run (ops/dynamic.py): outputs are cut to them after it.
                "data_dependent": any(v.produced for t in graph.tensors for d in t.shape for v in d.vars())}
        if mock is not None:
            meta["mock"] = {**mock, "library_sha256": _sha256_file(work / mock["library"]),
                            "runtime_sha256": _sha256_file(work / mock["runtime"]),
                            "nodes": node_table(calls, graph), "ops": [c.op for c in calls]}
        psum = precision_summary(graph, precision, precision_policy_of(opts))
        fallback = _precision_fallback(target, opts.precision)
        if fallback:
            psum["fallback"] = fallback
            warnings.warn(fallback, PrecisionFallbackWarning, stacklevel=3)
        write_report(work, graph, plan, num_ops=num_ops, calls=calls, unique_kernels=n_unique, build=result,
                     seconds=time.perf_counter() - t0, target=target, passes=stages, pipeline_input=run.input_cost,
                     precision=psum)
        # What `aitgen inspect DIR` draws: the final graph, the kernels each op became, the memory plan.
        write_graph_json(work, graph, calls, plan)
        build_mod.atomic_write(work / MODEL_JSON, json.dumps(meta, indent=1).encode())
        # A process that has an old library loaded keeps its mapping: unlinking a mapped file is safe.
        for old in work.glob("model_*.so"):
            # Only files of our form: a folder of that name is not ours to remove.
            if old.name != library and _LIBRARY.fullmatch(old.name) and (old.is_symlink() or old.is_file()):
                old.unlink(missing_ok=True)
        # Drawn from the previous build's graph.json by `aitgen inspect DIR`: left here they would
        # show a graph this workdir no longer holds.
        for drawn in _DRAWINGS:
            p = work / drawn
            if p.is_symlink() or p.is_file():
                p.unlink(missing_ok=True)
        model = None
        if backend.uses_onednn and check_kernels:
            model = Model.load(work, num_runtimes=num_runtimes)
            _check_kernels(model, work)
        if not load:
            if model is not None:
                model.close()
            return work
        return model if model is not None else Model.load(work, num_runtimes=num_runtimes)


def _precision_fallback(target: str, precision: Optional[str]) -> Optional[str]:
    """The CPU's note on a requested precision it has no fast instructions for (bfloat16 without
    AVX-512, int8 without VNNI), else None; GPU targets have none."""
    if target != "cpu" or precision is None:
        return None
    from .codegen.kernels.cpu import gemm as cpu_gemm
    return cpu_gemm.precision_fallback(precision)


def _kernel_ops(calls) -> dict[str, list[str]]:
    ops: dict[str, list[str]] = {}
    for c in calls:
        for spec in (c.spec, *c.nested):   # a LOOP's body kernels are named by the loop's op
            names = ops.setdefault(spec.func, [])
            if c.op not in names:
                names.append(c.op)
    return ops


def _check_kernels(model, work: Path) -> None:
    """Run `model` once on zeros at its inputs' smallest shapes (a dim whose lower bound is 0 at 1:
    an empty tensor creates no primitive), which creates a oneDNN primitive for every GEMM/conv
    kernel, and add what they got to report.json. The run itself warns about a reference kernel
    (Model.run, runtime/kernel_report.py). Zeros are valid input for every op (a token id, an index,
    a length), and whatever they compute is thrown away."""
    t0 = time.perf_counter()
    shapes = {}
    for name, spec in model.input_specs.items():
        shapes[name] = [max(lo, min(1, hi)) for lo, hi in zip(model.min_shapes[name], spec.max_shape)]
    check: dict = {"shapes": shapes}
    try:
        model.run({n: np.zeros(s, model.input_specs[n].dtype.np) for n, s in shapes.items()})
    except Exception as e:  # noqa: BLE001 - recorded, never fatal: the build itself succeeded
        check["error"] = f"{type(e).__name__}: {e}"
    check["seconds"] = round(time.perf_counter() - t0, 3)
    path = work / "report.json"
    report = json.loads(path.read_text())
    report.update(model.kernel_report(), kernel_check=check)
    build_mod.atomic_write(path, json.dumps(report, indent=1).encode())


def _profile(graph, opts, backend, work: Path, jobs) -> None:
    """compile_model(profile=True): time the GEMM/conv candidates on this machine's GPU and cache
    the winners the lowering then reads. No GPU to time them on is a ProfileFallbackWarning, never
    an error: the build goes on with the cache and the heuristic."""
    import warnings
    from .errors import ProfileFallbackWarning
    from .runtime import device
    why = None
    if backend.uses_cutlass:
        from .codegen.kernels.cuda.profile import profile_graph
        if device.cuda_available():
            profile_graph(graph, opts, work / "profiler", jobs=jobs)
            return
        why = "no CUDA GPU is visible"
    elif backend.uses_ck:
        from .codegen.kernels.rocm.profile import DEFAULT_ARCH, profile_graph
        have, want = device.rocm_arch(), opts.arch or DEFAULT_ARCH
        if have == want:
            profile_graph(graph, opts, work / "profiler", jobs=jobs)
            return
        # CK's code objects run only on their own ISA: a gfx942 build cannot be timed on a gfx90a.
        why = (f"no AMD GPU here ({device.rocm_unavailable_reason()})" if have is None
               else f"the AMD GPU here is {have}, the build is for {want}")
    else:
        why = f"target {backend.name!r} has no profiled kernels"
    warnings.warn(f"profile=True: {why}; the GEMM/conv kernels use cached winners where present, else the "
                  "heuristic's choice", ProfileFallbackWarning, stacklevel=4)


def _build_library(graph, plan: MemoryPlan, backend, target, arch, opts, constants, header_len, work: Path,
                   extra_flags, progress, jobs) -> tuple[build_mod.BuildResult, list, int, str, Optional[dict]]:
    """Lower, render and compile the graph into work/model_<digest>.so: (the build's result, the
    kernel calls, how many kernels are unique, the library's file name, the mock-device variant's
    model.json entry where the backend links one)."""
    if opts.profile:
        _profile(graph, opts, backend, work, jobs)
    calls = lower_graph(graph, plan, target, arch=arch, opts=opts)
    unique = {}
    for c in calls:
        for spec in (c.spec, *c.nested):  # a LOOP's body kernels are this library's too
            unique.setdefault(spec.func, spec)
    suffix = backend.source_suffix
    sources = [build_mod.Source(f"{func}{suffix}", render(spec.template, func=func, **spec.param_dict()))
               for func, spec in unique.items()]
    program = build_program(graph, plan, calls, constants, header_len, streams=opts.streams,
                            drop_wait=streams_mod.PLANT_DROP_WAIT)
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
    if (work / library).is_dir() and not (work / library).is_symlink():
        raise WorkdirError(f"workdir {work} holds a folder named {library}, where this build's library goes")
    result = build_mod.build(sources, work / library, compiler=backend.tool(), flags=cflags,
                             link_flags=lflags, workdir=work / "obj", progress=progress, jobs=jobs,
                             prelude=backend.prelude_spec())
    mock = None
    if backend.mock_device:
        mock = build_mock(work, library, [s.name for s in sources], backend.compiler, jobs, progress,
                          backend=backend.name)
    return result, calls, len(unique), library, mock


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()
