"""Shared by the ROCm CK GEMM/conv tests: lowering for target "rocm", the problems they build,
and hipcc / code-object helpers (hipcc absent: skip with the command that installs it)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.backend import load_backend
from aitgen.codegen.lower import lower_graph
from aitgen.codegen.render import render
from aitgen.compiler import compile_options
from aitgen.ir.graph import Graph
from aitgen.memory import plan_memory
from aitgen.passes import PIPELINE, run_pipeline

LLVM = Path("/usr/lib/llvm-15/bin")


def hipcc() -> str:
    path = shutil.which("hipcc")
    if path is None:
        pytest.skip("hipcc absent: apt-get install -y --no-install-recommends hipcc libamdhip64-dev")
    return path


def hip_env() -> dict:
    return dict(os.environ, HIP_PLATFORM="amd")


def lowered(outs, arch="gfx90a"):
    opts = compile_options(target="rocm", arch=arch)
    g = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    return g, lower_graph(g, plan_memory(g, opts.caps), "rocm", arch=arch, opts=opts)


def source(call) -> str:
    return render(call.spec.template, func=call.spec.func, **call.spec.param_dict())


def _const(shape, rng, scale=0.1, dt="float16"):
    return ag.constant((rng.standard_normal(shape) * scale).astype(ag.DType(dt).np))


def ffn(m=None, k=256, n=512, dt="float16"):
    """gelu(x @ W^T + b) + residual: every transformer layer's GEMM."""
    rng = np.random.default_rng(0)
    m = m if m is not None else ag.IntVar("tokens", 1, 512)
    x = ag.Tensor([m, k], dtype=dt, name="x")
    r = ag.Tensor([m, n], dtype=dt, name="res")
    return {"y": ops.gelu(ops.linear(x, _const((n, k), rng, dt=dt), _const((n,), rng, dt=dt))) + r}


def conv_relu(c=32, k=64):
    rng = np.random.default_rng(1)
    x = ag.Tensor([2, 16, 16, c], dtype="float16", name="x")
    return {"y": ops.relu(ops.conv2d(x, _const((k, 3, 3, c), rng), _const((k,), rng), stride=1, padding=1))}


def broadcast_epilogues():
    """Epilogue operands no CK D tensor reads: one value per GEMM row (and a scalar), an SE
    block's per-image channel scale over a conv."""
    rng = np.random.default_rng(6)
    x = ag.Tensor([64, 256], dtype="float16", name="x")
    per_row = ag.Tensor([64, 1], dtype="float16", name="per_row")
    scalar = ag.Tensor([1], dtype="float16", name="scalar")
    y = ops.relu(ops.linear(x, _const((512, 256), rng), _const((512,), rng)) * per_row + scalar)
    img = ag.Tensor([2, 8, 8, 32], dtype="float16", name="img")
    se = ag.Tensor([2, 1, 1, 64], dtype="float16", name="se")
    z = ops.conv2d(img, _const((64, 3, 3, 32), rng), _const((64,), rng), padding=1) * se
    return {"y": y, "z": z}


def compile_ck(call, tmp: Path, arch: str) -> Path:
    cc = hipcc()
    path = tmp / f"{call.spec.func}.hip"
    path.write_text(source(call))
    obj = path.with_suffix(".o")
    r = subprocess.run([cc, *load_backend("rocm").compile_flags(arch), "-c", str(path), "-o", str(obj)],
                       capture_output=True, text=True, env=hip_env())
    assert r.returncode == 0, f"hipcc failed on {path}:\n{r.stderr[-6000:]}"
    return obj


def device_asm(obj: Path, arch: str, tmp: Path) -> str:
    """The gfx code object of `obj` (its .hip_fatbin, an offload bundle), disassembled."""
    for tool in ("objcopy", LLVM / "clang-offload-bundler", LLVM / "llvm-objdump"):
        if shutil.which(str(tool)) is None:
            pytest.skip(f"{tool} absent (binutils / llvm-15)")
    fat, co = tmp / "fat.bin", tmp / f"{arch}.co"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", str(obj), str(fat)], check=True)
    subprocess.run([str(LLVM / "clang-offload-bundler"), "--unbundle", "--type=o", f"--input={fat}",
                    f"--targets=hipv4-amdgcn-amd-amdhsa--{arch}", f"--output={co}"], check=True)
    return subprocess.run([str(LLVM / "llvm-objdump"), "-d", f"--mcpu={arch}", str(co)], check=True,
                          capture_output=True, text=True).stdout


def exported(obj: Path) -> set[str]:
    out = subprocess.run(["nm", "--defined-only", "-g", str(obj)], check=True, capture_output=True, text=True).stdout
    return {ln.split()[-1] for ln in out.splitlines() if " T " in ln}
