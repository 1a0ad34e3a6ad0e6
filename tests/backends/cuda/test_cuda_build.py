"""The CUDA build without a GPU: flags per arch, arch resolution, the rendered run sequence (golden),
one translation unit per unique kernel through the content cache, what the library exports,
compile failures as BuildError with the nvcc command, and `aitgen compile --target cuda`."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen import build as build_mod
from aitgen.codegen import locate
from aitgen.codegen.backend import load_backend
from aitgen.codegen.lower import LowerContext, lower_graph, lowering
from aitgen.codegen.spec import KernelCall, KernelSpec
from aitgen.compiler import compile_options
from aitgen.errors import BuildError
from aitgen.memory import plan_memory
from cuda_helpers import copies

GENCODE = {"sm_80": "-gencode=arch=compute_80,code=sm_80", "sm_90a": "-gencode=arch=compute_90a,code=sm_90a"}


# -- flags and arch: no compiler runs ---------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_flags_per_arch(cuda_toolchain, arch):
    flags = load_backend("cuda").compile_flags(arch)
    for f in ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC,-fvisibility=hidden",
              GENCODE[arch]):
        assert f in flags
    assert not any(f.endswith("code=sm_90") or "compute_90," in f for f in flags)  # never plain sm_90
    assert [f for f in flags if "-gencode" in f] == [GENCODE[arch]]                # one arch per build
    for d in locate.cutlass().include_dirs:   # CUTLASS as system headers
        i = flags.index(str(d))
        assert flags[i - 1] == "-isystem"


def test_arch_resolution():
    cuda = load_backend("cuda")
    none = lambda: None  # noqa: E731 - no GPU answers
    assert cuda.resolve_arch(None, none) == "sm_80"
    assert cuda.resolve_arch("sm_90", none) == "sm_90a"      # plain sm_90 is never built
    assert cuda.resolve_arch("sm_90a", none) == "sm_90a"
    assert cuda.resolve_arch(None, lambda: (9, 0)) == "sm_90a"
    assert cuda.resolve_arch(None, lambda: (8, 6)) == "sm_80"
    with pytest.raises(ValueError, match="7.5"):
        cuda.resolve_arch(None, lambda: (7, 5))
    with pytest.raises(ValueError, match="sm_70"):
        cuda.resolve_arch("sm_70", none)
    with pytest.raises(ValueError, match="takes no arch"):
        load_backend("cpu").resolve_arch("sm_80", none)
    assert load_backend("cpu").resolve_arch(None, none) is None


def test_lowerings_see_arch_and_options():
    seen = []

    @lowering("cuda_arch_probe", ag.OpKind.RELU)
    def probe(op, ctx: LowerContext):
        seen.append((ctx.arch, ctx.opts.allow_tf32, ctx.template("x.cu.j2")))
        return [KernelCall(KernelSpec.make("cuda/templates/copy.cu.j2"), [op.outputs[0], op.inputs[0]], [4], "relu")]

    x = ag.Tensor([4], name="x")
    opts = compile_options(target="cuda", allow_tf32=True)
    g = ag.Graph.from_outputs({"y": ops.relu(x)})
    lower_graph(g, plan_memory(g), "cuda_arch_probe", arch="sm_90a", opts=opts)
    assert seen == [("sm_90a", True, "cuda_arch_probe/templates/x.cu.j2")]


# -- builds (nvcc, no GPU) ----------------------------------------------------------------------

def test_rendered_model_golden(cuda_toolchain, tmp_path, golden):
    work = ag.compile_model(copies(), target="cuda", arch="sm_80", workdir=tmp_path / "m", load=False)
    golden("cuda_model_copies.cu", (work / "obj" / "src" / "model.cu").read_text())
    kernel = [p for p in (work / "obj" / "src").glob("k_*.cu")]
    assert len(kernel) == 1
    golden("cuda_copy_kernel.cu", kernel[0].read_text().replace(kernel[0].stem, "k_FUNC"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_build_without_gpu_returns_the_workdir(cuda_toolchain, tmp_path, arch):
    work = ag.compile_model(copies(), target="cuda", arch=arch, workdir=tmp_path / "m", load=False)
    assert isinstance(work, Path) and work == tmp_path / "m"
    meta = json.loads((work / "model.json").read_text())
    assert (meta["target"], meta["arch"]) == ("cuda", arch)
    assert meta["inputs"]["x"]["max_shape"] == [8, 4]
    assert (work / meta["library"]).is_file()
    report = json.loads((work / "report.json").read_text())
    assert (report["num_kernels"], report["unique_kernels"]) == (3, 1)
    names = sorted(p.name for p in (work / "obj" / "src").iterdir())
    assert names == sorted([f"{report['kernels'][0]['func']}.cu", "model.cu", "model_container.cpp",
                            "gpu_runtime.cu"])


def test_identical_kernels_compile_once(cuda_toolchain, tmp_path, monkeypatch):
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(tmp_path / "cache"))
    first = ag.compile_model(copies(8), target="cuda", arch="sm_80", workdir=tmp_path / "a", load=False)
    r1 = json.loads((first / "report.json").read_text())
    # one copy kernel for three calls, the run sequence, the container and the CUDA runtime
    assert (r1["cache_hits"], r1["cache_misses"]) == (0, 4)
    ninja = (first / "obj" / "build.ninja").read_text()
    assert ninja.count(GENCODE["sm_80"]) == 4 and "-DNDEBUG" in ninja
    # Another bound changes the run sequence only: the kernel and the static sources are cache hits.
    second = ag.compile_model(copies(16), target="cuda", arch="sm_80", workdir=tmp_path / "b", load=False)
    r2 = json.loads((second / "report.json").read_text())
    assert (r2["cache_hits"], r2["cache_misses"]) == (3, 1)


def test_library_exports_the_c_api_only(cuda_toolchain, tmp_path):
    work = ag.compile_model(copies(), target="cuda", arch="sm_80", workdir=tmp_path / "m", load=False)
    lib = work / json.loads((work / "model.json").read_text())["library"]
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert {"ait_model_create", "ait_model_run", "ait_model_set_option", "ait_last_error"} <= names
    # The static CUDA runtime stays private: a process with torch's libcudart loaded never mixes them.
    assert not [n for n in names if n.startswith(("cuda", "__cuda", "k_"))]
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
    assert "cudaMalloc" not in undefined


def test_compile_failure_names_the_nvcc_command(cuda_toolchain, tmp_path):
    cuda = load_backend("cuda")
    src = build_mod.Source("broken.cu", '#include "aitgen/cuda_kernel.cuh"\nAIT_KERNEL k_broken(void* const* p, '
                                        "const int64_t* d) { undefined_call(p); }\n")
    with pytest.raises(BuildError) as info:
        build_mod.build([src], tmp_path / "x.so", compiler=cuda.compiler, flags=cuda.compile_flags("sm_90a"),
                        link_flags=cuda.link_flags(), workdir=tmp_path / "obj", progress=False)
    err = info.value
    assert err.source == "broken.cu"
    assert "nvcc" in err.command and GENCODE["sm_90a"] in err.command
    assert "undefined_call" in str(err)


def test_cli_compile_for_cuda_without_a_gpu(cuda_toolchain, cli_copy_model, tmp_path, capsys):
    from aitgen.cli import main

    work = tmp_path / "w"
    assert main(["compile", cli_copy_model, "--target", "cuda", "--arch", "sm_90a", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    meta = json.loads((work / "model.json").read_text())
    assert meta["arch"] == "sm_90a" and (work / meta["library"]).is_file()
    assert "target cuda sm_90a" in out and "input  x: float32 max shape [8, 4]" in out
