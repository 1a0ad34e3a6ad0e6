"""The mock-device variant of a CUDA build: the same objects, linked against aitgen's mock CUDA
runtime (backends/cuda/mock/) instead of the real one, so that `Model.load(dir, mock_device=True)`
and `aitgen run DIR --mock-device` run the library's whole host side on a machine with no GPU
(aitgen/runtime/mock.py). Costs one link per build (the mock runtime's objects are cached).

Files it adds to the workdir: `libaitgen_mock_cudart.so` (the mock runtime, soname of the same
name) and `mock_<digest>.so` (the model, which needs it); model.json's "mock" entry names both with
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
from .lower import OutputRef
from .spec import KernelCall

RUNTIME = "libaitgen_mock_cudart.so"
SOURCES = ("cuda/mock/mock_device.cpp", "cuda/mock/mock_cudart.cpp", "cuda/mock/mock_streams.cpp")


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


def build_mock(work: Path, library: str, source_names: list[str], compiler: str, jobs, progress) -> dict[str, Any]:
    """Build the mock runtime (cached) and link the model's objects against it: model.json's entry."""
    root = backends_dir()
    sources = [build_mod.Source(Path(rel).name, (root / rel).read_text()) for rel in SOURCES]
    # mock_device.hpp reaches the cache key through the depfile, as every header does.
    flags = ["-std=c++17", "-O1", "-Xcompiler=-fPIC,-fvisibility=default", f"-I{root / 'cuda' / 'mock'}"]
    build_mod.build(sources, work / RUNTIME, compiler=compiler, flags=flags,
                    link_flags=["-cudart=none", f"-Xlinker=-soname={RUNTIME}"], workdir=work / "obj_mock",
                    jobs=jobs, progress=False)
    name = "mock_" + library[len("model_"):]
    objects = [str(work / "obj" / "obj" / f"{n}.o") for n in source_names]
    tmp = work / f".{name}.{secrets.token_hex(6)}.tmp"
    cmd = [compiler, "-shared", *objects, "-o", str(tmp), "-cudart=none", str(work / RUNTIME)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"linking the mock-device library {name} failed (exit {proc.returncode}):\n"
                         f"  command: {' '.join(cmd)}\n  {proc.stderr.strip()[-2000:]}")
    os.replace(tmp, work / name)
    for old in work.glob("mock_*.so"):
        if old.name != name and (old.is_symlink() or old.is_file()):
            old.unlink(missing_ok=True)
    return {"library": name, "runtime": RUNTIME}
