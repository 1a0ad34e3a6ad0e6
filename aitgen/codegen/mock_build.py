"""The mock-device variant of a GPU build: the same objects, linked against aitgen's mock GPU
runtime (backends/gpu/mock/: one source, spelled in CUDA's API and mapped to HIP's for a ROCm
build by mock_api.h) instead of the real one, so that `Model.load(dir, mock_device=True)`
and `aitgen run DIR --mock-device` run the library's whole host side on a machine with no GPU
(aitgen/runtime/mock.py). Costs one link per build (the mock runtime's objects are cached).

Files it adds to the workdir: `libaitgen_mock_cudart.so` or, for ROCm, `libaitgen_mock_hiprt.so`
(the mock runtime, soname of the same name) and `mock_<digest>.so` (the model, which needs it); model.json's "mock" entry names both with
their hashes and carries the node table the mock checks each kernel call's operands against.
"""
from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

from .._paths import backends_dir
from ..errors import BuildError
from ..ir.tensor import Tensor
from . import build as build_mod
from . import locate
from .lower import OutputRef
from .spec import KernelCall

# The mock runtime's file (and soname) per backend; artifacts.MOCK_RUNTIMES lists the same names.
RUNTIMES = {"cuda": "libaitgen_mock_cudart.so", "rocm": "libaitgen_mock_hiprt.so"}
SOURCES = ("gpu/mock/mock_device.cpp", "gpu/mock/mock_cudart.cpp", "gpu/mock/mock_streams.cpp")


def node_table(calls: list[KernelCall], graph) -> list[list[list[int]]]:
    """Per kernel call, per pointer: [bytes it spans at the dims' upper bounds, alignment, written].

    Alignment: what the kernel's parameters declare. `align_checks` (GEMM/conv: CUTLASS refuses
    other pointers) is a requirement, positive; `aligned` (element-wise packs, which fall back to one
    element at a time) a preference, negative; otherwise the element size, which any pointer of
    the tensor's type meets."""
    table = []
    for c in calls:
        params = c.spec.param_dict()
        need = {int(a["ptr"]): int(a["bytes"]) for a in params.get("align_checks", []) or []}
        prefer = {int(a["index"]): int(a["bytes"]) for a in params.get("aligned", []) or []}
        writes = set(c.writes if c.writes is not None else [0])
        row = []
        for j, t in enumerate(c.ptrs):
            tensor = graph.outputs[t.name] if isinstance(t, OutputRef) else t
            extent = tensor.nbytes_upper() if isinstance(tensor, Tensor) else 0
            align = need.get(j) or (-prefer[j] if j in prefer else tensor.dtype.itemsize)
            row.append([int(extent), int(align), int(j in writes)])
        table.append(row)
    return table


def _toolchain(backend: str, compiler: str) -> tuple[str, list[str], list[str], list[str]]:
    """(compiler, mock-runtime compile flags, its link flags, the model link's flags) per backend.
    CUDA: nvcc, with no CUDA runtime linked (-cudart=none), so the library's calls bind to the
    mock. ROCm: the host C++ compiler against HIP's host headers (the mock runs no device code),
    and the model's objects linked by it too, since hipcc would add libamdhip64."""
    mock_dir = backends_dir() / "gpu" / "mock"
    if backend == "rocm":
        cxx = locate.cxx().path
        hipcc = locate.hipcc().real_path
        # /opt/rocm/bin/hipcc -> /opt/rocm/include; Debian's /usr/bin/hipcc: a default dir already
        # (naming /usr/include again would break libstdc++'s #include_next)
        hip_include = Path(hipcc).resolve().parent.parent / "include"
        extra = ["-isystem", str(hip_include)] if hip_include != Path("/usr/include") else []
        flags = ["-std=c++17", "-O1", "-fPIC", "-fvisibility=default", "-DAITMOCK_HIP",
                 "-Wno-deprecated-declarations", f"-I{mock_dir}", f"-I{backends_dir() / 'rocm' / 'include'}", *extra]
        return cxx, flags, [], []
    flags = ["-std=c++17", "-O1", "-Xcompiler=-fPIC,-fvisibility=default", f"-I{mock_dir}"]
    return compiler, flags, ["-cudart=none"], ["-cudart=none"]


def build_mock(work: Path, library: str, source_names: list[str], compiler: str, jobs, progress,
               backend: str = "cuda") -> dict[str, Any]:
    """Build the mock runtime (cached) and link the model's objects against it: model.json's entry."""
    root = backends_dir()
    runtime = RUNTIMES[backend]
    sources = [build_mod.Source(Path(rel).name, (root / rel).read_text()) for rel in SOURCES]
    mock_cc, flags, rt_link, model_link = _toolchain(backend, compiler)
    # mock_device.hpp and mock_api.h reach the cache key through the depfile, as every header does.
    build_mod.build(sources, work / runtime, compiler=mock_cc, flags=flags,
                    link_flags=rt_link + [f"-Wl,-soname,{runtime}" if backend == "rocm" else f"-Xlinker=-soname={runtime}"],
                    workdir=work / "obj_mock", jobs=jobs, progress=False)
    name = "mock_" + library[len("model_"):]
    objects = [str(work / "obj" / "obj" / f"{n}.o") for n in source_names]
    tmp = work / f".{name}.{secrets.token_hex(6)}.tmp"
    cmd = [mock_cc, "-shared", *objects, "-o", str(tmp), *model_link, str(work / runtime)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"linking the mock-device library {name} failed (exit {proc.returncode}):\n"
                         f"  command: {' '.join(cmd)}\n  {proc.stderr.strip()[-2000:]}")
    os.replace(tmp, work / name)
    for old in work.glob("mock_*.so"):
        if old.name != name and (old.is_symlink() or old.is_file()):
            old.unlink(missing_ok=True)
    return {"library": name, "runtime": runtime}
