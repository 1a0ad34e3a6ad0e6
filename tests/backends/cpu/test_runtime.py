"""The Model API over a built CPU library: run, specs, benchmark, set_constants, close, load in
another process, bad run-time input (typed, named, harmless), dynamic dims, outputs that alias
inputs/constants/each other, and concurrent runs on several runtimes.

One element-wise model serves most tests (module fixture: built once, loaded again per test where
a test mutates it). The thread test adds a GEMM and a layernorm when those kernels exist."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.lower import supported_kinds
from aitgen.errors import RuntimeInputError
from aitgen.runtime.model import ModelError

N_MAX = 16


def _graph():
    n = ag.IntVar("n", 1, N_MAX)
    x = ag.Tensor([n, 8], name="x")
    y = ag.Tensor([n, 8], name="y")
    s = ag.Tensor([4], name="s")            # a fully static input
    w = ag.constant(np.linspace(-1, 1, 8, dtype=np.float32), name="w")
    z = ops.relu(x * w + y)
    return {
        "z": z,
        "t": ops.tanh(z) - ops.sigmoid(y),
        "z_again": z,                     # the same tensor under two names
        "x_copy": x,                      # a graph input
        "w_copy": w,                      # a constant
        "x_view": ops.reshape(x, [n, 2, 4]),  # a view of an input
        "z_flat": ops.reshape(z, [n * 8]),    # a view of a computed tensor that is also an output
        "s2": s * 2.0,
        "h": ops.cast(x, "float16"),
        "gt": ops.greater(x, y),
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    outputs = _graph()
    workdir = tmp_path_factory.mktemp("runtime") / "m"
    model = ag.compile_model(outputs, target="cpu", workdir=workdir)
    yield outputs, workdir, model
    model.close()


def _feeds(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 8)).astype(np.float32),
            "y": rng.standard_normal((n, 8)).astype(np.float32),
            "s": rng.standard_normal(4).astype(np.float32)}


def _check(outputs, got, feeds, rtol=1e-5):
    ref = ag.reference.run(outputs, feeds)
    assert set(got) == set(ref)
    for k, r in ref.items():
        assert got[k].shape == r.shape and got[k].dtype == r.dtype, (k, got[k].shape, r.shape, got[k].dtype)
        if r.dtype.kind == "f" and r.dtype.itemsize >= 4:
            np.testing.assert_allclose(got[k], r, rtol=rtol, atol=1e-6, err_msg=k)
        else:   # copies, casts and comparisons are exact
            np.testing.assert_array_equal(got[k].astype(np.float32), r.astype(np.float32), err_msg=k)


@pytest.mark.parametrize("n", [1, 5, N_MAX])
def test_run_matches_oracle_at_actual_shapes(built, n):
    outputs, _, model = built
    got = model.run(_feeds(n, seed=n))
    assert got["z"].shape == (n, 8) and got["x_view"].shape == (n, 2, 4) and got["z_flat"].shape == (n * 8,)
    assert got["s2"].shape == (4,) and got["w_copy"].shape == (8,)
    _check(outputs, got, _feeds(n, seed=n))


def test_aliased_outputs_are_independent_copies(built):
    _, _, model = built
    feeds = _feeds(3)
    got = model.run(feeds)
    np.testing.assert_array_equal(got["z"], got["z_again"])
    np.testing.assert_array_equal(got["x_copy"], feeds["x"])
    np.testing.assert_array_equal(got["w_copy"], np.linspace(-1, 1, 8, dtype=np.float32))
    assert not np.shares_memory(got["z"], got["z_again"]) and not np.shares_memory(got["x_copy"], feeds["x"])
    got["z"][:] = 123.0   # writing one result changes nothing the model holds
    np.testing.assert_array_equal(model.run(feeds)["w_copy"], np.linspace(-1, 1, 8, dtype=np.float32))


def test_non_contiguous_input(built):
    outputs, _, model = built
    feeds = _feeds(4)
    wide = np.repeat(feeds["x"], 2, axis=1)
    feeds["x"] = wide[:, ::2]
    assert not feeds["x"].flags.c_contiguous
    _check(outputs, model.run(feeds), feeds)


def test_specs(built):
    _, _, model = built
    assert list(model.input_specs) == ["x", "y", "s"]
    x = model.input_specs["x"]
    assert (x.name, x.dtype, x.max_shape, x.rank) == ("x", ag.DType.float32, (N_MAX, 8), 2)
    assert model.input_specs["s"].max_shape == (4,)
    assert list(model.output_specs) == list(_graph())
    assert model.output_specs["z_flat"].max_shape == (N_MAX * 8,)
    assert model.output_specs["h"].dtype == ag.DType.float16
    assert model.output_specs["gt"].dtype == ag.DType.bool


def test_benchmark(built):
    _, _, model = built
    stats = model.benchmark(_feeds(N_MAX), iters=10, warmup=2)
    assert stats["iters"] == 10 and 0 < stats["min_ms"] <= stats["median_ms"] and stats["mean_ms"] > 0


BAD = [
    ("unknown name", lambda f: {**f, "q": f["x"]}, "q"),
    ("missing input", lambda f: {k: v for k, v in f.items() if k != "y"}, "y"),
    ("not an array", lambda f: {**f, "x": f["x"].tolist()}, "x"),
    ("wrong dtype", lambda f: {**f, "x": f["x"].astype(np.float64)}, "x"),
    ("wrong rank", lambda f: {**f, "x": f["x"].reshape(-1)}, "x"),
    ("wrong static dim", lambda f: {**f, "x": np.zeros((3, 9), np.float32)}, "x"),
    ("wrong static input", lambda f: {**f, "s": np.zeros(5, np.float32)}, "s"),
    ("dim above bound", lambda f: {**f, "x": np.zeros((N_MAX + 1, 8), np.float32),
                                   "y": np.zeros((N_MAX + 1, 8), np.float32)}, "x"),
    ("dim below bound", lambda f: {**f, "x": np.zeros((0, 8), np.float32), "y": np.zeros((0, 8), np.float32)}, "x"),
    ("IntVar disagrees", lambda f: {**f, "y": np.zeros((4, 8), np.float32)}, "y"),
]


@pytest.mark.parametrize("case,mutate,tensor", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_typed_named_and_harmless(built, case, mutate, tensor):
    outputs, _, model = built
    feeds = _feeds(3)
    with pytest.raises(RuntimeInputError, match=f"'{tensor}'"):
        model.run(mutate(feeds))
    _check(outputs, model.run(_feeds(7, seed=1)), _feeds(7, seed=1))


def test_set_constants(built):
    outputs, workdir, _ = built
    with ag.Model.load(workdir) as model:   # its own weights: the shared fixture stays untouched
        feeds = _feeds(5)
        new_w = np.full(8, 0.5, np.float32)
        model.set_constants({"w": new_w})
        got = model.run(feeds)
        np.testing.assert_array_equal(got["w_copy"], new_w)
        np.testing.assert_allclose(got["z"], np.maximum(feeds["x"] * 0.5 + feeds["y"], 0), rtol=1e-6)
        for bad, match in [({"nope": new_w}, "nope"), ({"w": np.zeros(9, np.float32)}, "'w'"),
                           ({"w": np.zeros(8, np.float64)}, "'w'"), ({"w": np.zeros(4, np.float16)}, "'w'")]:
            with pytest.raises(RuntimeInputError, match=match):
                model.set_constants(bad)
        np.testing.assert_array_equal(model.run(feeds)["w_copy"], new_w)   # the failed calls changed nothing
        model.set_constants({"w": np.linspace(-1, 1, 8, dtype=np.float32)})
        _check(outputs, model.run(feeds), feeds)
    _check(outputs, built[2].run(feeds), feeds)   # another Model of the same library was never affected


def test_close_and_context_manager(built):
    _, workdir, _ = built
    with ag.Model.load(workdir) as model:
        model.run(_feeds(2))
    with pytest.raises(ModelError, match="closed"):
        model.run(_feeds(2))
    model.close()   # twice is fine
    m2 = ag.Model.load(workdir)
    m2.close()
    with pytest.raises(ag.errors.AitgenError, match="no built model"):
        ag.Model.load(workdir / "missing")


def test_load_in_new_process_gives_identical_results(built, tmp_path):
    _, workdir, model = built
    feeds = _feeds(6, seed=3)
    np.savez(tmp_path / "in.npz", **feeds)
    script = textwrap.dedent(f"""
        import numpy as np, aitgen as ag
        feeds = dict(np.load({str(tmp_path / 'in.npz')!r}))
        with ag.Model.load({str(workdir)!r}) as m:
            np.savez({str(tmp_path / 'out.npz')!r}, **m.run(feeds))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    theirs = dict(np.load(tmp_path / "out.npz"))
    ours = model.run(feeds)
    assert set(theirs) == set(ours)
    for k in ours:
        assert theirs[k].dtype == ours[k].dtype and theirs[k].shape == ours[k].shape
        assert theirs[k].tobytes() == ours[k].tobytes(), k


# -- threads ------------------------------------------------------------------------------------

def _thread_graph():
    """A few element-wise ops, plus a linear layer and a layernorm when those kernels exist."""
    kinds = supported_kinds("cpu")
    b = ag.IntVar("b", 1, 8)
    x = ag.Tensor([b, 32], name="x")
    h = ops.gelu(x * 1.5 + 0.25)
    rng = np.random.default_rng(7)
    if ag.OpKind.GEMM in kinds:
        wt = ag.constant((rng.standard_normal((32, 32)) / 6).astype(np.float32), name="lin_w")
        bias = ag.constant(rng.standard_normal(32).astype(np.float32), name="lin_b")
        h = ops.linear(h, wt, bias)
    if ag.OpKind.LAYERNORM in kinds:
        h = ops.layernorm(h, ag.constant(np.ones(32, np.float32), name="ln_w"),
                          ag.constant(np.zeros(32, np.float32), name="ln_b"))
    return {"y": ops.tanh(h) + x, "m": ops.maximum(h, x)}


def test_concurrent_runs_are_bit_identical_to_serial(tmp_path):
    outputs = _thread_graph()
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / "mt", num_runtimes=4)
    n_threads, n_runs = 8, 200
    rng = np.random.default_rng(11)
    # Different inputs (and sizes) per run, so a runtime that leaked state between calls would show.
    feeds = [{"x": rng.standard_normal((int(rng.integers(1, 9)), 32)).astype(np.float32)} for _ in range(64)]
    serial = [model.run(f) for f in feeds]
    for f, got in zip(feeds[:4], serial):
        ref = ag.reference.run(outputs, f)
        for k in ref:   # GEMM/layernorm accumulate in another order than numpy
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5)
    errors: list[str] = []

    def worker(t: int) -> None:
        try:
            for i in range(n_runs):
                j = (t * 7 + i * 3) % len(feeds)
                if i % 25 == 0:   # a bad call in the mix must not disturb the runs around it
                    try:
                        model.run({"x": np.zeros((9, 32), np.float32)})
                        errors.append(f"thread {t}: an out-of-bounds input was accepted")
                    except RuntimeInputError:
                        pass
                got = model.run(feeds[j])
                for k, v in got.items():
                    if v.tobytes() != serial[j][k].tobytes():
                        errors.append(f"thread {t} run {i} output {k} differs")
                        return
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a run hung"
    assert not errors, errors[:5]
    model.close()
