"""The ROCm build without an AMD GPU: flags and archs (gfx942 only where hipcc takes it), hipcc
through ninja and the object cache (HIP_PLATFORM set by the build, a key that needs no GPU),
libraries for gfx90a and gfx940 with AMDGPU code objects, model.json, the warm rebuild, typed
errors for a missing hipcc / CK / unknown arch / absent GPU, and `aitgen compile --target rocm`.

Cheap: the copy-only model builds four objects (about 8 s cold on 2 cores, shared by every test
here through one cache); Composable Kernel instances are the rocm_compile tier's."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen import build as build_mod
from aitgen.codegen import locate
from aitgen.codegen.backend import load_backend
from aitgen.compiler import pick_target
from aitgen.errors import DeviceError, TargetError, ToolchainError
from aitgen.runtime import device

ARCHS = ("gfx90a", "gfx940")


def copies(ub: int = 8):
    """Device-to-device copies only (the kernels every backend has): an input and a constant
    returned as outputs, and a reshape of the input that needs a buffer of its own."""
    import numpy as np
    x = ag.Tensor([ag.IntVar("b", 1, ub), 4], name="x")
    c = ag.constant(np.arange(4, dtype=np.float32), name="c")
    return {"y": x, "c": c, "flat": ops.reshape(x, [-1])}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("rocm_cache")


@pytest.fixture(scope="module")
def built(rocm_toolchain, cache, tmp_path_factory):
    """arch -> a workdir holding the copy-only model built for it (no GPU, load=False)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AITGEN_CACHE_DIR", str(cache))
    try:
        root = tmp_path_factory.mktemp("rocm_builds")
        return {a: ag.compile_model(copies(), target="rocm", arch=a, workdir=root / a, load=False) for a in ARCHS}
    finally:
        mp.undo()


def _meta(work: Path) -> dict:
    return json.loads((work / "model.json").read_text())


def _report(work: Path) -> dict:
    return json.loads((work / "report.json").read_text())


# -- flags and archs: no compile ------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_flags_per_arch(rocm_toolchain, arch):
    flags = load_backend("rocm").compile_flags(arch)
    for f in ("-std=c++17", "-O3", "-DNDEBUG", "-fPIC", "-fvisibility=hidden", f"--offload-arch={arch}"):
        assert f in flags
    assert [f for f in flags if f.startswith("--offload-arch")] == [f"--offload-arch={arch}"]   # one arch per build
    ck = locate.ck()
    for d in ck.include_dirs:   # CK as system headers, its pin in the flags (so in every cache key)
        assert flags[flags.index(str(d)) - 1] == "-isystem"
    assert f"-DAITGEN_CK_PIN={ck.version}" in flags
    # the shared headers and the HIP twins (gpu_dialect.h, gpu_runtime_api.h); never CUDA's
    incs = [f for f in flags if f.startswith("-I")]
    assert any(f.endswith("gpu/include") for f in incs) and any(f.endswith("rocm/include") for f in incs)
    assert not any(f.endswith("cuda/include") for f in incs)


def test_arch_resolution():
    rocm = load_backend("rocm")
    none = lambda: None  # noqa: E731 - no GPU answers
    assert rocm.resolve_arch(None, none) == "gfx90a"
    assert rocm.resolve_arch("gfx940", none) == "gfx940"
    assert rocm.resolve_arch("mi250x", none) == "gfx90a"
    assert rocm.resolve_arch(None, lambda: "gfx940") == "gfx940"        # a present GPU's gfx ISA
    with pytest.raises(TargetError, match="gfx908"):
        rocm.resolve_arch(None, lambda: "gfx908")
    with pytest.raises(TargetError, match="sm_80"):
        rocm.resolve_arch("sm_80", none)
    assert device.gfx_name("gfx90a:sramecc+:xnack-") == "gfx90a"
    # model.json's device_archs is keyed by gfx name, so the loader checks a device without hipcc
    assert dict(rocm.capabilities)["gfx90a"] == "gfx90a"


def test_gfx942_only_where_hipcc_takes_it(rocm_toolchain):
    rocm = load_backend("rocm")
    takes = locate.accepts_arch(locate.hipcc(), ["--offload-arch=gfx942"])
    assert locate.accepts_arch(locate.hipcc(), ["--offload-arch=gfx90a"])   # the probe can say yes
    if takes:
        assert rocm.resolve_arch("gfx942", lambda: None) == "gfx942"
    else:   # HIP 5.2 / clang 15 (Debian 12)
        with pytest.raises(TargetError, match="clang >= 17"):
            rocm.resolve_arch("mi300x", lambda: None)


def test_unknown_arch_is_a_target_error_before_any_work(tmp_path):
    with pytest.raises(TargetError, match="gfx90a"):
        ag.compile_model(copies(), target="rocm", arch="sm_90a", workdir=tmp_path / "m", load=False)
    assert not (tmp_path / "m").exists()


def test_hipcc_version_needs_no_gpu(rocm_toolchain):
    # `hipcc --version` prints a rocm_agent_enumerator traceback without a driver: the cache key
    # takes stdout only (HIP and clang versions) and names the platform the build sets.
    tool = locate.hipcc()
    assert "HIP version" in tool.version and "clang version" in tool.version_text
    assert "Traceback" not in tool.version_text and "InstalledDir" not in tool.version_text   # no path of this machine
    assert dict(tool.env) == {"HIP_PLATFORM": "amd"}
    src = build_mod.Source("k.hip", "int x;\n")
    assert build_mod.ObjectCache.key(src, tool, ["-O3"]) == build_mod.ObjectCache.key(src, locate.hipcc(), ["-O3"])


# -- builds (hipcc, no GPU) -----------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_build_for_arch(built, arch):
    work = built[arch]
    meta = _meta(work)
    assert (meta["target"], meta["arch"]) == ("rocm", arch)
    assert meta["device_archs"] == {"gfx90a": "gfx90a", "gfx940": "gfx940", "gfx942": "gfx942"}
    assert meta["cuda_graph"] is False   # a dynamic batch: no graph by default
    report = _report(work)
    assert (report["num_kernels"], report["unique_kernels"]) == (3, 1)
    names = sorted(p.name for p in (work / "obj" / "src").iterdir())
    assert names == sorted([f"{report['kernels'][0]['func']}.hip", "model.hip", "model_container.cpp",
                            "gpu_runtime.cu"])
    lib = work / meta["library"]
    dyn = subprocess.run(["readelf", "-d", "--dyn-syms", "-W", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    assert "libamdhip64.so" in dyn                                   # the HIP runtime, not CUDA's
    assert "cudaMalloc" not in dyn and "hipMemcpyAsync" in dyn and "hipGraphLaunch" in dyn
    exported = {ln.split()[-1] for ln in dyn.splitlines() if " DEFAULT " in ln and " UND " not in ln}
    assert {"ait_model_create", "ait_model_run", "ait_last_error"} <= exported
    assert not any(s.startswith("_ZN3ait") for s in exported)        # hidden visibility holds


def test_objects_differ_per_arch(built):
    # the arch is in every compile's flags, so nothing of a gfx90a build is reused for gfx940
    assert _report(built["gfx940"])["cache_misses"] == 4


@pytest.mark.parametrize("arch", ARCHS)
def test_kernels_carry_amdgpu_code_objects(rocm_toolchain, tmp_path, arch):
    """The backend's compiler and flags through build(): a HIP kernel becomes a .hip_fatbin with a
    code object for the build's arch and no other."""
    backend = load_backend("rocm")
    src = build_mod.Source("scale.hip", textwrap.dedent("""
        #include <hip/hip_runtime.h>
        __global__ void scale(float* p, float s, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) p[i] *= s;
        }
        extern "C" __attribute__((visibility("default"))) int launch(float* p, int n) {
          hipLaunchKernelGGL(scale, dim3((n + 255) / 256), dim3(256), 0, 0, p, 2.0f, n);
          return hipGetLastError() == hipSuccess ? 0 : 1;
        }
    """))
    res = build_mod.build([src], tmp_path / "k.so", compiler=backend.tool(), flags=backend.compile_flags(arch),
                          link_flags=backend.link_flags(), workdir=tmp_path / "w", cache_dir=tmp_path / "c",
                          progress=False)
    sections = subprocess.run(["readelf", "-S", "-W", str(res.out_so)], capture_output=True, text=True).stdout
    assert ".hip_fatbin" in sections
    blob = res.out_so.read_bytes()
    other = next(a for a in ARCHS if a != arch)
    assert f"amdgcn-amd-amdhsa--{arch}".encode() in blob and f"amdgcn-amd-amdhsa--{other}".encode() not in blob


def test_ck_headers_compile_with_the_backend_flags(rocm_toolchain, tmp_path):
    """uses_ck: the located CK (include/ and library/include/) compiles under the backend's flags
    and hipcc, a CK element-wise functor inside a kernel (headers only, a few seconds; a device op
    instance is the rocm_compile tier's)."""
    backend = load_backend("rocm")
    src = build_mod.Source("ck_probe.hip", textwrap.dedent("""
        #include <hip/hip_runtime.h>
        #include "ck/ck.hpp"
        #include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"
        #include "ck/library/utility/check_err.hpp"
        __global__ void relu(ck::half_t* y, const ck::half_t* x) {
          ck::tensor_operation::element_wise::Relu{}(y[threadIdx.x], x[threadIdx.x]);
        }
    """))
    res = build_mod.build([src], tmp_path / "ck.so", compiler=backend.tool(), flags=backend.compile_flags("gfx90a"),
                          link_flags=backend.link_flags(), workdir=tmp_path / "w", cache_dir=tmp_path / "c",
                          progress=False)
    assert b"amdgcn-amd-amdhsa--gfx90a" in res.out_so.read_bytes()
    # -isystem keeps CK's headers out of the depfile (so out of the entry): its pin in the flags
    # is what tells objects of two CKs apart
    entry = json.loads(next((tmp_path / "c").rglob("*.entry")).read_bytes().split(b"\n", 1)[0])
    assert not any("/ck/" in d for d in entry["deps"])


@pytest.mark.parametrize("arch", ARCHS)
def test_own_kernels_build_into_amdgpu_code_objects(rocm_toolchain, cache, tmp_path, monkeypatch, arch):
    """A model of an own kernel (fused element-wise), once its ROCm family is registered: the
    library carries a .hip_fatbin for the build's arch."""
    from aitgen.codegen.lower import supported_kinds
    kinds = supported_kinds("rocm")
    if not {ag.OpKind.RELU, ag.OpKind.FUSED_ELEMENTWISE} <= kinds:
        pytest.skip("the ROCm element-wise family is not registered yet (aitgen/codegen/kernels/rocm/)")
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(cache))
    x = ag.Tensor([ag.IntVar("b", 1, 8), 64], name="x")
    work = ag.compile_model({"y": ops.relu(x) * 2.0}, target="rocm", arch=arch, workdir=tmp_path / "m", load=False)
    lib = work / _meta(work)["library"]
    sections = subprocess.run(["readelf", "-S", "-W", str(lib)], capture_output=True, text=True).stdout
    assert ".hip_fatbin" in sections
    assert f"amdgcn-amd-amdhsa--{arch}".encode() in lib.read_bytes()


def test_warm_rebuild_compiles_nothing(built, cache, tmp_path, monkeypatch):
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(cache))
    work = ag.compile_model(copies(), target="rocm", arch="gfx90a", workdir=tmp_path / "again", load=False)
    report = _report(work)
    assert (report["cache_hits"], report["cache_misses"]) == (4, 0)
    assert _meta(work)["library"] == _meta(built["gfx90a"])["library"]   # same sources and flags, same name


def test_cli_compile_target_rocm(built, cache, cli_copy_model, tmp_path, capsys, monkeypatch):
    from aitgen.cli import main
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(cache))
    work = tmp_path / "w"
    assert main(["compile", cli_copy_model, "--target", "rocm", "--arch", "gfx940", "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    meta = _meta(work)
    assert (meta["target"], meta["arch"]) == ("rocm", "gfx940") and (work / meta["library"]).is_file()
    assert "target rocm gfx940" in out
    assert _report(work)["cache_misses"] == 1   # the run sequence; copy, container, runtime from the cache


def test_cli_rejects_a_cuda_arch_for_rocm(tmp_path):
    from aitgen.cli import main
    with pytest.raises(SystemExit, match="unknown arch 'sm_80' for target rocm.*gfx90a, gfx940"):
        main(["compile", "zoo:resnet50", "--target", "rocm", "--arch", "sm_80", "--workdir", str(tmp_path / "w")])
    assert not (tmp_path / "w").exists()   # refused before any work


# -- typed errors -------------------------------------------------------------------------------

def test_missing_hipcc_is_a_toolchain_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    if Path("/opt/rocm/bin/hipcc").exists():
        pytest.skip("/opt/rocm/bin/hipcc exists: hipcc cannot be hidden")
    with pytest.raises(ToolchainError, match="apt-get install .*hipcc"):
        locate.hipcc()


def test_missing_ck_is_a_toolchain_error(monkeypatch, tmp_path):
    monkeypatch.setenv("AITGEN_CK_HOME", str(tmp_path))            # set, but holds no CK: never falls through
    with pytest.raises(ToolchainError, match="AITGEN_CK_HOME.*b076a02"):
        locate.ck()
    monkeypatch.delenv("AITGEN_CK_HOME")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    monkeypatch.setattr(locate, "PROJECT_ROOT", tmp_path / "a" / "b")
    locate._ck.cache_clear()
    try:
        if locate._ck_at(Path("/opt/rocm/include"), "") is not None:
            pytest.skip("ROCm's own CK is installed: it cannot be hidden")
        with pytest.raises(ToolchainError, match="not found.*AITGEN_CK_HOME"):
            locate.ck()
    finally:
        locate._ck.cache_clear()


def test_ck_search_order(monkeypatch, tmp_path):
    """AITGEN_CK_HOME first; then ROCm's include dir; then shared/3rdparty beside the checkout."""
    def fake_ck(root: Path, checkout: bool) -> Path:
        inc = root / "include" if checkout else root
        (inc / "ck").mkdir(parents=True)
        (inc / "ck" / "ck.hpp").write_text("// ck\n")
        return root
    shared = fake_ck(tmp_path / "shared" / "3rdparty" / "composable_kernel", True)
    (shared / "library" / "include" / "ck" / "library").mkdir(parents=True)
    (shared / "PIN.md").write_text("at commit b076a02ad25892192be9fefb08a53e89fa48160c\n")
    rocm = tmp_path / "rocm"
    monkeypatch.setattr(locate, "PROJECT_ROOT", tmp_path / "checkout")
    monkeypatch.delenv("AITGEN_CK_HOME", raising=False)
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    locate._ck.cache_clear()
    try:
        if locate._ck_at(Path("/opt/rocm/include"), "") is None:
            found = locate.ck()
            assert found.origin == "shared/3rdparty" and found.version == "b076a02ad258"
            assert found.include_dirs == (shared / "include", shared / "library" / "include")
        fake_ck(rocm / "include", False)
        locate._ck.cache_clear()
        assert locate.ck().origin == f"ROCm ({rocm})" and locate.ck().include_dirs == (rocm / "include",)
        home = fake_ck(tmp_path / "home", True)
        monkeypatch.setenv("AITGEN_CK_HOME", str(home))
        found = locate.ck()
        assert found.origin == "AITGEN_CK_HOME" and found.version.startswith("ckhpp-")   # no PIN.md: a digest
    finally:
        locate._ck.cache_clear()


def test_load_without_an_amd_gpu_is_a_device_error(built):
    if device.rocm_available():
        pytest.skip("an AMD GPU answers here")
    with pytest.raises(DeviceError, match="ROCm model"):
        ag.Model.load(built["gfx90a"])


def test_auto_picks_rocm_where_an_amd_gpu_answers(monkeypatch):
    monkeypatch.setattr(device, "cuda_available", lambda: False)
    monkeypatch.setattr(device, "rocm_available", lambda: True)
    assert pick_target("auto") == "rocm"
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    assert pick_target("auto") == "cuda"      # both present: CUDA, as before
    monkeypatch.setattr(device, "cuda_available", lambda: False)
    monkeypatch.setattr(device, "rocm_available", lambda: False)
    assert pick_target("auto") == "cpu"


def test_rocm_probe_is_cheap_without_a_driver(monkeypatch):
    monkeypatch.setattr(device, "KFD", "/nonexistent/kfd")
    device._probe_rocm.cache_clear()
    try:
        count, why = device._probe_rocm()
        assert count == 0 and "/nonexistent/kfd" in why
    finally:
        device._probe_rocm.cache_clear()


# -- the mock device: the host side of a ROCm build, run with no GPU ------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_mock_run(built, arch):
    """The mock variant (gpu/mock compiled for HIP) runs the whole host side: container, constant
    upload, dim binding, the copies; its launch log and copies are checked, outputs are real for
    copies (the mock's memory is host memory)."""
    import numpy as np
    work = built[arch]
    meta = _meta(work)
    assert meta["mock"]["runtime"] == "libaitgen_mock_hiprt.so"
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    with ag.Model.load(work, mock_device=True) as m:
        out = m.run({"x": x})
        np.testing.assert_array_equal(out["y"], x)          # exact: a copy
        np.testing.assert_array_equal(out["flat"], x.reshape(-1))
        np.testing.assert_array_equal(out["c"], np.arange(4, dtype=np.float32))
        run = m.mock_run()
        assert not run.failures, run.failures
        with pytest.raises(ag.errors.AitgenError):   # a bad call names the input and leaves the model usable
            m.run({"x": x[:, :3]})
        np.testing.assert_array_equal(m.run({"x": x})["y"], x)
    proc = subprocess.run([sys.executable, "-m", "aitgen", "run", str(work), "--mock-device"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "all checks passed" in proc.stdout


HOSTILE = 'x"\\\n*/ #include <cstdlib>\nint f(){system("rm -rf /");}'


def test_hostile_names_reach_cpp_escaped(rocm_toolchain, tmp_path):
    """Tensor and op names from a user reach the ROCm build's C++ only as escaped literals: the build
    compiles, runs on the mock, keeps the names, and a bad call names the input and leaves the model usable."""
    import numpy as np
    x = ag.Tensor([ag.IntVar("b", 1, 8), 4], name=HOSTILE)
    y = ops.relu(x)
    y.name = HOSTILE + "_out"
    work = ag.compile_model({HOSTILE + "_out": y}, target="rocm", arch="gfx90a", workdir=tmp_path / "h", load=False)
    src = (work / "obj" / "src" / "model.hip").read_text()
    assert "\n*/ #include" not in src and "#include <cstdlib>\nint f()" not in src   # only escaped (\\n) in a literal
    v = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    with ag.Model.load(work, mock_device=True) as m:
        assert list(m.input_specs) == [HOSTILE]
        m.run({HOSTILE: v})
        assert not m.mock_run().failures
        with pytest.raises(ag.errors.AitgenError, match="rm -rf"):
            m.run({HOSTILE: v[:, :3]})
        m.run({HOSTILE: v})
