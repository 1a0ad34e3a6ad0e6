"""Objects built on one machine serve another (issue 12, item 3): scripts/gpu_prebuild.py packs a
fresh object cache, scripts/gpu_check.sh unpacks it into the GPU machine's cache. Here with the CPU
backend (the mechanism is the build layer's, the same for nvcc): a model built with one cache, its
entries packed by gpu_prebuild.pack and unpacked elsewhere, rebuilds in another workdir with no
compile, and the library it links computes what the oracle does."""
from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

import numpy as np

import aitgen as ag
from aitgen import ops

ROOT = Path(__file__).resolve().parents[2]


def _prebuild_module():
    spec = importlib.util.spec_from_file_location("gpu_prebuild", ROOT / "scripts" / "gpu_prebuild.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _model():
    x = ag.Tensor([ag.IntVar("b", 1, 8), 24], dtype="float32", name="x")
    w = ag.constant(np.random.default_rng(0).standard_normal((16, 24)).astype(np.float32), name="w")
    return {"y": ops.relu(ops.linear(x, w)) * 0.5}


def test_a_packed_cache_unpacked_elsewhere_serves_the_build(tmp_path, monkeypatch):
    prebuild = _prebuild_module()
    here = tmp_path / "cache_here"
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(here))
    first = ag.compile_model(_model(), target="cpu", workdir=tmp_path / "w1", load=False)
    assert json.loads((first / "report.json").read_text())["cache_misses"] > 0
    archive = tmp_path / "carry" / "cache.tar.xz"
    size = prebuild.pack(here, sorted(prebuild.entries(here)), archive)
    assert size == archive.stat().st_size > 0
    there = tmp_path / "cache_there"
    there.mkdir()
    with tarfile.open(archive) as tar:            # what gpu_check.sh's `tar -xJf` does
        names = tar.getnames()
        assert names and all(not n.startswith("/") and ".." not in n.split("/") for n in names)
        tar.extractall(there, filter="data")
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(there))
    second = ag.compile_model(_model(), target="cpu", workdir=tmp_path / "elsewhere" / "w2", load=False)
    report = json.loads((second / "report.json").read_text())
    assert report["cache_misses"] == 0 and report["cache_hits"] > 0
    feeds = {"x": np.random.default_rng(1).standard_normal((5, 24)).astype(np.float32)}
    with ag.Model.load(second) as m:
        got = m.run(feeds)["y"]
    np.testing.assert_allclose(got, ag.reference.run(_model(), feeds)["y"], rtol=1e-5, atol=1e-6)
