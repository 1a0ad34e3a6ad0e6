"""The kernels' precompiled header (aitgen/codegen/pch.py): a CPU model's kernels compile through
it, their objects are byte-identical to a compile without it (so one cache entry serves both), an
edit to any header folded into it (even one it includes indirectly) reaches the next build, and a
broken or missing PCH degrades to the plain compile, never to a failed or stale build.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen import locate
from aitgen.codegen import pch
from aitgen.codegen.backend import load_backend
from aitgen.codegen.build import Source, build


def _model(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(cache))
    x = ag.Tensor([4, 96], name="x")
    v = ag.Tensor([96], name="v")
    outs = {"a": ops.softmax(ops.gelu(x * v), -1), "b": ops.tanh(x) + 1.0, "c": ops.reduce_sum(x, [1])}
    work = tmp_path / "m"
    model = ag.compile_model(outs, target="cpu", workdir=work)
    xv = np.random.default_rng(0).standard_normal((4, 96)).astype(np.float32)
    vv = np.linspace(-1, 1, 96, dtype=np.float32)
    got = model.run({"x": xv, "v": vv})
    ref = ag.reference.run(outs, {"x": xv, "v": vv})
    for k in outs:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6)   # float32 kernels vs numpy
    model.close()
    return work


def test_cpu_kernels_compile_through_the_pch_into_the_same_objects(tmp_path, monkeypatch):
    work = _model(tmp_path, tmp_path / "cache", monkeypatch)
    ninja = (work / "obj" / "build.ninja").read_text()
    kernels = sorted((work / "obj" / "src").glob("k_*.cpp"))
    assert len(kernels) >= pch.MIN_KERNELS
    assert ninja.count(f"-include") == sum("aitgen/cpu_kernel.h" in k.read_text() for k in kernels) >= 3
    gch = list((tmp_path / "cache" / "pch").rglob(pch.HEADER + ".gch"))
    assert len(gch) == 1
    # g++ -H marks a PCH it loaded with '!' (and one it refused with 'x'): this one is used.
    backend = load_backend("cpu")
    flags = backend.compile_flags()
    tool = backend.tool()
    proc = subprocess.run([str(tool.path), "-include", str(gch[0])[:-4], "-Winvalid-pch", "-H", *flags, "-c",
                           str(kernels[0]), "-o", str(tmp_path / "probe.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"! {gch[0]}" in proc.stderr and "not used because" not in proc.stderr
    # The same sources compiled without it, in another workdir and cache: identical objects.
    sources = [Source(p.name, p.read_text()) for p in sorted((work / "obj" / "src").iterdir())]
    res = build(sources, tmp_path / "plain.so", compiler=tool, flags=flags, link_flags=backend.link_flags(),
                workdir=tmp_path / "plain", cache_dir=tmp_path / "cache2", progress=False)
    assert "-include" not in "\n".join(res.commands)
    for k in kernels:
        obj = f"obj/{k.name}.o"
        assert (tmp_path / "plain" / obj).read_bytes() == (work / "obj" / obj).read_bytes(), k.name


def _three(inc_name="t/api.h"):
    return [Source(f"s{i}.cpp", f'#include "{inc_name}"\nextern "C" int f{i}() {{ return VALUE + {i}; }}\n')
            for i in range(3)]


def _tree(tmp_path, value):
    inc = tmp_path / "inc"
    (inc / "t").mkdir(parents=True, exist_ok=True)
    (inc / "t" / "api.h").write_text('#pragma once\n#include "t/inner.h"\n')
    (inc / "t" / "inner.h").write_text(f"#pragma once\n#define VALUE {value}\n")
    return inc


def _lib(tmp_path, name, inc, cache, prelude=pch.Prelude(("t/api.h",))):
    res = build(_three(), tmp_path / f"{name}.so", compiler="g++", flags=["-O1", "-fPIC", f"-I{inc}"],
                link_flags=[], workdir=tmp_path / "work", cache_dir=cache, progress=False, prelude=prelude)
    return res, ctypes.CDLL(str(res.out_so))


def test_an_edit_to_a_header_inside_the_pch_reaches_the_next_build(tmp_path):
    cache = tmp_path / "cache"
    inc = _tree(tmp_path, 10)
    res, lib = _lib(tmp_path, "v1", inc, cache)
    assert all("-include" in c for c in res.commands[:3]) and lib.f2() == 12
    # inner.h is not in the kernels' depfiles (the PCH holds it): the entries must still see it
    (inc / "t" / "inner.h").write_text("#pragma once\n#define VALUE 20\n")
    res, lib = _lib(tmp_path, "v2", inc, cache)
    assert res.cache_misses == 3 and lib.f0() == 20 and lib.f2() == 22
    assert len(list((cache / "pch").rglob(pch.HEADER + ".gch"))) == 2   # a new PCH for the new header
    # unchanged since: all hits, no compile
    res, lib = _lib(tmp_path, "v3", inc, cache)
    assert res.cache_hits == 3 and lib.f1() == 21


def test_a_damaged_pch_is_rebuilt_and_a_failed_one_falls_back(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    inc = _tree(tmp_path, 5)
    _lib(tmp_path, "a", inc, cache)
    (gch,) = (cache / "pch").rglob(pch.HEADER + ".gch")
    gch.write_bytes(b"not a precompiled header")
    shutil.rmtree(cache / "objects")
    res, lib = _lib(tmp_path, "b", inc, cache)
    assert lib.f1() == 6 and "not used because" not in res.log
    assert gch.read_bytes() != b"not a precompiled header"   # replaced by a whole one
    # the PCH cannot be made: the build goes on without it
    shutil.rmtree(cache)

    def fail(argv, cwd):
        raise subprocess.TimeoutExpired(argv, 300)
    monkeypatch.setattr(pch, "_run", fail)
    res, lib = _lib(tmp_path, "c", inc, cache)
    assert not any("-include" in c for c in res.commands) and lib.f2() == 7


def test_only_gcc_gets_a_pch_and_small_builds_skip_it(tmp_path):
    gcc = locate.tool("g++")
    clang = locate.Tool(gcc.path, gcc.real_path, "clang version 17", "clang version 17.0.6\nTarget: x86_64")
    assert pch.is_gcc(gcc) and not pch.is_gcc(clang)
    assert pch.ensure(pch.Prelude(("t/api.h",)), clang, [], tmp_path / "cache") is None
    inc = _tree(tmp_path, 1)
    res = build(_three()[:2], tmp_path / "two.so", compiler="g++", flags=["-O1", "-fPIC", f"-I{inc}"],
                link_flags=[], workdir=tmp_path / "w", cache_dir=tmp_path / "cache", progress=False,
                prelude=pch.Prelude(("t/api.h",)))
    assert pch.MIN_KERNELS > 2 and not any("-include" in c for c in res.commands)
    assert not (tmp_path / "cache" / "pch").exists()


@pytest.mark.parametrize("text,uses", [('#include "t/api.h"\n', True), ('#include <t/api.h>\n', False),
                                       ("int x;\n", False)])
def test_prelude_applies_to_sources_that_include_its_header(text, uses):
    assert pch.Prelude(("a.h", "t/api.h")).applies(text) is uses
    assert pch.Prelude(("a.h", "t/api.h")).text == '#include "a.h"\n#include "t/api.h"\n'


def test_a_cache_path_with_hostile_characters_reaches_the_compiler_quoted(tmp_path):
    # the PCH lies in the cache ($AITGEN_CACHE_DIR, the user's), named on every kernel's command line
    cache = tmp_path / "a b $x 'q\" ;touch pwned; $(id)"
    inc = _tree(tmp_path, 3)
    res, lib = _lib(tmp_path, "hostile", inc, cache)
    assert all("-include" in c for c in res.commands[:3]) and lib.f2() == 5
    assert not (tmp_path / "work" / "pwned").exists() and not (tmp_path / "pwned").exists()
