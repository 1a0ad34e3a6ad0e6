"""The `rocm_compile` tier of the ROCm grouped GEMM (-m rocm_compile or AITGEN_RUN_ROCM_COMPILE=1):
hipcc builds gemm_ck_grouped.hip.j2 for gfx90a and the code object is read back (MFMAs, the
functor, ONE kernel whose descriptors are one by-value argument within 4 KB, no hipMemcpy); CK's
own IsSupportedArgument and CheckValidity run on the host over the arguments the template builds,
with the descriptor sizes the Python bound assumes; and a model of parallel linear layers built for
ROCm runs on the mock device, eagerly and replayed as a HIP graph, with ONE launch for the group
whose every pointer (inside the by-value struct) the mock checks. Render level: test_rocm_grouped.py."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import aitgen as ag
from aitgen.codegen.backend import load_backend
from aitgen.codegen.kernels.rocm import grouped as grouped_k
from aitgen.runtime.hsaco import kernels_of_code_object

from ck_helpers import compile_ck, device_asm, exported, hip_env, hipcc, lowered, source
from test_rocm_ck_objects import ACCEPT_MAIN
from test_rocm_grouped import towers

pytestmark = pytest.mark.rocm_compile


def test_grouped_gemm_compiles_to_one_mfma_kernel_with_by_value_descriptors(tmp_path):
    (call,) = lowered(towers(3))[1]
    p = call.spec.param_dict()
    obj = compile_ck(call, tmp_path, "gfx90a")
    assert call.spec.func in exported(obj)
    undefined = subprocess.run(["nm", "-u", str(obj)], check=True, capture_output=True, text=True).stdout
    assert "hipLaunchKernel" in undefined and "hipMemcpy" not in undefined   # no descriptor copy: capturable
    asm = device_asm(obj, "gfx90a", tmp_path)
    kernels = re.findall(r"^[0-9a-f]+ <(_Z\w+)>:", asm, re.M)
    assert len(kernels) == 1 and "kernel_grouped_gemm_by_value" in kernels[0] and "EpilogueFn" in kernels[0]
    assert len(re.findall(r"v_mfma_f32_32x32x8f16", asm)) >= 16
    assert re.search(r"0xbf3504f3|0x3f3504f3", asm)          # GELU's 1/sqrt(2): the functor is inside
    (info,) = kernels_of_code_object((tmp_path / "gfx90a.co").read_bytes())
    # two arguments: the descriptors (3 members of bias + residual: 784 bytes each, and the count)
    # and the empty CDE functor; all within the 4 KB the runtime guarantees
    assert [size for _, size in info.params] == [3 * 784 + 8, 1] and info.param_bytes <= 4096
    assert p["inst"]["block"] <= info.max_threads     # CK's launch bounds (256) admit the tile's threads


ACCEPT = r"""
template <typename I>
void report(const char* tag, void* const* ptrs, const int64_t* d, int groups) {
  auto arg = I::make_argument(ptrs, d);
  std::printf("%s %d %zu %zu %d", tag, I::Instance::IsSupportedArgument(arg) ? 1 : 0,
              sizeof(typename I::Instance::GemmBiasTransKernelArg), arg.gemm_desc_kernel_arg_.size(), arg.grid_size_);
  for (const auto& desc : arg.gemm_desc_kernel_arg_) {
    const auto& a = desc.a_grid_desc_ak0_m_ak1_;
    const int k = a.GetLength(ck::Number<0>{}) * a.GetLength(ck::Number<2>{});
    std::printf(" %d", I::Instance::GridwiseGemm::CalculateHasMainKBlockLoop(k) ? 1 : 0);
  }
  std::printf("\n");
}
"""


def test_ck_itself_accepts_what_the_grouped_template_builds(tmp_path):
    """CK's IsSupportedArgument (each member's CheckValidity ran in its Argument; the device's name
    interposed as gfx90a) on the argument make_argument builds from the call's real dims; CK's
    own HasMainKBlockLoop per member equals the launch's (Python's k_loop); the descriptor sizes
    stay within members_per_launch's bound. Controls: a member whose K the A vectors do not divide
    is refused, as is a member of another K-loop kind (CK's kernel needs one per launch)."""
    cc = hipcc()
    m = ag.IntImm(100)
    calls = [lowered(towers(3, m=m))[1][0],                          # bias + residual: 2 D tensors
             lowered(towers(2, m=m, ks=[256, 100]))[1][0],           # A 4-wide for both
             lowered(towers(4, m=m, ks=[16, 32, 16, 32]))[1][0],     # one K block each: no main loop
             lowered(towers(7, m=m, n=64))[1][0]]                    # five members: the bound for 2 Ds
    pars = [c.spec.param_dict() for c in calls]
    assert [p["groups"] for p in pars] == [3, 2, 4, 5] and [p["main_loop"] for p in pars] == [True, True, False, True]
    units, lines = [], []
    for j, call in enumerate(calls):
        src = source(call)
        units.append(f"namespace t{j} {{\n{src[:src.index('AIT_KERNEL')]}\n}}\n")
        lines.append(f"  const int64_t d{j}[] = {{{', '.join(str(int(d)) for d in call.dims)}}};")
        lines.append(f'  report<Unit{j}>("t{j}", ptrs, d{j}, {pars[j]["groups"]});')
    # controls: t0's problem with member 1's K (and lda, ldb: A row-, B column-major) 100, which
    # its 8-wide A vectors do not divide; t2's with member 0's K 64 (two K blocks: a main loop)
    for tag, base, member, k in (("c0", 0, 1, 100), ("c1", 2, 0, 64)):
        at = member * pars[base]["dims"] + 2
        lines.append(f"  int64_t {tag}[sizeof d{base} / sizeof d{base}[0]];\n  std::memcpy({tag}, d{base}, sizeof {tag});\n"
                     f"  {tag}[{at}] = {tag}[{at + 1}] = {tag}[{at + 2}] = {k};")
        lines.append(f'  report<Unit{base}>("{tag}", ptrs, {tag}, {pars[base]["groups"]});')
    wrappers = "".join(f"struct Unit{j} {{ using Instance = t{j}::Instance; static auto make_argument(void* const* p, "
                       f"const int64_t* d) {{ return t{j}::make_argument(p, d); }} }};\n" for j in range(len(calls)))
    main = ACCEPT_MAIN.replace("void* ptrs[16] = {};", "void* ptrs[64] = {};") % "\n".join(lines)
    main = main.replace("#define ACCEPTS", "#define UNUSED_ACCEPTS")
    main = main.replace("int main() {", ACCEPT + wrappers + "int main() {")
    path = tmp_path / "accept_grouped.hip"
    headers = ["aitgen/ck_grouped.hpp", "cstdio", "cstring"]
    path.write_text("".join(f"#include <{h}>\n" for h in headers) + "".join(units) + main)
    flags = [f for f in load_backend("rocm").compile_flags("gfx90a") if not f.startswith("--offload-arch")]
    r = subprocess.run([cc, *flags, "--cuda-host-only", str(path), "-o", str(tmp_path / "accept")],
                       capture_output=True, text=True, env=hip_env())
    assert r.returncode == 0, r.stderr[-4000:]
    out = subprocess.run([str(tmp_path / "accept")], capture_output=True, text=True, check=True).stdout
    rows = {ln.split()[0]: [int(v) for v in ln.split()[1:]] for ln in out.splitlines()}
    for j, p in enumerate(pars):
        ok, desc, n, grid, *loops = rows[f"t{j}"]
        n_d = len(p["ds"])
        assert ok == 1 and n == p["groups"], (j, rows[f"t{j}"])
        assert loops == [int(p["main_loop"])] * n                       # CK agrees with k_loop
        assert desc <= grouped_k.DESC_BYTES + grouped_k.D_BYTES * n_d
        assert grouped_k.members_per_launch(n_d) * desc + 8 <= grouped_k.KERNEL_ARG_BYTES
        n_of = calls[j].dims[1::p["dims"]]
        tiles = -(-100 // p["inst"]["m"]) * sum(-(-int(nn) // p["inst"]["n"]) for nn in n_of)
        assert grid == tiles
    assert rows["c0"][0] == 0                                             # CK refuses 8-wide A on K = 100
    assert rows["c1"][0] == 1 and rows["c1"][4:] == [1, 0, 0, 0]          # accepted, but the loop kinds differ


def test_grouped_model_runs_on_the_mock_as_one_launch(rocm_toolchain, tmp_path, monkeypatch):
    """Three parallel linear layers (bias + GELU + residual) built for gfx90a: the host side on the
    mock device, eagerly and replayed as a HIP graph, is ONE launch for the group (nothing is
    copied to the device before it: the descriptors are its argument) of the grid CK's tile map
    gives, and every word of the by-value descriptors that is a device address is one of the
    members' live buffers: 3 x (out, x, W, bias, residual), x shared, so 13 distinct."""
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(tmp_path / "cache"))
    outs = towers(3)
    work = ag.compile_model(outs, target="rocm", arch="gfx90a", workdir=tmp_path / "towers", load=False)
    (call,) = lowered(outs)[1]
    inst = call.spec.param_dict()["inst"]
    rng = np.random.default_rng(0)
    m = 100
    feeds = {"x256": rng.standard_normal((m, 256)).astype(np.float16)}
    feeds.update({f"r{i}": rng.standard_normal((m, 512)).astype(np.float16) for i in range(3)})
    for graph in (False, True):
        with ag.Model.load(work, mock_device=True, cuda_graph=graph) as model:
            for _ in range(3 if graph else 1):
                out = model.run(feeds)
            assert {k: v.shape for k, v in out.items()} == {f"y{i}": (m, 512) for i in range(3)}
            run = model.mock_run()
            assert not run.failures, run.failures
            (launch,) = run.launches
            assert "kernel_grouped_gemm_by_value" in launch.kernel and launch.from_graph == graph
            assert launch.grid == (3 * -(-m // inst["m"]) * -(-512 // inst["n"]), 1, 1)
            assert launch.block == (inst["block"], 1, 1)
            assert len(launch.pointers) == 15 and len(set(launch.pointers)) == 13
