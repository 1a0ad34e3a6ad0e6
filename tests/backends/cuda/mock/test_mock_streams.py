"""Multi-stream scheduling (compile_model(..., streams=N), aitgen/codegen/streams.py), checked by the
mock device's happens-before check: every launch that reads or writes bytes another stream wrote
(or read) must be ordered after it by stream order, events or synchronisation. Random multi-branch
graphs and a multi-tower model, eager and as CUDA graphs; a planted missing wait is caught."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen import streams as streams_mod
from aitgen.codegen.streams import schedule
from aitgen.errors import MockDeviceError
from aitgen.runtime.model import Model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cuda_helpers import towers  # noqa: E402 - the cuda folder, put on sys.path above


def run_on_mock(work, graph: bool):
    with Model.load(work, mock_device=True, cuda_graph=graph) as m:
        for _ in range(3 if graph else 1):
            m.run({"x": np.ones((8, 32), np.float32)})
        return m.mock_run()


@pytest.mark.cuda_compile
@pytest.mark.parametrize("seed, fusion", [(0, True), (1, True), (2, True), (1, False)])
def test_random_towers_on_three_streams_are_ordered(cuda_toolchain, tmp_path, seed, fusion):
    work = ag.compile_model(towers(seed), target="cuda", arch="sm_80", workdir=tmp_path / "m", load=False,
                            streams=3, fusion=fusion)
    src = (work / "obj" / "src" / "model.cu").read_text()
    if "AIT_STREAMS_BEGIN(" not in src:   # fusion left a chain (seed 1): the plain single-stream code
        assert (seed, fusion) == (1, True) and "AIT_ON_STREAM" not in src
        return
    assert "AIT_WAIT_EVENT(" in src
    for graph in (False, True):
        run = run_on_mock(work, graph)
        assert not run.failures, run.failures[:3]
        assert all(ln.from_graph for ln in run.launches) == graph
        if not graph:   # (the mock replays a captured graph's kernels in capture order, on one stream)
            assert len({ln.stream for ln in run.launches}) >= 2   # kernels really on several streams


@pytest.mark.cuda_compile
def test_a_missing_wait_is_a_race(cuda_toolchain, tmp_path, monkeypatch):
    monkeypatch.setattr(streams_mod, "PLANT_DROP_WAIT", True)
    work = ag.compile_model(towers(0), target="cuda", arch="sm_80", workdir=tmp_path / "m", load=False, streams=3)
    with pytest.raises(MockDeviceError, match="no event or synchronisation ordering them"):
        run_on_mock(work, False)


def test_schedule_orders_every_conflict():
    """Random access sets: every pair of conflicting calls on different streams is ordered through
    the waits (transitively), and a chain stays on one stream."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 30))
        acc = [[("arena", int(lo), int(lo) + int(rng.integers(1, 64)), bool(rng.integers(0, 2)))
                for lo in rng.integers(0, 512, int(rng.integers(1, 4)))] for _ in range(n)]
        s = schedule(acc, int(rng.integers(1, 5)))
        # ordered[j] = the calls known complete before j starts
        ordered: list[set[int]] = []
        for j in range(n):
            before = set()
            for i in range(j):
                if s.stream[i] == s.stream[j]:
                    before |= ordered[i] | {i}
            for e in s.waits[j]:
                i = s.record.index(e)
                before |= ordered[i] | {i}
            ordered.append(before)
            for i in range(j):
                if streams_mod._conflict(acc[i], acc[j]):
                    assert i in before, (i, j, s)
    chain = [[("arena", 0, 8, True)] for _ in range(5)]
    assert schedule(chain, 4).stream == [0] * 5


def test_streams_are_checked(tmp_path):
    x = ag.Tensor([2], name="x")
    with pytest.raises(ag.errors.RuntimeInputTypeError, match="streams must be"):
        ag.compile_model(ops.relu(x), target="cuda", workdir=tmp_path / "a", load=False, streams=0)
    with pytest.raises(ag.errors.TargetError, match="several streams apply to GPU builds"):
        ag.compile_model(ops.relu(x), target="cpu", workdir=tmp_path / "b", load=False, streams=2)
