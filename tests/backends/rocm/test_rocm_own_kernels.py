"""The ROCm backend's own kernels: the CUDA backend's, from one source (backends/gpu/templates,
codegen/kernels/gpu) in the HIP dialect (backends/rocm/include/aitgen/gpu_dialect.h), with a
64-lane wavefront wherever a warp appears. No AMD GPU is needed:

- Registration: ROCm lowers exactly the families CUDA lowers from kernels/gpu, with the same
  functions and the same template files; the geometry follows the dialect's warp size.
- The kernels' numbers: every case of the GPU tier (../cuda/test_gpu_own_ops.py CASES, not a copy)
  rendered for ROCm and run by the host emulator in its HIP form (../cuda/cuda_host_emu.h with
  AIT_EMU_HIP and 64-lane warps: HIP's mask-less shuffles, wave-wide barriers) against the oracle
  with the GPU tier's tolerances. A representative subset (every family in float16 and int32, plus
  bfloat16 norms and float32 reductions, ~15 s) in the default tier, the rest under `slow`.
- hipcc: one translation unit per dtype class with every family, for gfx90a (float16 in the
  default tier when hipcc is installed, ~5 s; float32 + integers and bfloat16 under
  `rocm_compile`); the object's AMDGPU code object holds a kernel per function at least, all
  wave64, shuffles as ds_bpermute. gfx940 under `rocm_compile`.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.kernels.gpu import dialect as gpu_dialect
from aitgen.codegen.kernels.gpu import norm as gpu_norm
from aitgen.codegen.kernels.rocm import attention as ck_attention
from aitgen.codegen.lower import _LOWERINGS, capabilities
from aitgen.codegen.render import render
from aitgen.ir.dtype import DType
from aitgen.ir.op import OpKind

CUDA_TESTS = Path(__file__).resolve().parents[1] / "cuda"
sys.path.insert(0, str(CUDA_TESTS))   # the emulator and the case list live beside the CUDA tests
import cuda_host_emu as emu  # noqa: E402
import test_cuda_own_kernels as cuda_own  # noqa: E402
import test_gpu_own_ops as gpu  # noqa: E402

BACKENDS = Path(__file__).resolve().parents[3] / "backends"


def _lowered(outs, target):
    return [c for c in emu.lower(outs, target=target)[2] if c.spec.template.startswith("gpu/")]


# -- registration and geometry ------------------------------------------------------------------------

def test_rocm_lowers_the_shared_families_with_the_same_functions():
    capabilities("cuda"), capabilities("rocm")   # imports both backends' packages
    shared = {(b, k): fn for (b, k), fn in _LOWERINGS.items()
              if fn.__module__.startswith("aitgen.codegen.kernels.gpu.")}
    cuda = {k: fn for (b, k), fn in shared.items() if b == "cuda"}
    rocm = {k: fn for (b, k), fn in shared.items() if b == "rocm"}
    # attention: each backend's own lowering picks its fused kernel (CUDA's tensor cores, ROCm's
    # Composable Kernel) or the shared SIMT one (kernels/cuda/attention.py, kernels/rocm/attention.py)
    assert len(cuda) >= 60 and cuda == rocm and OpKind.ATTENTION not in rocm
    assert _LOWERINGS[("rocm", OpKind.ATTENTION)].__module__ == "aitgen.codegen.kernels.rocm.attention"
    assert set(rocm) <= capabilities("rocm").kinds


def test_geometry_follows_the_wavefront():
    geo = lambda n, warp: gpu_norm.row_geometry(ag.IntImm(n), [DType.float16], warp)
    # 768 halves: 32 lanes of 24 values on CUDA, 64 lanes of 16 on CDNA
    assert (geo(768, 32)["warp_tpr"], geo(768, 32)["warp_items"]) == (32, 24)
    assert (geo(768, 64)["warp_tpr"], geo(768, 64)["warp_items"]) == (64, 16)
    # a warp takes rows up to 32 values per lane: 1024 elements on CUDA, 2048 on CDNA
    assert geo(1500, 32)["variants"] == ["block"] and geo(1500, 64)["variants"] == ["warp"]
    assert geo(128, 64)["warp_tpr"] == 16   # short rows still share a wavefront


def test_one_template_two_dialects():
    x = ag.Tensor([4, 768], dtype="float16", name="x")
    outs = {"sm": ops.softmax(x * 2.0, axis=-1), "arg": ops.argmax(x, axis=1), "cs": ops.cumsum(x, axis=1),
            "add": x + x}
    cuda, rocm = _lowered(outs, "cuda"), _lowered(outs, "rocm")
    assert [c.spec.template for c in cuda] == [c.spec.template for c in rocm]
    by_t = lambda calls: {c.spec.template.rsplit("/", 1)[-1]: c.spec for c in calls}
    c, r = by_t(cuda), by_t(rocm)
    assert c["softmax.cu.j2"].param_dict()["warp"] == 32 and r["softmax.cu.j2"].param_dict()["warp"] == 64
    assert c["elementwise.cu.j2"].param_dict()["pair"]["type"] == "__half2"
    assert r["elementwise.cu.j2"].param_dict()["pair"] is None   # HIP 5.2: no bfloat16 pair type
    src = {k: render(s.template, func=s.func, **s.param_dict()) for k, s in r.items()}
    assert "for (int m = 32; m > 0; m /= 2)" in src["arg_reduce.cu.j2"]        # butterfly over 64 lanes
    assert "ait::gpu::shfl(incl, 63)" in src["scan.cu.j2"]                      # the last lane's carry
    for text in src.values():   # nothing of CUDA's spelling reaches a ROCm kernel
        assert not re.search(r"cuda|__shfl_\w+_sync|0xffffffff", text), text[:200]
    assert gpu_dialect.DIALECTS["rocm"].warp == 64 and gpu_dialect.DIALECTS["cuda"].warp == 32


# -- the kernels' numbers, on the host (HIP form) ---------------------------------------------------------

_DEFAULT = {(c, dt) for c, dt in gpu.CASES if dt in ("float16", "int32")} | {
    (gpu.case_norms, "bfloat16"), (gpu.case_reductions, "float32")}
_SETS = [pytest.param([cd for cd in gpu.CASES if cd in _DEFAULT], id="subset"),
         pytest.param([cd for cd in gpu.CASES if cd not in _DEFAULT], id="rest", marks=pytest.mark.slow)]


@pytest.mark.parametrize("cases_dts", _SETS)
def test_kernels_emulated_in_hip_form(tmp_path, cases_dts):
    """The GPU tier's cases rendered for ROCm, compiled by g++ against the emulator's HIP form
    (64-lane warps), against the oracle with the GPU tier's tolerances."""
    built = []
    for case, dt in cases_dts:
        cases, envs, rtol_of = case(dt)
        built.append((dt, cases, envs, rtol_of, *emu.lower(cases.outs, target="rocm")))
    lib = emu.build([c for *_, calls in built for c in calls], tmp_path, target="rocm")
    for dt, cases, envs, rtol_of, graph, plan, calls in built:
        gpu.compare(cases, dt, emu.Emulated(graph, plan, calls, lib).run, envs, rtol_of)


def test_emulated_gather_reports_a_bad_index_in_hip_form(tmp_path):
    emb = ag.Tensor([10, 8], dtype="bfloat16", name="emb")
    idx = ag.Tensor([4], dtype="int64", name="idx")
    graph, plan, calls = emu.lower({"y": ops.gather(emb, idx, axis=0, name="lookup")}, target="rocm")
    model = emu.Emulated(graph, plan, calls, emu.build(calls, tmp_path, target="rocm"))
    e = (np.arange(80, dtype=np.float32).reshape(10, 8) / 8).astype(ag.DType("bfloat16").np)
    with pytest.raises(IndexError, match=r"gather 'lookup': index -11 \(at flat position 1\) is out of range for size 10"):
        model.run({"emb": e, "idx": np.array([0, -11, 3, 1], np.int64)})
    got = model.run({"emb": e, "idx": np.array([9, -10, 0, 1], np.int64)})["y"]
    np.testing.assert_array_equal(got.view(np.uint16), e[[9, 0, 0, 1]].view(np.uint16))


# -- hipcc ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hipcc():
    path = shutil.which("hipcc")
    if path is None:
        pytest.skip("hipcc not installed (Debian: apt-get install hipcc libamdhip64-dev)")
    return path


def _attention_cases(dt: str) -> dict:
    """Attention of every form the SIMT kernel renders: masks (additive, boolean), causal, a
    run-time head dim."""
    t = lambda shape, name, d=dt: ag.Tensor(shape, dtype=d, name=name)
    q, k = t([2, 4, 33, 64], "aq"), t([2, 4, 70, 64], "ak")
    qd = t([1, 2, 9, ag.IntVar("hd", 1, 64)], "qd")
    return {"attn_add": ops.scaled_dot_product_attention(q, k, k, t([2, 1, 1, 70], "am"), causal=True),
            "attn_bool": ops.scaled_dot_product_attention(q, k, k, ag.Tensor([2, 1, 33, 70], "bool", name="bm")),
            "attn_dyn": ops.scaled_dot_product_attention(qd, qd, qd)}


def _hipcc_families(hipcc: str, tmp: Path, dt: str, arch: str) -> tuple[dict, str]:
    """Every family of ours in dtype dt (and the integer cases with float32) as one translation
    unit, each kernel in a namespace of its own; returns the kernels and the code object's
    disassembly and notes."""
    outs = cuda_own.family_cases(dt, any_length_rows=dt == "float16")
    outs.update(_attention_cases(dt))
    if dt == "float32":
        outs.update(cuda_own.int_cases())
    specs = {c.spec.func: c.spec for c in _lowered(outs, "rocm")}
    srcs = {f: render(s.template, func=f, **s.param_dict()) for f, s in specs.items()}
    assert not [f for f, s in srcs.items() if "namespace ait" in s]
    unit = tmp / f"families_{dt}.cu"
    unit.write_text(cuda_own.PRELUDE + '#include "aitgen/gpu_attention.h"\n' + "".join(f"namespace u{i} {{\n{s}\n}}  // namespace u{i}\n"
                                               for i, s in enumerate(srcs.values())))
    obj = tmp / f"families_{dt}.o"
    cmd = [hipcc, "-std=c++17", "-O3", "-DNDEBUG", "-fPIC", f"--offload-arch={arch}",
           *(f"-I{BACKENDS / d}" for d in ("common/include", "gpu/include", "rocm/include")), "-c", str(unit), "-o", str(obj)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, "HIP_PLATFORM": "amd"})
    assert r.returncode == 0, f"hipcc failed on {unit}:\n{r.stderr[-6000:]}"
    assert "warning" not in r.stderr, r.stderr[-3000:]
    # The host side: every kernel's host function; the device side: the AMDGPU code object.
    host = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    assert set(srcs) <= set(re.findall(r" T (k_[0-9a-f]+)$", host, re.M))
    fat = tmp / f"families_{dt}.fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", str(obj), str(fat)], check=True)
    assert fat.stat().st_size > 0, "no .hip_fatbin section"
    bundler = shutil.which("clang-offload-bundler") or shutil.which("clang-offload-bundler-15")
    objdump = shutil.which("llvm-objdump-15") or shutil.which("llvm-objdump")
    readelf = shutil.which("llvm-readelf-15") or shutil.which("llvm-readelf")
    if not (bundler and objdump and readelf):
        pytest.skip("clang-offload-bundler / llvm-objdump / llvm-readelf missing: the code object is not inspected")
    co = tmp / f"families_{dt}.co"
    subprocess.run([bundler, "--type=o", f"--targets=hipv4-amdgcn-amd-amdhsa--{arch}", f"--input={fat}",
                    f"--output={co}", "--unbundle"], check=True)
    notes = subprocess.run([readelf, "--notes", str(co)], capture_output=True, text=True, check=True).stdout
    dis = subprocess.run([objdump, "-d", str(co)], capture_output=True, text=True, check=True).stdout
    return srcs, notes + dis


@pytest.mark.parametrize("dt", ["float16", pytest.param("float32", marks=pytest.mark.rocm_compile),
                                pytest.param("bfloat16", marks=pytest.mark.rocm_compile)])
def test_families_compile_gfx90a(hipcc, tmp_path, dt):
    """float16 with rows of any length in the default tier (~5 s alone); float32 with the integer
    cases, and bfloat16 (hip_bfloat16), under rocm_compile."""
    srcs, text = _hipcc_families(hipcc, tmp_path, dt, "gfx90a")
    assert len(srcs) >= 31
    waves = re.findall(r"\.wavefront_size:\s+(\d+)", text)
    kernels = re.findall(r"\.name:\s+(_Z\S+)", text)
    # a kernel (or several: packed/scalar, index types, row variants) per function, all wave64
    assert len(kernels) >= len(srcs) and set(waves) == {"64"} and len(waves) == len(kernels)
    assert "ds_bpermute_b32" in text and "s_barrier" in text   # shuffles and block barriers


@pytest.mark.rocm_compile
def test_families_compile_gfx940(hipcc, tmp_path):
    srcs, text = _hipcc_families(hipcc, tmp_path, "bfloat16", "gfx940")
    assert set(re.findall(r"\.wavefront_size:\s+(\d+)", text)) == {"64"}
    assert len(re.findall(r"\.name:\s+_Z", text)) >= len(srcs)


def test_blocks_hold_whole_wavefronts():
    """Every block size the shared lowerings pick is a multiple of both warp sizes, so block
    reductions (gpu_reduce.h block_reduce: blockDim.x a multiple of kWarpSize) hold on CDNA too."""
    from aitgen.codegen.kernels.gpu import elementwise, norm, reduce
    for threads in (elementwise.THREADS, reduce.ROW_BLOCK, norm.GROUP_BLOCK, reduce.COL_X * reduce.COL_Y):
        for d in gpu_dialect.DIALECTS.values():
            assert threads % d.warp == 0 and threads <= d.max_threads, (threads, d)


def test_golden_rocm_layernorm_and_argmax(golden):
    """The HIP-dialect rendering of a layernorm with a residual prologue (wave-wide rows) and an
    argmax (64-lane butterfly), for review next to ../../golden/cuda/own_layernorm_residual_f16.cu."""
    b = ag.IntVar("b", 1, 64)
    x = ag.Tensor([b, 128, 768], dtype="float16", name="x")
    r = ag.Tensor([b, 128, 768], dtype="float16", name="r")
    calls = _lowered({"ln": ops.layernorm(x + r), "arg": ops.argmax(x, axis=2)}, "rocm")
    srcs = {c.spec.template.rsplit("/", 1)[-1]: render(c.spec.template, func=c.spec.func, **c.spec.param_dict())
            for c in calls}
    golden("rocm/own_layernorm_residual_f16.cu", srcs["norm_rows.cu.j2"])
    golden("rocm/own_argmax_f16.cu", srcs["arg_reduce.cu.j2"])


# -- attention on the SIMT cores (HIP form) ------------------------------------------------------------

def test_attention_runs_on_the_host_in_hip_form(tmp_path, monkeypatch):
    """Every attention case of the CUDA host test (../cuda/test_cuda_attention_host.py), each on
    ROCm's SIMT kernel (64 keys per tile, one per lane of a wavefront): masks, causal, grouped
    heads, packed QKV views (aligned and not), run-time head dims and sequence lengths. The
    unmasked float16 case with grouped heads (f16_mqa) takes Composable Kernel, which the emulator
    cannot run: CK is turned off here so that the SIMT kernel, its fallback, is what runs."""
    import test_cuda_attention_host as attn
    c = attn._Cases()
    c.sdpa("f16_causal_bool", "float16", 1, 2, 40, 70, 64, mask="bool", causal=True)
    c.sdpa("bf16_add_d128", "bfloat16", 1, 1, 20, 130, 128, mask="add")
    c.sdpa("f16_mqa", "float16", 2, 2, 18, 18, 64, causal=True, kv_heads=1)
    c.packed("packed_bf16_odd", "bfloat16", 2, 21, 1, 64, 1, True)
    c.sdpa("f32_causal_add", "float32", 1, 2, 20, 40, 64, mask="add", causal=True)
    c.sdpa("f16_d48", "float16", 1, 2, 19, 35, 48, dv=32, mask="bool")
    c.sdpa("bf16_dyn_d", "bfloat16", 1, 2, 9, 33, ag.IntVar("d", 1, 64))
    for n, s in (("q", 9), ("k", 33), ("v", 33)):
        c.feeds[f"bf16_dyn_d_{n}"] = c.rng.standard_normal((1, 2, s, 24)).astype(ag.DType["bfloat16"].np)
    ck_routes = {cl.ptrs[1].name for cl in emu.lower(c.outs, target="rocm")[2] if "attention_ck" in cl.spec.template}
    assert ck_routes == {"f16_mqa_q"}   # packed_bf16_odd's views are not 16-byte aligned: SIMT anyway
    monkeypatch.setattr(ck_attention, "ck_refusal", lambda op, a: "the SIMT kernel under test")
    graph, plan, calls = emu.lower(c.outs, target="rocm")
    simt = [cl.spec.param_dict() for cl in calls if cl.spec.template == "gpu/templates/attention_simt.cu.j2"]
    assert len(simt) == 7 and {p["block_k"] for p in simt} == {64} and {p["warp"] for p in simt} == {64}
    model = emu.Emulated(graph, plan, calls, emu.build(calls, tmp_path, target="rocm"))
    attn._check(model.run(c.feeds), ag.reference.run(c.outs, c.feeds), c, "rocm")


def test_attention_beyond_the_lds_is_refused():
    q = ag.Tensor([1, 1, 8, 256], "float32", name="q")
    with pytest.raises(ag.errors.UnsupportedOpError, match="more than 65536"):
        emu.lower({"y": ops.scaled_dot_product_attention(q, q, q)}, target="rocm")
