"""The compile layer: ninja-parallel compiles, the content-addressed object cache, errors, locators.

Every build here compiles tiny C++ files with g++ (a fraction of a second each). Each test links to
its own library name: glibc's dlopen hands back an already-loaded library for a path it has seen,
so reloading a rebuilt library under the same name in one process would test the old one.
"""
from __future__ import annotations

import ctypes
import importlib.metadata as md
import os
import shutil
import stat
import threading

import numpy as np
import pytest

from aitgen.codegen import build as B
from aitgen.codegen import locate
from aitgen.codegen.build import Source, build
from aitgen.errors import BuildError

FLAGS = ["-O1", "-fPIC"]

THREE = [
    Source("add.cpp", 'extern "C" int add(int a, int b) { return a + b; }\n'),
    Source("mul.cpp", 'extern "C" int mul(int a, int b) { return a * b; }\n'),
    Source("combo.cpp", 'extern "C" int add(int, int);\nextern "C" int mul(int, int);\n'
                        'extern "C" int combo(int a, int b) { return add(a, b) * mul(a, b); }\n'),
]


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def _build(tmp_path, cache, name, sources=THREE, flags=FLAGS, **kw):
    kw.setdefault("compiler", "g++")
    return build(sources, tmp_path / f"{name}.so", flags=flags, link_flags=kw.pop("link_flags", []),
                 workdir=kw.pop("workdir", tmp_path / "work"), cache_dir=cache, progress=False, **kw)


def _counting_compiler(tmp_path):
    """A g++ wrapper that logs every compile (-c), so a test can see that none ran."""
    log = tmp_path / "compiles.log"
    script = tmp_path / "counting-g++"
    script.write_text(f'#!/bin/sh\ncase " $* " in *" -c "*) echo "$*" >> "{log}";; esac\nexec g++ "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), (lambda: len(log.read_text().splitlines()) if log.exists() else 0)


def _entries(cache):
    return sorted(cache.rglob("*.entry"))


def test_three_sources_link_into_a_library_that_ctypes_calls(tmp_path, cache):
    res = _build(tmp_path, cache, "three")
    assert (res.cache_hits, res.cache_misses) == (0, 3)
    assert ctypes.CDLL(str(res.out_so)).combo(2, 3) == 30
    assert len(res.commands) == 4 and "-shared" in res.commands[-1]
    assert res.seconds > 0 and len(_entries(cache)) == 3


def test_rebuild_of_unchanged_sources_is_all_hits_and_runs_no_compile(tmp_path, cache):
    cc, compiles = _counting_compiler(tmp_path)
    _build(tmp_path, cache, "first", compiler=cc)
    assert compiles() == 3
    # A fresh workdir as well: hits come from the cache, not from objects left in the workdir.
    res = _build(tmp_path, cache, "second", compiler=cc, workdir=tmp_path / "work2")
    assert compiles() == 3
    assert (res.cache_hits, res.cache_misses, res.compiled) == (3, 0, [])
    assert len(res.commands) == 1   # the link only
    assert ctypes.CDLL(str(res.out_so)).combo(3, 4) == 84


def test_a_changed_flag_misses(tmp_path, cache):
    _build(tmp_path, cache, "o1", flags=["-O1", "-fPIC"])
    res = _build(tmp_path, cache, "o2", flags=["-O2", "-fPIC"])
    assert (res.cache_hits, res.cache_misses) == (0, 3)
    assert _build(tmp_path, cache, "o2b", flags=["-O2", "-fPIC"]).cache_hits == 3


def test_a_changed_source_misses_only_that_source(tmp_path, cache):
    _build(tmp_path, cache, "v1")
    changed = [THREE[0], Source("mul.cpp", 'extern "C" int mul(int a, int b) { return a * b + 1; }\n'), THREE[2]]
    res = _build(tmp_path, cache, "v2", sources=changed)
    assert (res.cache_hits, res.cache_misses, res.compiled) == (2, 1, ["mul.cpp"])
    assert ctypes.CDLL(str(res.out_so)).combo(2, 3) == 5 * 7


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "garbage_header", "empty"])
def test_a_damaged_cache_entry_is_detected_rebuilt_and_never_linked(tmp_path, cache, damage):
    _build(tmp_path, cache, "good")
    victim = _entries(cache)[0]
    blob = victim.read_bytes()
    if damage == "truncate":
        blob = blob[: len(blob) - len(blob) // 3]
    elif damage == "flip_byte":
        blob = blob[:-50] + bytes([blob[-50] ^ 0xFF]) + blob[-49:]
    elif damage == "garbage_header":
        blob = b"{not json\n" + blob.partition(b"\n")[2]
    else:
        blob = b""
    victim.write_bytes(blob)
    res = _build(tmp_path, cache, f"after_{damage}", workdir=tmp_path / "work2")
    assert (res.cache_hits, res.cache_misses) == (2, 1)
    assert ctypes.CDLL(str(res.out_so)).combo(2, 3) == 30
    # The rebuilt entry replaced the damaged one.
    assert _build(tmp_path, cache, f"again_{damage}", workdir=tmp_path / "work3").cache_hits == 3


def test_editing_an_included_header_invalidates_the_object(tmp_path, cache):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "cfg.h").write_text("#define VALUE 1\n")
    src = [Source("v.cpp", '#include "cfg.h"\nextern "C" int value() { return VALUE; }\n')]
    flags = FLAGS + [f"-I{inc}"]
    assert ctypes.CDLL(str(_build(tmp_path, cache, "h1", sources=src, flags=flags).out_so)).value() == 1
    (inc / "cfg.h").write_text("#define VALUE 2\n")
    res = _build(tmp_path, cache, "h2", sources=src, flags=flags)
    assert res.cache_misses == 1
    assert ctypes.CDLL(str(res.out_so)).value() == 2


def test_a_cache_filled_here_serves_a_checkout_and_toolchain_elsewhere(tmp_path, cache):
    """Issue 12's prebuilt objects: the GPU machine's checkout, include dirs and compiler sit at other
    paths than the machine that filled the cache. Moved include dirs (-I and -isystem) and a moved
    workdir still hit; a header that differs there still misses."""
    here, there = tmp_path / "here", tmp_path / "there"
    for root in (here, there):
        (root / "inc").mkdir(parents=True)
        (root / "sys").mkdir()
        (root / "inc" / "cfg.h").write_text("#define VALUE 5\n")
        (root / "sys" / "lib.h").write_text("#define TWICE(x) (2 * (x))\n")
    src = [Source("v.cpp", '#include "cfg.h"\n#include <lib.h>\nextern "C" int value() { return TWICE(VALUE); }\n')]

    def flags(root):
        return FLAGS + [f"-I{root / 'inc'}", "-isystem", str(root / "sys")]
    first = _build(tmp_path, cache, "p1", sources=src, flags=flags(here), workdir=here / "work")
    assert first.cache_misses == 1
    (entry,) = _entries(cache)
    head = entry.read_bytes().partition(b"\n")[0].decode()
    assert str(here) not in head and "$INC0/cfg.h" in head   # the recorded header names no path of here
    moved = _build(tmp_path, cache, "p2", sources=src, flags=flags(there), workdir=there / "work")
    assert (moved.cache_hits, moved.cache_misses) == (1, 0)
    assert ctypes.CDLL(str(moved.out_so)).value() == 10
    (there / "inc" / "cfg.h").write_text("#define VALUE 6\n")   # the same name, other content: a miss
    changed = _build(tmp_path, cache, "p3", sources=src, flags=flags(there), workdir=there / "work2")
    assert changed.cache_misses == 1 and ctypes.CDLL(str(changed.out_so)).value() == 12
    # A flag other than an include dir still counts.
    assert _build(tmp_path, cache, "p4", sources=src, flags=flags(there) + ["-DX=1"],
                  workdir=there / "work3").cache_misses == 1


def test_portable_flags_name_include_dirs_by_position():
    flags = ["-O2", "-I/a/inc", "-isystem", "/b/sys", "-isystem/c", "-L/lib", "-I", "/a/inc"]
    roots = B.include_roots(flags)
    assert roots == ["/a/inc", "/b/sys", "/c", "/a/inc"]
    assert B.portable_flags(flags, roots) == ["-O2", "-I$INC0", "-isystem", "$INC1", "-isystem$INC2", "-L/lib",
                                              "-I", "$INC0"]


def test_a_syntax_error_raises_build_error_with_command_source_and_error_line(tmp_path, cache):
    bad = THREE[:2] + [Source("broken.cpp", 'extern "C" int f() {\n  return 1 +;\n}\n')]
    with pytest.raises(BuildError) as info:
        _build(tmp_path, cache, "bad", sources=bad)
    err, msg = info.value, str(info.value)
    assert err.source == "broken.cpp" and "'broken.cpp'" in msg
    assert "-c src/broken.cpp" in msg and err.command in msg
    assert "broken.cpp:2:" in msg and "error" in msg
    assert len(err.output) <= 20
    assert not (tmp_path / "bad.so").exists()
    # The sources that did compile were cached; the broken one was not.
    assert len(_entries(cache)) == 2


def test_a_link_failure_raises_build_error(tmp_path, cache):
    src = [Source("u.cpp", 'extern "C" int missing();\nextern "C" int g() { return missing(); }\n')]
    with pytest.raises(BuildError) as info:
        _build(tmp_path, cache, "unresolved", sources=src, link_flags=["-Wl,--no-undefined"])
    assert info.value.source is None
    assert "linking" in str(info.value) and "missing" in str(info.value) and "-shared" in str(info.value)


def test_many_sources_compile_in_parallel(tmp_path, cache):
    n = 8
    srcs = [Source(f"k{i}.cpp", f'extern "C" int k{i}() {{ return {i * i}; }}\n') for i in range(n)]
    res = _build(tmp_path, cache, "many", sources=srcs, jobs=4)
    lib = ctypes.CDLL(str(res.out_so))
    assert [getattr(lib, f"k{i}")() for i in range(n)] == [i * i for i in range(n)]
    # .ninja_log holds each edge's start and end (ms): with -j 4 some compiles must overlap.
    spans = [tuple(map(int, ln.split("\t")[:2])) for ln in (tmp_path / "work/.ninja_log").read_text().splitlines()
             if not ln.startswith("#") and ln.split("\t")[3].endswith(".o")]
    assert len(spans) == n
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:])


def test_two_builds_in_one_workdir_take_turns(tmp_path, cache):
    results, errors = {}, []

    def one(name, sources):
        try:
            results[name] = _build(tmp_path, cache, name, sources=sources)
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(f"t{i}", THREE if i == 0 else THREE[:2])) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert ctypes.CDLL(str(results["t0"].out_so)).combo(2, 3) == 30
    assert ctypes.CDLL(str(results["t1"].out_so)).mul(2, 3) == 6


def test_cache_dir_honours_aitgen_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(tmp_path / "from_env"))
    assert B.default_cache_dir() == tmp_path / "from_env"
    build(THREE, tmp_path / "env.so", compiler="g++", flags=FLAGS, link_flags=[], workdir=tmp_path / "w",
          progress=False)
    assert len(list((tmp_path / "from_env").rglob("*.entry"))) == 3
    monkeypatch.delenv("AITGEN_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert B.default_cache_dir() == tmp_path / "home" / ".cache" / "aitgen"


def test_bad_source_names_are_refused(tmp_path, cache):
    for name in ("../x.cpp", "/abs.cpp", "no_suffix", "sp ace.cpp"):
        with pytest.raises(ValueError):
            _build(tmp_path, cache, "names", sources=[Source(name, "")])
    with pytest.raises(ValueError):
        _build(tmp_path, cache, "dup", sources=[THREE[0], THREE[0]])


def test_depfile_parsing_handles_continuations_and_escaped_spaces():
    text = "obj/a.o: src/a.cpp /x/with\\ space.h \\\n /y/b.h\n"
    assert B.parse_depfile(text) == ["src/a.cpp", "/x/with space.h", "/y/b.h"]


# ---------------------------------------------------------------------------------------------
# locate
# ---------------------------------------------------------------------------------------------

def test_fallback_pins_equal_the_pin_files():
    for name, req in locate.FALLBACK_PINS.items():
        path = locate.THIRD_PARTY_DIR / f"{name}.txt"
        assert path.read_text().strip() == req
        assert locate.pin(name).source == str(path) and locate.pin(name).requirement == req


def test_cxx_has_a_version_for_cache_keys():
    tool = locate.cxx()
    assert tool.path.is_absolute() and "g++" in tool.path.name
    assert any(ch.isdigit() for ch in tool.version) and tool.version in tool.version_text


def test_missing_cutlass_raises_toolchain_error_with_the_pip_command(monkeypatch):
    def absent(name):
        raise md.PackageNotFoundError(name)
    monkeypatch.setattr(locate.md, "distribution", absent)
    locate.cutlass.cache_clear()
    try:
        with pytest.raises(locate.ToolchainError, match=r"pip install 'nvidia-cutlass==4\.2\.0\.0'"):
            locate.cutlass()
    finally:
        locate.cutlass.cache_clear()
    assert issubclass(locate.ToolchainError, BuildError)


def test_cutlass_include_dirs_when_installed():
    try:
        cut = locate.cutlass()
    except locate.ToolchainError as exc:
        pytest.skip(str(exc))
    assert (cut.include_dirs[0] / "cutlass/cutlass.h").exists()
    assert (cut.include_dirs[0] / "cute/tensor.hpp").exists()
    assert (cut.include_dirs[1] / "cutlass/util/host_tensor.h").exists()


ONEDNN_MATMUL = r"""
#include <oneapi/dnnl/dnnl.hpp>
#include <cstring>
using namespace dnnl;
extern "C" int matmul4(const float* a, const float* b, float* c) {
    try {
        engine eng(engine::kind::cpu, 0);
        stream s(eng);
        memory::desc md({4, 4}, memory::data_type::f32, memory::format_tag::ab);
        memory ma(md, eng, const_cast<float*>(a)), mb(md, eng, const_cast<float*>(b)), mc(md, eng, c);
        matmul(matmul::primitive_desc(eng, md, md, md))
            .execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
        s.wait();
        return 0;
    } catch (const error& e) {
        return e.status == 0 ? -1 : static_cast<int>(e.status);
    }
}
"""


def test_onednn_matmul_through_locate(tmp_path, cache):
    try:
        dnnl = locate.onednn()
    except locate.ToolchainError as exc:
        pytest.skip(str(exc))
    res = _build(tmp_path, cache, "dnnl", sources=[Source("mm.cpp", ONEDNN_MATMUL)],
                 flags=["-std=c++17", "-O1", "-fPIC", *dnnl.compile_flags], link_flags=dnnl.link_flags)
    lib = ctypes.CDLL(str(res.out_so))
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    c = np.zeros((4, 4), np.float32)
    ptr = ctypes.POINTER(ctypes.c_float)
    assert lib.matmul4(a.ctypes.data_as(ptr), b.ctypes.data_as(ptr), c.ctypes.data_as(ptr)) == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_nvcc_compiles_a_trivial_cuda_file(tmp_path, cache):
    try:
        nvcc = locate.nvcc()
    except locate.ToolchainError as exc:
        pytest.skip(str(exc))
    cu = Source("scale.cu", '__global__ void scale(float* x, float a, int n) {\n'
                            '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= a;\n}\n'
                            'extern "C" void launch(float* x, float a, int n) {\n'
                            '  scale<<<(n + 255) / 256, 256>>>(x, a, n);\n}\n')
    flags = ["-O2", "-arch=sm_80", "-Xcompiler=-fPIC"]
    res = _build(tmp_path, cache, "cuda", sources=[cu], flags=flags, compiler=nvcc)
    assert res.out_so.stat().st_size > 0 and res.cache_misses == 1   # built only: nothing runs without a GPU
    assert "nvcc" in res.commands[0] and "-c src/scale.cu" in res.commands[0]
    again = _build(tmp_path, cache, "cuda2", sources=[cu], flags=flags, compiler=nvcc, workdir=tmp_path / "w2")
    assert again.cache_hits == 1
    assert shutil.which(str(nvcc.path)) and os.path.isabs(nvcc.path)


def test_build_jobs_come_from_the_environment(monkeypatch):
    # A 16-core machine with four test workers would start 64 nvcc jobs (3-4 GB each for CUTLASS
    # sm_90a units): AITGEN_BUILD_JOBS caps every build that is given no jobs= of its own.
    from aitgen.codegen.build import build_jobs
    from aitgen.errors import UsageError
    monkeypatch.delenv("AITGEN_BUILD_JOBS", raising=False)
    assert build_jobs() == (os.cpu_count() or 1)
    monkeypatch.setenv("AITGEN_BUILD_JOBS", "3")
    assert build_jobs() == 3
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("AITGEN_BUILD_JOBS", bad)
        with pytest.raises(UsageError, match="AITGEN_BUILD_JOBS"):
            build_jobs()


def test_release_matching_keys_ignore_the_patch_build_only(monkeypatch):
    """AITGEN_CACHE_TOOL_MATCH=release (gpu_check.sh / gpu_prebuild.py): two nvcc builds of one
    release share keys; another release, or the default exact matching, does not."""
    from pathlib import Path
    from aitgen.codegen.deps import tool_key

    def nvcc(text):
        return locate.Tool(Path("/usr/local/bin/nvcc"), Path("/opt/cuda/bin/nvcc"), text.splitlines()[-1], text)
    a = nvcc("Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0")
    b = nvcc("Cuda compilation tools, release 13.0, V13.0.48\nBuild cuda_13.0.r13.0/compiler.36260728_0")
    c = nvcc("Cuda compilation tools, release 13.1, V13.1.80\nBuild cuda_13.1.r13.1/compiler.36836380_0")
    monkeypatch.delenv("AITGEN_CACHE_TOOL_MATCH", raising=False)
    assert len({tool_key(a), tool_key(b), tool_key(c)}) == 3
    monkeypatch.setenv("AITGEN_CACHE_TOOL_MATCH", "release")
    assert tool_key(a) == tool_key(b) != tool_key(c)
    gxx = locate.Tool(Path("/usr/bin/g++"), Path("/usr/bin/g++-12"), "g++ 12.2.0", "g++ (Debian 12.2.0) 12.2.0")
    assert tool_key(gxx).endswith("g++ (Debian 12.2.0) 12.2.0")   # no release line: the whole version
