"""A CPU model's OpenMP thread count per run (Model(num_threads=), set_num_threads, --threads;
backends/cpu/src/cpu_runtime.cpp). The count is set for the run on the calling thread and given
back after it; the oneDNN kernels key their primitives by it (a primitive splits its work for the
count it was made under), so a new count makes new primitives; every count gives the oracle's
numbers (float32, rtol 1e-5, atol 1e-5 x max|reference|: oneDNN may split a reduction differently
per thread count). Bad counts are typed errors and leave the model usable.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import AitgenError, RuntimeInputError, RuntimeInputTypeError
from cpu_cases import Seeded, check

S = Seeded(4242)
TOL = 1e-5


def _graph():
    x = ag.Tensor([1, 12, 12, 8], name="x")  # NHWC, weights OHWI
    y = ops.relu(ops.conv2d(x, S.const((16, 3, 3, 8)), S.const((16,)), stride=1, padding=1, name="conv"))
    flat = ops.reshape(y, [1, 16 * 12 * 12])
    z = ops.gemm(flat, S.const((16 * 12 * 12, 10), scale=0.02), S.const((10,)), name="fc")
    return {"logits": ops.tanh(z)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    outs = _graph()
    work = tmp_path_factory.mktemp("threads")
    ag.compile_model(outs, target="cpu", workdir=work)
    feeds = {"x": S.rand((1, 12, 12, 8))}
    return work, outs, feeds, ag.reference.run(outs, feeds)


def _primitives(model) -> int:
    """Primitives the library's oneDNN kernels have made so far (each record counts its shapes)."""
    return sum(r["shapes"] for r in model.kernel_report()["onednn_primitives"])


def _omp_max_threads() -> int:
    gomp = ctypes.CDLL("libgomp.so.1")  # the process's OpenMP, which the model's library uses
    return int(gomp.omp_get_max_threads())


def test_thread_counts_match_the_oracle_and_make_their_own_primitives(built):
    work, outs, feeds, want = built
    with ag.Model.load(work) as m:
        assert m.num_threads is None
        check(m.run(feeds), want, TOL)
        base = _primitives(m)
        assert base >= 2  # the conv and the gemm
        for n in (1, 3):
            m.set_num_threads(n)
            assert m.num_threads == n
            before = _omp_max_threads()
            check(m.run(feeds), want, TOL)
            assert _omp_max_threads() == before  # given back to the calling thread
            check(m.run(feeds), want, TOL)
        # one new primitive per oneDNN kernel and thread count, made once, then reused (the suite
        # runs with OMP_NUM_THREADS=1, so 1 may be the default's count)
        counts = len({_omp_max_threads(), 1, 3})
        assert _primitives(m) == counts * base
        m.set_num_threads(None)
        check(m.run(feeds), want, TOL)
        assert _primitives(m) == counts * base
    with ag.Model.load(work, num_threads=1) as m:
        assert m.num_threads == 1
        check(m.run(feeds), want, TOL)


@pytest.mark.parametrize("bad, error", [(0, RuntimeInputError), (-2, RuntimeInputError), (5000, RuntimeInputError),
                                        (2.0, RuntimeInputTypeError), (True, RuntimeInputTypeError),
                                        ("2", RuntimeInputTypeError)])
def test_bad_thread_counts_are_typed_errors_and_leave_the_model_usable(built, bad, error):
    work, outs, feeds, want = built
    with pytest.raises(error, match="num_threads"):
        ag.Model.load(work, num_threads=bad)
    with ag.Model.load(work, num_threads=2) as m:
        with pytest.raises(error, match="num_threads"):
            m.set_num_threads(bad)
        assert m.num_threads == 2
        check(m.run(feeds), want, TOL)


def test_the_library_refuses_a_bad_count_given_past_python(built):
    """The C ABI checks on its own (a C++ caller does not go through Model)."""
    work, outs, feeds, want = built
    with ag.Model.load(work) as m:
        for value in (-1, 4097, 1 << 40):
            rc = m._lib.ait_model_set_option(m._handle, b"num_threads", value)
            assert rc != 0
            assert b"num_threads must be" in m._lib.ait_last_error()
        check(m.run(feeds), want, TOL)


def test_cli_threads(built, tmp_path):
    work, outs, feeds, want = built
    np.save(tmp_path / "x.npy", feeds["x"])
    run = subprocess.run([sys.executable, "-m", "aitgen", "run", str(work), "--input", f"x={tmp_path / 'x.npy'}",
                          "--threads", "1", "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    check({"logits": np.load(tmp_path / "out" / "logits.npy")}, want, TOL)
    bench = subprocess.run([sys.executable, "-m", "aitgen", "bench", str(work), "--threads", "1", "--iters", "3",
                            "--json"], capture_output=True, text=True)
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["median_ms"] > 0
    bad = subprocess.run([sys.executable, "-m", "aitgen", "bench", str(work), "--threads", "0"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "--threads must be at least 1" in bad.stderr


@pytest.mark.cuda_compile
def test_gpu_models_refuse_a_thread_count(tmp_path):
    pytest.importorskip("cuda", reason="the cuda extra (cuda-python) is needed for the mock device")
    x = ag.Tensor([4, 8], name="x")
    work = ag.compile_model({"y": ops.relu(x)}, target="cuda", arch="sm_80", workdir=tmp_path, load=False)
    with pytest.raises(AitgenError, match="num_threads applies to CPU models"):
        ag.Model.load(work, mock_device=True, num_threads=1)
    with ag.Model.load(work, mock_device=True) as m:
        with pytest.raises(AitgenError, match="num_threads applies to CPU models"):
            m.set_num_threads(1)


@pytest.mark.parametrize("kind", ["mean", "sum", "max", "var"])
def test_column_reductions_split_their_channels_across_threads_with_the_same_bits(tmp_path, kind):
    """A global pool over [N, H, W, C] (squeeze-excite, after sink_permutes) reduces rows with the
    channels as vector lanes; with fewer channel blocks than threads the blocks narrow so every thread
    works. Each output sums the same rows in the same order at any width: the bits match 1 thread's."""
    x = ag.Tensor([1, 40, 30, 200], name="x")
    y = getattr(ops, f"reduce_{kind}")(x, axes=[1, 2], keepdims=True)
    outs = {"y": y}
    ag.compile_model(outs, target="cpu", workdir=tmp_path / "w")
    feeds = {"x": S.rand((1, 40, 30, 200))}
    want = ag.reference.run(outs, feeds)
    got = {}
    with ag.Model.load(tmp_path / "w") as m:
        for n in (1, 2, 5):
            m.set_num_threads(n)
            got[n] = m.run(feeds)["y"]
    check({"y": got[1]}, want, TOL)
    np.testing.assert_array_equal(got[2], got[1])
    np.testing.assert_array_equal(got[5], got[1])
