"""The mock device (aitgen/runtime/mock.py, backends/cuda/mock/): a CUDA build's host side runs
here with no GPU; every launch is recorded and checked. Planted faults must be caught, and every
CUDA call a run makes must have its status checked (fault injection). The tests that build need nvcc
and CUTLASS (the cuda extra): they are in the cuda_compile tier, CI's step with that extra."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen.errors import AitgenError, MockDeviceError, ModelError
from aitgen.runtime import artifacts
from aitgen.runtime.mock import MockDevice
from aitgen.runtime.model import Model

HERE = Path(__file__).resolve().parent


def mlp(precision_input: str = "float32"):
    rng = np.random.default_rng(0)
    x = ag.Tensor([ag.IntVar("b", 1, 16), 64], dtype=precision_input, name="x")
    w = ag.constant(rng.standard_normal((64, 32)).astype("float32"), name="w")
    bias = ag.constant(rng.standard_normal((32,)).astype("float32"), name="bias")
    return ag.ops.relu(ag.ops.matmul(x, w) + bias)


def build(tmp_path_factory, name: str, arch: str, flags=()) -> Path:
    work = tmp_path_factory.mktemp(name)
    return ag.compile_model(mlp(), target="cuda", arch=arch, precision="float16", workdir=work, load=False,
                            extra_flags=list(flags))


@pytest.fixture(scope="module")
def mlp_sm80(cuda_toolchain, tmp_path_factory) -> Path:
    return build(tmp_path_factory, "mlp80", "sm_80")


def feeds(b: int = 4) -> dict:
    return {"x": np.ones((b, 64), np.float32)}


@pytest.mark.cuda_compile
def test_mock_run_checks_every_launch(mlp_sm80):
    meta = json.loads((mlp_sm80 / "model.json").read_text())
    with Model.load(mlp_sm80, mock_device=True) as m:
        out = m.run(feeds())
        assert out["output_0"].shape == (4, 32)   # shapes bound and outputs copied back, values not computed
        run = m.mock_run()
    assert not run.failures
    # One launch per kernel call of the run sequence (casts, the GEMM with its fused bias+relu, cast back).
    assert len(run.launches) == len(meta["mock"]["nodes"]) == 3
    gemm = [ln for ln in run.launches if "cutlass" in ln.kernel]
    assert len(gemm) == 1 and gemm[0].op and gemm[0].shared_bytes > 0 and len(gemm[0].pointers) >= 3
    assert all(ln.stream >= 2 and not ln.from_graph for ln in run.launches)   # the model's own stream
    assert run.operands == sum(len(r) for r in meta["mock"]["nodes"])


@pytest.mark.cuda_compile
def test_mock_run_with_cuda_graphs_replays_the_capture(mlp_sm80):
    with Model.load(mlp_sm80, mock_device=True, cuda_graph=True) as m:
        graphs = []
        for b in (4, 4, 4, 8):
            m.run(feeds(b))
            graphs.append([ln.from_graph for ln in m.launch_log()])
    # eager for new dims, then captured and replayed; new dims run eagerly first again.
    assert graphs == [[False] * 3, [True] * 3, [True] * 3, [False] * 3]


@pytest.mark.cuda_compile
def test_launch_log_needs_the_mock(mlp_sm80):
    with Model.load(mlp_sm80, mock_device=True) as m:
        with pytest.raises(AitgenError, match="no run on the mock device yet"):
            m.launch_log()


@pytest.mark.cuda_compile
def test_every_cuda_call_of_a_run_has_its_status_checked(mlp_sm80):
    """Fault injection: failing each CUDA call of a run in turn must fail that run with an error
    (never pass silently or crash), and the next run must pass."""
    with Model.load(mlp_sm80, mock_device=True) as m:
        m.run(feeds())                       # staging buffers are allocated by the first run
        m.run(feeds())
        mock: MockDevice = m._mock
        calls = mock.api_calls()
        assert calls >= 6
        unchecked = []
        try:
            for i in range(calls):
                mock.fail_at(i)
                try:
                    m.run(feeds())
                    unchecked.append(i)
                except (ModelError, AitgenError) as e:
                    assert "injected" in str(e) or "cudaErrorUnknown" in str(e) or "failed" in str(e), str(e)
                mock.fail_at(-1)
                m.run(feeds())                   # usable again
        finally:
            mock.fail_at(-1)
    assert unchecked == [], f"CUDA calls #{unchecked} of a run failed without failing the run"


@pytest.mark.cuda_compile
def test_planted_misaligned_constants_are_caught(cuda_toolchain, tmp_path_factory):
    work = build(tmp_path_factory, "skew", "sm_80", ["-DAIT_PLANT_CONSTANT_SKEW=2"])
    with Model.load(work, mock_device=True) as m:
        with pytest.raises(MockDeviceError, match="not 16-byte aligned, as its kernel requires") as e:
            m.run(feeds())
        assert "'" in str(e.value)   # names the node and op at fault


@pytest.mark.cuda_compile
def test_planted_short_arena_is_caught(cuda_toolchain, tmp_path):
    x = ag.Tensor([64, 64], dtype="float32", name="x")
    y = ag.ops.relu(ag.ops.tanh(x) * x) - x   # arena intermediates, own kernels only: a quick build
    work = ag.compile_model({"y": ag.ops.sigmoid(y)}, target="cuda", arch="sm_80", workdir=tmp_path / "m",
                            load=False, fusion=False, extra_flags=["-DAIT_PLANT_ARENA_SHORTFALL=256"])
    with Model.load(work, mock_device=True) as m:
        with pytest.raises(MockDeviceError, match="not inside a live allocation"):
            m.run({"x": np.ones((64, 64), np.float32)})


@pytest.fixture(scope="module")
def planted(mlp_sm80, tmp_path_factory):
    """tests/backends/cuda/mock/plant.cu built against the mock runtime of a build, loaded."""
    from aitgen.codegen import locate
    runtime, _, _ = artifacts.mock_files(artifacts.read_artifacts(mlp_sm80))
    out = tmp_path_factory.mktemp("plant") / "plant.so"
    subprocess.run([str(locate.nvcc().path), "-shared", "-Xcompiler=-fPIC", "-cudart=none",
                    "-gencode=arch=compute_80,code=sm_80", str(HERE / "plant.cu"), str(runtime), "-o", str(out)],
                   check=True, capture_output=True, timeout=300)
    mock = MockDevice.get(runtime)
    mock.configure("sm_80")
    lib = mock.load_library(out)
    lib.plant.argtypes = [ctypes.c_int]

    def run(mode: int):
        mock.begin([])
        assert lib.plant(mode) == 0
        return mock.collect([])
    return run


@pytest.mark.cuda_compile
def test_planted_race_between_streams_is_caught(planted):
    ordered = planted(0)
    assert not ordered.failures and len(ordered.launches) == 2
    assert {ln.stream for ln in ordered.launches} == {ordered.launches[0].stream, ordered.launches[1].stream}
    race = planted(1)
    assert len(race.failures) == 1
    assert "k_read" in race.failures[0] and "no event or synchronisation ordering them" in race.failures[0]


@pytest.mark.cuda_compile
def test_planted_out_of_range_pointer_is_caught(planted):
    run = planted(2)
    assert len(run.failures) == 1 and "lies in no allocation" in run.failures[0] and "k_write" in run.failures[0]


@pytest.mark.cuda_compile
def test_allocation_during_capture_is_caught(planted):
    run = planted(3)
    assert any("cudaMalloc while stream" in f and "captured" in f for f in run.failures), run.failures


@pytest.mark.cuda_compile
def test_cli_run_mock_device(mlp_sm80, capsys):
    from aitgen.cli import main
    assert main(["run", str(mlp_sm80), "--mock-device", "--cuda-graph"]) == 0
    out = capsys.readouterr().out
    assert "mock run: 3 launches, all checks passed" in out


def test_cpu_builds_have_no_mock_variant(tmp_path):
    x = ag.Tensor([2, 4], name="x")
    work = ag.compile_model(ag.ops.relu(x), target="cpu", workdir=tmp_path / "m", load=False)
    with pytest.raises(ModelError, match="no mock-device variant"):
        Model.load(work, mock_device=True)


@pytest.mark.cuda_compile
def test_tampered_mock_library_is_refused(mlp_sm80, tmp_path):
    import shutil
    work = tmp_path / "w"
    shutil.copytree(mlp_sm80, work)
    meta = json.loads((work / "model.json").read_text())
    lib = work / meta["mock"]["library"]
    data = bytearray(lib.read_bytes())
    data[-1] ^= 1
    lib.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="does not match model.json's mock.library_sha256"):
        Model.load(work, mock_device=True)
    meta["mock"]["library"] = "../evil.so"
    (work / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="unexpected form"):
        Model.load(work, mock_device=True)
    assert os.path.exists(lib)


@pytest.mark.cuda_compile
def test_run_orders_itself_after_the_callers_stream(mlp_sm80):
    """Work the caller queued on its stream (torch's current one: it may still use the memory handed
    out for the outputs) must come before the run's kernels: without the event the mock sees a race."""
    with Model.load(mlp_sm80, mock_device=True) as m:
        m.run(feeds())
        rt = m._mock.cudart
        err, caller = rt.cudaStreamCreateWithFlags(1)   # non-blocking, as torch's side streams
        assert err == 0
        staging = m._io._staging.get_nowait()
        m._io._staging.put(staging)
        out = staging["out:output_0"]
        for stream, race in ((caller, False), (None, True)):
            assert rt.cudaMemsetAsync(out.ptr, 0, out.nbytes, caller)[0] == 0
            if race:
                with pytest.raises(MockDeviceError, match="cudaMemsetAsync writes on stream"):
                    m.run(feeds(), stream=stream)
            else:
                m.run(feeds(), stream=stream)
            rt.cudaStreamSynchronize(caller)
        with pytest.raises(ag.errors.RuntimeInputTypeError, match="stream must be"):
            m.run(feeds(), stream="s")


@pytest.mark.cuda_compile
def test_cuda_graphs_are_on_by_default_for_static_shapes(cuda_toolchain, mlp_sm80, tmp_path):
    x = ag.Tensor([8, 16], dtype="float16", name="x")
    work = ag.compile_model(ag.ops.sigmoid(x) * 2.0, target="cuda", arch="sm_80", workdir=tmp_path / "s", load=False)
    assert json.loads((work / "model.json").read_text())["cuda_graph"] is True
    assert json.loads((mlp_sm80 / "model.json").read_text())["cuda_graph"] is False   # a dynamic batch
    with Model.load(work, mock_device=True) as m:
        seen = []
        for _ in range(3):
            m.run({"x": np.ones((8, 16), np.float16)})
            seen.append(all(ln.from_graph for ln in m.launch_log()))
    assert seen == [False, True, True]
    with pytest.raises(ag.errors.RuntimeInputTypeError, match="cuda_graph must be"):
        ag.compile_model(ag.ops.sigmoid(x), target="cuda", arch="sm_80", workdir=tmp_path / "t", load=False,
                         cuda_graph="yes")


@pytest.mark.cuda_compile
def test_an_output_named_like_an_input_keeps_its_own_staging(cuda_toolchain, tmp_path):
    """An output may share its name with an input ({"x": f(x)}): the staging buffers of the two are
    sized apart (the input's 64x16, not the output's 64), so the input's copy stays in bounds."""
    from aitgen import ops
    x = ag.Tensor([ag.IntVar("b", 1, 64), 16], dtype="float16", name="x")
    work = ag.compile_model({"x": ops.reduce_sum(x, axes=-1)}, target="cuda", arch="sm_80", workdir=tmp_path / "m",
                            load=False)
    with Model.load(work, mock_device=True) as m:
        for rows in (64, 3, 64):
            assert m.run({"x": np.ones((rows, 16), np.float16)})["x"].shape == (rows,)
            assert not m.mock_run().failures
