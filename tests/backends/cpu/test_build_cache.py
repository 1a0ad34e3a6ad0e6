"""The object cache seen through compile_model and report.json: a rebuild compiles nothing, a model
that shares kernels with an earlier one compiles only what differs, a damaged cache entry is
rebuilt (never linked), and report.json holds the DESIGN.md keys with consistent values."""
from __future__ import annotations

import json

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.backend import load_backend

KEYS = {"num_ops": int, "num_kernels": int, "unique_kernels": int, "activation_bytes": int,
        "activation_lower_bound_bytes": int, "activation_naive_bytes": int, "constant_bytes": int,
        "cache_hits": int, "cache_misses": int, "build_seconds": float, "passes": list}


def _outputs(ub: int = 16, const_name: str = "w"):
    n = ag.IntVar("n", 1, ub)
    x = ag.Tensor([n, 8], name="x")
    w = ag.constant(np.linspace(0.5, 2.0, 8, dtype=np.float32), name=const_name)
    a = ops.exp(x * w)             # a chain of intermediates, so the plan has something to share
    b = ops.sigmoid(a + x)
    c = ops.tanh(ops.softmax(b * a, -1))  # the softmax keeps intermediates between fused groups
    return {"y": ops.relu(c - b), "z": c}


def _feeds(n: int = 5):
    return {"x": np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)}


def _report(workdir) -> dict:
    return json.loads((workdir / "report.json").read_text())


def _sources(report: dict) -> int:
    """Translation units in one build: the unique kernels, model.cpp and the static runtime."""
    return report["unique_kernels"] + 1 + len(load_backend("cpu").static_sources)


def _assert_runs(model, outputs):
    feeds = _feeds()
    got, ref = model.run(feeds), ag.reference.run(outputs, feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """One fresh cache for the module and a first build into it. Fresh caches are costly (the
    oneDNN glue alone compiles for ~20 s), so the tests below share it; each leaves it whole."""
    root = tmp_path_factory.mktemp("cache_tests")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AITGEN_CACHE_DIR", str(root / "cache"))
        outputs = _outputs()
        ag.compile_model(outputs, target="cpu", workdir=root / "first").close()
        yield root, root / "cache", outputs, _report(root / "first")


def test_first_build_misses_everything(first):
    *_, report = first
    assert report["cache_hits"] == 0 and report["cache_misses"] == _sources(report)


def test_second_build_hits_for_every_kernel(first, tmp_path):
    _, _, outputs, report = first
    m = ag.compile_model(outputs, target="cpu", workdir=tmp_path / "b")   # the same model elsewhere
    second = _report(tmp_path / "b")
    assert second["cache_misses"] == 0 and second["cache_hits"] == _sources(report)
    _assert_runs(m, outputs)
    m.close()

    # Another bound and constant name change model.cpp only: every kernel still hits.
    other = _outputs(ub=64, const_name="w_other")
    m = ag.compile_model(other, target="cpu", workdir=tmp_path / "c")
    third = _report(tmp_path / "c")
    assert third["unique_kernels"] == report["unique_kernels"]
    assert third["cache_misses"] == 1 and third["cache_hits"] == _sources(third) - 1
    _assert_runs(m, other)
    m.close()


def _kernel_entry(cache, report):
    """The cache entry of one kernel: its object names the kernel's function, and it is not
    model.cpp's (which calls every kernel, and defines ait_generated_run)."""
    funcs = [k["func"].encode() for k in report["kernels"]]
    for entry in sorted(cache.rglob("*.entry")):
        blob = entry.read_bytes()
        if b"ait_generated_run" not in blob and any(f in blob for f in funcs):
            return entry
    raise AssertionError("no kernel entry in the cache")


@pytest.mark.parametrize("damage", ["truncate", "empty", "flip"])
def test_damaged_cache_entry_is_rebuilt(first, tmp_path, damage):
    _, cache, outputs, report = first
    assert len(list(cache.rglob("*.entry"))) >= _sources(report)
    victim = _kernel_entry(cache, report)
    whole = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(whole[: len(whole) // 2])
    elif damage == "empty":
        victim.write_bytes(b"")
    else:   # same size, one byte of the object changed: only the checksum can tell
        victim.write_bytes(whole[:-10] + bytes([whole[-10] ^ 0xFF]) + whole[-9:])

    m = ag.compile_model(outputs, target="cpu", workdir=tmp_path / "b")
    rebuilt = _report(tmp_path / "b")
    assert rebuilt["cache_misses"] == 1 and rebuilt["cache_hits"] == _sources(report) - 1
    _assert_runs(m, outputs)
    m.close()
    # rewritten whole: the same object (the compile is deterministic); the header list may differ,
    # as a lone rebuild compiles without the precompiled header whose headers a first build records
    again = victim.read_bytes()
    assert again.partition(b"\n")[2] == whole.partition(b"\n")[2]
    assert json.loads(again.partition(b"\n")[0])["sha256"] == json.loads(whole.partition(b"\n")[0])["sha256"]

    ag.compile_model(outputs, target="cpu", workdir=tmp_path / "c").close()
    assert _report(tmp_path / "c")["cache_misses"] == 0


def test_report_keys_and_consistency(first):
    *_, r = first
    for key, typ in KEYS.items():
        assert key in r, key
        assert isinstance(r[key], typ) or (typ is float and isinstance(r[key], int)), (key, r[key])
    assert r["num_ops"] == 9   # before passes: mul, exp, add, sigmoid, mul, softmax, tanh, sub, relu
    assert 0 < r["unique_kernels"] <= r["num_kernels"]
    assert r["num_kernels"] == len(r["kernels"])
    assert len({k["func"] for k in r["kernels"]}) == r["unique_kernels"]
    assert 0 < r["activation_lower_bound_bytes"] <= r["activation_bytes"] <= r["activation_naive_bytes"]
    assert r["constant_bytes"] == 8 * 4
    assert r["cache_hits"] + r["cache_misses"] == _sources(r)
    assert r["build_seconds"] > 0
    assert r["passes"] and all({"name", "seconds", "ops_after"} <= set(p) for p in r["passes"])
    assert r["passes"][-1]["name"] == "memory_planning"
