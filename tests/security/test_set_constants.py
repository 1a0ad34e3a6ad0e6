"""Model.set_constants is atomic and checked: a run sees all old or all new constants while another
thread swaps whole weight sets; name, dtype and shape are checked against model.json; a bad entry
changes nothing (through Python and through the C API); two swappers at once do not deadlock."""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import RuntimeInputError, RuntimeInputTypeError

RUNTIMES = 3
SHAPES = {"w1": (16, 16), "b1": (16,), "w2": (8, 16), "b2": (8,)}


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}


A, B = _weights(1), _weights(2)


def _graph(w: dict[str, np.ndarray]):
    """Two linear layers: each output number depends on every constant, so a mix shows."""
    x = ag.Tensor([ag.IntVar("n", 1, 4), 16], name="x")
    c = {k: ag.constant(v.copy(), name=k) for k, v in w.items()}
    h = ops.relu(ops.linear(x, c["w1"], c["b1"]))
    return {"y": ops.linear(h, c["w2"], c["b2"])}


X = {"x": np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)}
REF = {"A": ag.reference.run(_graph(A), X)["y"], "B": ag.reference.run(_graph(B), X)["y"]}
TOL = 1e-5


def _which(y: np.ndarray) -> str:
    """'A' or 'B' when y is that weight set's oracle result (within TOL), else 'mix'."""
    for k, ref in REF.items():
        if np.allclose(y, ref, rtol=TOL, atol=TOL):
            return k
    return "mix"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("setc") / "m"
    ag.compile_model(_graph(A), target="cpu", workdir=work, load=False)
    return work


@pytest.fixture
def model(workdir):
    with ag.Model.load(workdir, num_runtimes=RUNTIMES) as m:
        assert _which(m.run(X)["y"]) == "A"
        yield m


def test_swap_while_running_never_mixes(model):
    n_runs, seen, errors = 2000, {"A": 0, "B": 0, "mix": 0}, []
    lock, stop = threading.Lock(), threading.Event()

    def swapper():
        i = 0
        while not stop.is_set():
            model.set_constants(B if i % 2 == 0 else A)
            i += 1

    def runner(count: int):
        try:
            for _ in range(count):
                k = _which(model.run(X)["y"])
                with lock:
                    seen[k] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    swap = threading.Thread(target=swapper, daemon=True)
    runners = [threading.Thread(target=runner, args=(n_runs // 3 + (t < n_runs % 3),), daemon=True) for t in range(3)]
    swap.start()
    for t in runners:
        t.start()
    for t in runners:
        t.join(300)
    stop.set()
    swap.join(60)
    assert not errors, errors[:3]
    assert sum(seen.values()) == n_runs
    assert seen["mix"] == 0, f"{seen['mix']} of {n_runs} runs saw a mix of two weight sets: {seen}"
    assert seen["A"] and seen["B"], seen   # the swaps did happen during the runs


@pytest.mark.parametrize("bad", [[("w1", A["w1"])], None, "w1", ("w1",), 3],
                         ids=["list", "none", "str", "tuple", "int"])
def test_not_a_dict_is_a_type_error(model, bad):
    with pytest.raises(RuntimeInputTypeError, match="dict"):
        model.set_constants(bad)
    assert _which(model.run(X)["y"]) == "A"


BAD_ENTRIES = [
    ("unknown name", {"nope": A["b1"]}, RuntimeInputError, "'nope'"),
    ("non-str name", {1: A["b1"]}, RuntimeInputTypeError, "strings"),
    ("wrong dtype", {"b1": A["b1"].astype(np.float64)}, RuntimeInputError, "'b1'.*float64"),
    ("same bytes other shape", {"w1": B["w1"].reshape(4, 64)}, RuntimeInputError, r"'w1'.*\[4, 64\]"),
    ("bias as a matrix", {"b1": np.zeros((4, 4), np.float32)}, RuntimeInputError, "'b1'.*shape"),
    ("wrong size", {"b2": np.zeros(9, np.float32)}, RuntimeInputError, "'b2'"),
    ("list value", {"b1": B["b1"].tolist()}, RuntimeInputTypeError, "'b1'.*numpy array"),
    ("none value", {"b1": None}, RuntimeInputTypeError, "'b1'"),
    ("object array", {"b1": B["b1"].astype(object)}, RuntimeInputError, "'b1'"),
    # Every entry is checked before any is written: the good first ones must not land either.
    ("bad last of many", {"w1": B["w1"], "b1": B["b1"], "w2": B["w2"], "b2": B["b2"][:4]}, RuntimeInputError, "'b2'"),
]


@pytest.mark.parametrize("case,values,error,match", BAD_ENTRIES, ids=[b[0] for b in BAD_ENTRIES])
def test_bad_entry_changes_nothing(model, case, values, error, match):
    with pytest.raises(error, match=match):
        model.set_constants(values)
    assert _which(model.run(X)["y"]) == "A"
    model.set_constants(B)   # the model still takes a good set
    assert _which(model.run(X)["y"]) == "B"


def test_strided_and_empty_updates(model):
    model.set_constants({})
    assert _which(model.run(X)["y"]) == "A"
    wide = np.repeat(B["w1"], 2, axis=1)[:, ::2]   # a non-contiguous view of B's w1
    model.set_constants({**B, "w1": wide})
    assert _which(model.run(X)["y"]) == "B"


def test_c_api_checks_every_entry_before_writing(model):
    """ait_model_set_constants itself: a wrong size in the last entry leaves the first unwritten."""
    lib = model._lib
    names = (ctypes.c_char_p * 2)(b"w1", b"b1")
    w1, b1 = np.ascontiguousarray(B["w1"]), np.ascontiguousarray(B["b1"])
    data = (ctypes.c_void_p * 2)(w1.ctypes.data, b1.ctypes.data)
    assert lib.ait_model_set_constants(model._handle, 2, names, data, (ctypes.c_int64 * 2)(w1.nbytes, 60)) == 1
    assert b"'b1' has 64 bytes, got 60" in lib.ait_last_error()
    twice = (ctypes.c_char_p * 2)(b"w1", b"w1")
    assert lib.ait_model_set_constants(model._handle, 2, twice, data, (ctypes.c_int64 * 2)(w1.nbytes, w1.nbytes)) == 1
    assert b"given twice" in lib.ait_last_error()
    assert lib.ait_model_set_constants(model._handle, -1, None, None, None) == 1
    assert _which(model.run(X)["y"]) == "A"


def test_concurrent_swappers_do_not_deadlock(workdir):
    """Several set_constants at once each took some of the runtimes and waited for the rest forever
    (before the fix: within a few thousand calls with many runtimes)."""
    errors: list[str] = []

    def swap(m, first):
        try:
            for i in range(5000):
                m.set_constants({"b1": (A, B)[(i + first) % 2]["b1"]})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    def run(m):
        try:
            for _ in range(300):
                y = m.run(X)["y"]
                assert np.isfinite(y).all()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    m = ag.Model.load(workdir, num_runtimes=64)
    threads = [threading.Thread(target=swap, args=(m, k), daemon=True) for k in range(3)]
    threads.append(threading.Thread(target=run, args=(m,), daemon=True))
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        _NEVER_CLOSED.append(m)   # destroying it under the waiting threads would crash the process
        pytest.fail("set_constants deadlocked")
    assert not errors, errors[:3]
    m.set_constants(B)
    assert _which(m.run(X)["y"]) == "B"
    m.close()


_NEVER_CLOSED: list = []
