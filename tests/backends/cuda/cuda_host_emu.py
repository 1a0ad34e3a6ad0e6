"""Runs a graph lowered for CUDA on the host: the rendered kernels, compiled by g++ against
cuda_host_emu.h (threads as fibers, see there), and the run sequence interpreted here with the
memory plan's layout (arena offsets, in-place results, views), as the model container would.

Kernels of many graphs build into one library (one g++ run); `Emulated(outs, lib)` then runs one
graph. Used by test_cuda_own_kernels.py to check the CUDA kernels' numbers without a GPU.
"""
from __future__ import annotations

import ctypes
import functools
import re
import subprocess
from pathlib import Path

import numpy as np

from aitgen import _paths
from aitgen.codegen import locate
from aitgen.codegen.lower import OutputRef, lower_graph
from aitgen.codegen.render import render
from aitgen.compiler import compile_options
from aitgen.ir.dims import IntVar, as_dim
from aitgen.ir.graph import Graph
from aitgen.memory import MemoryPlan, plan_memory
from aitgen.passes import PIPELINE, run_pipeline

HERE = Path(__file__).parent

# The runtime side the kernels call (backends/cuda/src provides it in a real build): a run state
# whose two "SMs" make every grid-stride loop go round, and the device error record.
PRELUDE = r'''
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include "aitgen/gpu_kernel.h"
#include "aitgen/gpu_math.h"
#include "aitgen/gpu_reduce.h"
#include "aitgen/gpu_attention.h"
namespace ait { namespace AIT_GPU_RUNTIME_NS {  // the dialect's runtime namespace (ait::cuda, ait::rocm)
// The record the kernels report to (declared in gpu_kernel.h); read and zeroed by emu_bad_input
// after each run, as the runtime does (backends/cuda/src/cuda_runtime.cu).
BadInputRecord* bad_input_record() { static BadInputRecord e{}; return &e; }
RunState& run_state() { static RunState s = [] { RunState r; r.sm_count = 2; return r; }(); return s; }
void* workspace(size_t, const char* who) { throw std::runtime_error(std::string(who) + ": no workspace here"); }
[[noreturn]] void fail(gpu::error_t err, const char* what) {
  throw std::runtime_error(std::string(what) + ": GPU error " + std::to_string(int(err)));
}
} }
#ifndef AIT_EMU_HIP
extern "C" cudaError_t cudaGetLastError(void) { return cudaSuccess; }
#endif
extern "C" int emu_bad_input(int64_t* v, char* what, size_t n) {
  ait::gpu::BadInputRecord* e = ait::gpu::bad_input_record();
  if (!e->flag) return 0;
  v[0] = e->value; v[1] = e->position; v[2] = e->bound;
  std::strncpy(what, e->what, n - 1);
  *e = ait::gpu::BadInputRecord{};
  return 1;
}
'''


def rewrite_launches(src: str) -> str:
    """`k<...><<<cfg>>>(args)` -> `::ait_emu::launch(::ait_emu::Cfg(cfg), [&] { k<...>(args); })`."""
    out, i = [], 0
    while (j := src.find("<<<", i)) >= 0:
        k, depth = j, 0  # back over the kernel's name and template arguments
        while k > 0:
            ch = src[k - 1]
            depth += (ch == ">") - (ch == "<")
            if depth == 0 and not (ch.isalnum() or ch in "_:<>"):
                break
            k -= 1
        e = src.index(">>>", j)
        p, depth = e + 3, 0
        assert src[p] == "(", src[j:p + 20]
        while True:  # to the closing parenthesis of the arguments
            depth += (src[p] == "(") - (src[p] == ")")
            if depth == 0:
                break
            p += 1
        out += [src[i:k], f"::ait_emu::launch(::ait_emu::Cfg({src[j + 3:e]}), [&] {{ {src[k:j]}({src[e + 4:p]}); }})"]
        i = p + 1
    return "".join(out) + src[i:]


DEFAULT_ARCH = {"cuda": "sm_80", "rocm": "gfx90a"}
WARP = {"cuda": 32, "rocm": 64}   # the emulator's warp: the dialect's (codegen/kernels/gpu/dialect.py)


def lower(outs, arch: str | None = None, target: str = "cuda") -> tuple[Graph, MemoryPlan, list]:
    arch = arch or DEFAULT_ARCH[target]
    opts = compile_options(target=target, arch=arch)
    graph = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    plan = plan_memory(graph, opts.caps)
    return graph, plan, lower_graph(graph, plan, target, arch=arch, opts=opts)


def _is_byte_copy(spec) -> bool:
    return spec.template.rsplit("/", 1)[-1] == "copy.cu.j2"


def build(calls, tmp: Path, target: str = "cuda") -> ctypes.CDLL:
    """One library with every kernel of `calls` (each in a namespace of its own) and a wrapper per
    kernel, emu_<func>(p, d, err, n), that turns an exception into a message; in the emulator's
    form for `target` (the calls' backend)."""
    specs = {c.spec.func: c.spec for c in calls if not _is_byte_copy(c.spec)}
    parts = [PRELUDE]
    for i, (func, spec) in enumerate(specs.items()):
        src = render(spec.template, func=func, **spec.param_dict())
        parts.append(f"namespace u{i} {{\n{rewrite_launches(src)}\n}}  // namespace u{i}\n"
                     f'extern "C" int emu_{func}(void* const* p, const int64_t* d, char* err, size_t n) {{\n'
                     f"  try {{ u{i}::{func}(p, d); return 0; }}\n"
                     f"  catch (const std::exception& e) {{ std::strncpy(err, e.what(), n - 1); return 1; }}\n}}\n")
    (tmp / "emu.cpp").write_text("".join(parts))
    backends = _paths.backends_dir()
    if target == "rocm":
        form = ["-DAIT_EMU_HIP", f"-DAIT_EMU_WARP={WARP[target]}", f"-I{backends / 'rocm/include'}", f"-I{HERE / 'hip_emu'}"]
    else:
        form = [f"-DAIT_EMU_WARP={WARP[target]}", f"-I{backends / 'cuda/include'}", f"-I{cuda_include()}"]
    cmd = ["g++", "-std=c++17", "-O1", "-fPIC", "-shared", "-w", "-include", str(HERE / "cuda_host_emu.h"), *form,
           f"-I{backends / 'common/include'}", f"-I{backends / 'gpu/include'}",
           str(tmp / "emu.cpp"), "-o", str(tmp / "emu.so")]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"g++ failed:\n{r.stderr[-6000:]}"
    return ctypes.CDLL(str(tmp / "emu.so"))


@functools.lru_cache(maxsize=1)
def cuda_include() -> Path:
    """CUDA's headers (cuda_fp16.h, ...), where nvcc itself finds them."""
    r = subprocess.run([str(locate.nvcc().path), "--dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"],
                       capture_output=True, text=True, check=False)
    m = re.search(r'INCLUDES="-I([^"]+)"', r.stdout + r.stderr)
    assert m, "nvcc --dryrun names no include directory"
    return Path(m.group(1))


def _buffer(nbytes: int, align: int = 256) -> np.ndarray:
    raw = np.zeros(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + max(nbytes, 1)]


class Emulated:
    """One graph's run sequence over a library from build()."""

    def __init__(self, graph: Graph, plan: MemoryPlan, calls: list, lib: ctypes.CDLL):
        self.graph, self.plan, self.calls, self.lib = graph, plan, calls, lib

    def run(self, feeds: dict) -> dict:
        g, plan = self.graph, self.plan
        renamed = g.annotations.get("renamed", {})
        env, inputs, consts = {}, {}, {}
        for t in g.inputs:
            a = np.ascontiguousarray(feeds[renamed.get(t.name, t.name)], dtype=t.dtype.np)
            env.update({d: n for d, n in zip(t.shape, a.shape) if isinstance(d, IntVar)})
            inputs[id(t)] = _buffer(a.nbytes)
            inputs[id(t)][:a.nbytes] = a.reshape(-1).view(np.uint8)
        arena = _buffer(plan.arena_bytes)
        outputs, out_of = {}, {}
        for name, t in g.outputs.items():
            shape = tuple(d.evaluate(env) for d in t.shape)
            outputs[name] = (_buffer(int(np.prod(shape)) * t.dtype.itemsize), shape, t.dtype)
            if t.producer is not None:
                out_of.setdefault(id(t), name)

        def ptr(t) -> int:  # as codegen/program.py resolves storage
            if isinstance(t, OutputRef):
                return outputs[t.name][0].ctypes.data
            if id(t) in out_of:
                return outputs[out_of[id(t)]][0].ctypes.data
            if t in plan.offsets:
                return arena.ctypes.data + plan.offsets[t]
            ext = plan.external(t)
            if id(ext) in inputs:
                return inputs[id(ext)].ctypes.data
            if id(ext) in out_of:
                return outputs[out_of[id(ext)]][0].ctypes.data
            if id(ext) not in consts:
                v = np.ascontiguousarray(ext.value, dtype=ext.dtype.np)
                consts[id(ext)] = _buffer(v.nbytes)
                consts[id(ext)][:v.nbytes] = v.reshape(-1).view(np.uint8)
            return consts[id(ext)].ctypes.data

        err = ctypes.create_string_buffer(4096)
        for c in self.calls:
            ptrs = [ptr(t) for t in c.ptrs]
            dims = [0 if isinstance(d, str) else as_dim(d).evaluate(env) for d in c.dims]
            if _is_byte_copy(c.spec):
                if ptrs[0] != ptrs[1]:
                    ctypes.memmove(ptrs[0], ptrs[1], dims[0])
                continue
            p = (ctypes.c_void_p * len(ptrs))(*ptrs)
            d = (ctypes.c_int64 * max(len(dims), 1))(*dims)
            if getattr(self.lib, f"emu_{c.spec.func}")(p, d, err, ctypes.c_size_t(len(err))):
                raise RuntimeError(f"{c.op}: {err.value.decode()}")
        v = (ctypes.c_int64 * 3)()
        if self.lib.emu_bad_input(v, err, ctypes.c_size_t(len(err))):
            raise IndexError(f"{err.value.decode()}: index {v[0]} (at flat position {v[1]}) is out of range "
                             f"for size {v[2]}")
        return {k: np.frombuffer(b[:int(np.prod(s)) * dt.itemsize].tobytes(), dt.np).reshape(s)
                for k, (b, s, dt) in outputs.items()}
