"""Bounds carried from conv to conv within a run (aitgen/codegen/bounds.py, Slots in
backends/cpu/include/aitgen/onednn_guard.h).

A conv with relu / relu6 post-ops proves its input finite before it runs them; the conv that wrote
that input already holds a bound on it, so it leaves the bound in a slot and the reader skips its
scan. Checked here: a chain scans its input once per run instead of once per conv (the library's
scan counter), the numbers match the oracle, and a slot never outlives its run: a NaN or an
overflow after finite runs, and runs of two runtimes at once, still take the plain path where the
op's NaN / infinity semantics need it.
"""
from __future__ import annotations

import concurrent.futures
import ctypes

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.bounds import link_bounds
from aitgen.codegen.spec import BoundRef, BoundSlot, KernelCall, KernelSpec

NAN = np.float32(np.nan)


def _chain(n: int = 4, c: int = 16):
    """n 3x3 convs, alternating relu and relu6 (oneDNN's clip), the last with a residual add."""
    rng = np.random.default_rng(0)
    x = ag.Tensor([1, 8, 8, c], name="x")
    h = x
    for i in range(n):
        w = ag.constant((rng.standard_normal((c, 3, 3, c)) * 0.1).astype(np.float32))
        b = ag.constant((rng.standard_normal(c) * 0.1).astype(np.float32))
        y = ops.conv2d(h, w, b, padding=1)
        if i == n - 1:
            y = y + h
        h = ops.relu6(y) if i % 2 else ops.relu(y)
    return {"y": h}


def _scans(model) -> int:
    f = model._lib.ait_onednn_operand_scans
    f.restype = ctypes.c_int64
    return int(f())


def _check(got, want, tol):
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), np.argwhere(np.isnan(g) != np.isnan(w))[:4]
    assert np.array_equal(np.isinf(g), np.isinf(w))
    fin = np.isfinite(w)
    np.testing.assert_allclose(g[fin], w[fin], rtol=tol, atol=tol * max(1.0, float(np.abs(w[fin]).max(initial=0))))


def _feed(seed: int, c: int = 16) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((1, 8, 8, c)).astype(np.float32)}


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_chain_scans_its_input_once_per_run_and_matches_the_oracle(tmp_path, precision):
    outs = _chain()
    model = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / precision), winograd=False,
                             precision=None if precision == "float32" else precision)
    tol = 1e-4 if precision == "float32" else 3e-2
    feed = _feed(1)
    model.run(feed)
    before = _scans(model)
    got = model.run(feed)["y"]
    # The first conv scans x; the other three read their input's bound (and the residual's, the
    # first conv's output) from the slots their producers wrote.
    assert _scans(model) - before == 1
    _check(got, ag.reference.run(outs, feed)["y"], tol)
    model.close()


def test_an_mlp_scans_its_input_once_per_run(tmp_path):
    """linear -> relu, three times (GEMM kernels carry slots as convs do), then a plain linear."""
    rng = np.random.default_rng(0)
    x = ag.Tensor([8, 64], name="x")
    h = x
    for _ in range(3):
        h = ops.relu(ops.linear(h, ag.constant((rng.standard_normal((64, 64)) * 0.2).astype(np.float32)),
                                ag.constant(rng.standard_normal(64).astype(np.float32))))
    outs = {"y": ops.linear(h, ag.constant((rng.standard_normal((16, 64)) * 0.2).astype(np.float32)))}
    model = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "mlp"))
    feed = {"x": rng.standard_normal((8, 64)).astype(np.float32)}
    model.run(feed)
    # On AVX2-class CPUs the products run as oneDNN's packed sgemm, whose epilogue is always the
    # loop: no guard, no scan at all.
    packed = any(v.endswith(":packed_sgemm") for v in model.kernel_report()["onednn_impls"].values())
    for f in (feed, feed, {"x": np.where(feed["x"] > 1.5, NAN, feed["x"]).astype(np.float32)}, feed):
        before = _scans(model)
        got = model.run(f)["y"]
        # finite: x scanned once, by the first linear; with a NaN every relu's guard fails and scans
        assert _scans(model) - before == (0 if packed else 1 if f is feed else 3)
        _check(got, ag.reference.run(outs, f)["y"], 1e-4)
    model.close()


def test_a_slot_never_outlives_its_run(tmp_path):
    """A NaN after finite runs: the first conv's guard fails, its slot must say so (not keep the
    last run's bound), so the next conv scans, finds the NaN and keeps it as the op does (relu's
    post-op would turn it into 0). Then huge finite values whose sums overflow. Then finite again."""
    outs = _chain()
    model = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "m"), winograd=False)
    unfused = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "unfused"), winograd=False, fusion=False)
    nan = _feed(2)
    nan["x"][0, 3, 3, 5] = NAN
    huge = _feed(3)
    huge["x"][0, 2] = np.float32(3e37)
    for feed in (_feed(1), _feed(1), nan, huge, _feed(4), nan):
        got = model.run(feed)["y"]
        # overflowing sums: +-inf or NaN by the order of the terms, so the unfused build is the reference
        want = unfused.run(feed)["y"] if feed is huge else ag.reference.run(outs, feed)["y"]
        _check(got, want, 1e-4)
    assert np.isnan(model.run(nan)["y"]).any()
    model.close()
    unfused.close()


def test_each_runtime_has_its_own_slots(tmp_path):
    """Two runtimes of one model at once, one fed NaN and one finite values, over and over: slots
    live in each runtime's arena, so one run's bound never reaches the other's reader."""
    outs = _chain()
    ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "m"), winograd=False).close()
    model = ag.Model.load(str(tmp_path / "m"), num_runtimes=2)
    nan = _feed(2)
    nan["x"][0, 3, 3, 5] = NAN
    feeds = [nan, _feed(5)]
    want = [ag.reference.run(outs, f)["y"] for f in feeds]

    def worker(i):
        for _ in range(30):
            _check(model.run(feeds[i])["y"], want[i], 1e-4)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(worker, range(2)))  # re-raises a worker's failure here
    model.close()


def _call(ptrs, bound_at, writes=(0,), guard=True):
    spec = KernelSpec.make("cpu/templates/conv_onednn.cpp.j2", bound_at=bound_at,
                           post_ops=[{"alg": "relu", "guard": guard}])
    return KernelCall(spec, list(ptrs) + [BoundRef(t) for t in ptrs], [], "c", writes=list(writes))


def test_link_bounds_links_single_writers_to_later_readers_only():
    a, b, c, w, x = (ag.Tensor([1], name=n) for n in "abcwx")
    first = _call([a, x, w], 3)        # writes a, reads x (a graph input: no producer)
    second = _call([b, a, w], 3)       # reads a
    third = _call([c, b, a], 3)        # reads b, and a again
    other = KernelCall(KernelSpec.make("cpu/templates/copy.cpp.j2"), [b, c], [], "copy", writes=[0])  # b's 2nd writer
    calls = [first, second, third]
    assert link_bounds(calls) == 1 + 1
    assert first.ptrs[3:] == [BoundSlot(0), None, None] and first.writes == [0, 3]
    assert second.ptrs[3:] == [BoundSlot(1), BoundSlot(0), None] and second.writes == [0, 3]
    assert third.ptrs[3:] == [None, BoundSlot(1), BoundSlot(0)]  # nobody reads c
    # b has a second writer: nobody may trust its slot
    calls = [_call([a, x, w], 3), _call([b, a, w], 3), other, _call([c, b, a], 3)]
    assert link_bounds(calls) == 1
    assert calls[3].ptrs[3:] == [None, None, BoundSlot(0)]
    # a reader before its producer (another list's order) is never linked
    calls = [_call([b, a, w], 3), _call([a, x, w], 3)]
    assert link_bounds(calls) == 0 and all(p is None for c in calls for p in c.ptrs[3:])
    # readers without guards take a bound only to pass it on to one with a guard
    calls = [_call([a, x, w], 3), _call([b, a, w], 3, guard=False), _call([c, b, w], 3, guard=False)]
    assert link_bounds(calls) == 0 and all(p is None for c in calls for p in c.ptrs[3:])
    calls = [_call([a, x, w], 3), _call([b, a, w], 3, guard=False), _call([c, b, w], 3)]
    assert link_bounds(calls) == 2
    assert [c.ptrs[3:5] for c in calls] == [[BoundSlot(0), None], [BoundSlot(1), BoundSlot(0)], [None, BoundSlot(1)]]
