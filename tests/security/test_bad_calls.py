"""Bad calls to a loaded model are typed, cheap and harmless: run/benchmark with something other
than a dict, input values that are not arrays, shapes far out of bounds given as broadcast views
(refused before any copy), odd layouts (negative strides, Fortran order, unaligned, zero-size) that
give the right answer, and a good call right after every bad one that matches the oracle."""
from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import ModelError, RuntimeInputError, RuntimeInputTypeError

N_MAX, M_MAX = 16, 8


def _graph():
    n = ag.IntVar("n", 0, N_MAX)   # may be empty
    m = ag.IntVar("m", 1, M_MAX)
    x = ag.Tensor([n, 8], name="x")
    y = ag.Tensor([m, 4], name="y")
    s = ag.Tensor([4], name="s")
    w = ag.constant(np.linspace(-1, 1, 8, dtype=np.float32), name="w")
    return {"a": ops.relu(x * w), "b": y * s + 1.0}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    with ag.compile_model(_graph(), target="cpu", workdir=tmp_path_factory.mktemp("bad") / "m") as m:
        yield m


def _feeds(n: int = 3, m: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 8)).astype(np.float32), "y": rng.standard_normal((m, 4)).astype(np.float32),
            "s": rng.standard_normal(4).astype(np.float32)}


def _check(model, feeds) -> None:
    """The model's answer equals the oracle's (element-wise float32: within 1e-6)."""
    got, ref = model.run(feeds), ag.reference.run(_graph(), {k: np.asarray(v) for k, v in feeds.items()})
    assert set(got) == set(ref)
    for k in ref:
        assert got[k].shape == ref[k].shape and got[k].dtype == ref[k].dtype, k
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6, err_msg=k)


def _still_good(model) -> None:
    _check(model, _feeds(5, 3, seed=9))


NOT_A_DICT = {"list": lambda f: list(f.values()), "tuple": lambda f: tuple(f.values()), "array": lambda f: f["x"],
              "none": lambda f: None, "string": lambda f: "x", "set": lambda f: set(f), "int": lambda f: 3,
              "pairs": lambda f: list(f.items())}


@pytest.mark.parametrize("case", list(NOT_A_DICT))
def test_run_and_benchmark_take_only_a_dict(model, case):
    arg = NOT_A_DICT[case](_feeds())
    with pytest.raises(RuntimeInputTypeError, match="dict"):
        model.run(arg)
    with pytest.raises(RuntimeInputTypeError, match="dict"):
        model.benchmark(arg, iters=2, warmup=1)
    _still_good(model)


VALUES = {"list": lambda a: a.tolist(), "none": lambda a: None, "string": lambda a: "x", "int": lambda a: 1,
          "dict": lambda a: {"x": a}, "bytes": lambda a: a.tobytes(), "scalar": lambda a: np.float32(1.0)}


@pytest.mark.parametrize("case", list(VALUES))
def test_input_value_that_is_not_an_array(model, case):
    feeds = _feeds()
    feeds["x"] = VALUES[case](feeds["x"])
    with pytest.raises(RuntimeInputTypeError, match="'x'"):
        model.run(feeds)
    _still_good(model)


class _LyingTensor:
    """Claims the DLPack protocol and breaks it."""

    def __init__(self, device):
        self.device = device

    def __dlpack_device__(self):
        if isinstance(self.device, Exception):
            raise self.device
        return self.device

    def __dlpack__(self, stream=None):
        raise BufferError("no")


@pytest.mark.parametrize("device", [ValueError("boom"), None, (1,), (1, 0)], ids=["raises", "none", "short", "cpu"])
def test_broken_dlpack_objects_are_typed(model, device):
    feeds = {**_feeds(), "x": _LyingTensor(device)}
    with pytest.raises(RuntimeInputError, match="'x'"):
        model.run(feeds)
    _still_good(model)


def test_non_string_key_is_typed(model):
    with pytest.raises(RuntimeInputTypeError, match="strings"):
        model.run({**_feeds(), 1: np.zeros(3)})
    _still_good(model)


BIG = 3 * 10**7


@pytest.mark.parametrize("which,shape", [("x", (BIG, 8)), ("y", (BIG, 4)), ("s", (BIG,)), ("x", (3, BIG))],
                         ids=["dynamic x", "dynamic y", "static input", "static dim"])
def test_huge_broadcast_input_is_refused_before_any_copy(model, which, shape):
    feeds = _feeds()
    feeds[which] = np.broadcast_to(np.float32(0), shape)   # 4 real bytes, all strides 0
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(RuntimeInputError, match=f"'{which}'"):
            model.run(feeds)
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Before the check moved ahead of the copy: 2.4 GB allocated and ~9 s for (3e7, 8).
    assert elapsed < 1.0 and peak < (1 << 20), (elapsed, peak)
    _still_good(model)


@pytest.mark.parametrize("case", ["broadcast", "negative strides", "fortran", "unaligned", "read-only", "empty n"])
def test_odd_layouts_give_the_right_answer(model, case):
    feeds = _feeds(4, 3, seed=2)
    x = feeds["x"]
    if case == "broadcast":      # stride 0, within bounds
        feeds["x"] = np.broadcast_to(x[:1], (N_MAX, 8))
    elif case == "negative strides":
        feeds["x"], feeds["y"] = x[::-1, ::-1], feeds["y"][::-1]
    elif case == "fortran":
        feeds["x"] = np.asfortranarray(x)
    elif case == "unaligned":    # contiguous, but one byte off float alignment
        raw = np.zeros(x.nbytes + 1, np.uint8)
        feeds["x"] = raw[1:].view(np.float32).reshape(x.shape)
        feeds["x"][...] = x
        assert not feeds["x"].flags.aligned
    elif case == "read-only":
        x.flags.writeable = False
    else:
        feeds["x"] = np.zeros((0, 8), np.float32)
    _check(model, feeds)


BAD_ARRAYS = {
    "object": lambda f: {**f, "x": f["x"].astype(object)},
    "structured": lambda f: {**f, "x": np.zeros((3, 8), [("a", np.float32)])},
    "float64": lambda f: {**f, "x": f["x"].astype(np.float64)},
    "big-endian": lambda f: {**f, "x": f["x"].astype(">f4")},
    "rank 0": lambda f: {**f, "s": np.array(1.0, np.float32)},
    "zero below bound": lambda f: {**f, "y": np.zeros((0, 4), np.float32)},
    "static dim zero": lambda f: {**f, "s": np.zeros(0, np.float32)},
    "one above bound": lambda f: {**f, "x": np.zeros((N_MAX + 1, 8), np.float32)},
    "missing": lambda f: {k: v for k, v in f.items() if k != "y"},
    "unknown": lambda f: {**f, "q": f["x"]},
}


@pytest.mark.parametrize("case", list(BAD_ARRAYS))
def test_bad_arrays_are_typed(model, case):
    feeds = BAD_ARRAYS[case](_feeds())
    with pytest.raises(RuntimeInputError):
        model.run(feeds)
    _still_good(model)


@pytest.mark.parametrize("iters,warmup,error", [(0, 1, RuntimeInputError), (-3, 1, RuntimeInputError),
                                                ("5", 1, RuntimeInputTypeError), (2, True, RuntimeInputTypeError),
                                                (2, 1.5, RuntimeInputTypeError)])
def test_benchmark_counts_are_checked(model, iters, warmup, error):
    with pytest.raises(error, match="iters|warmup"):
        model.benchmark(_feeds(), iters=iters, warmup=warmup)
    assert model.benchmark(_feeds(), iters=2, warmup=0)["iters"] == 2


def test_closed_model_is_a_model_error(model):
    m = ag.Model.load(model.workdir)
    m.close()
    with pytest.raises(ModelError, match="closed"):
        m.run(_feeds())
    with pytest.raises(ModelError, match="closed"):
        m.set_constants({})
