"""Seeded fuzzing of a compiled model's Python API: bad calls to run / set_constants / benchmark
interleaved with good ones. Every bad call must raise a typed aitgen error (or, where the call is
in fact valid, give the right answer); every good call must equal the oracle for the constants the
model holds at that moment. Runs in a child process (sec_isolated), so a crash is a failure too."""
from __future__ import annotations

import collections
import os
import time

import numpy as np

import aitgen as ag
from aitgen.errors import AitgenError

import sec_model

ERROR, OK, EITHER = "error", "ok", "either"  # what a mutated call must do


def _bad_runs(rng: np.random.Generator, good: dict) -> list[tuple[str, object, str]]:
    """(label, the argument of run(), expectation) — one of each kind, with random details."""
    b = int(rng.integers(1, sec_model.BATCH_MAX + 1))
    x, m = good["x"], good["m"]
    big = np.broadcast_to(np.float32(1), (30_000_000, 16))  # 30M rows, 4 real bytes
    return [
        ("list", [x, m], ERROR), ("tuple", (x, m), ERROR), ("array", x, ERROR), ("none", None, ERROR),
        ("str", "x", ERROR), ("set", {"x"}, ERROR), ("int", 7, ERROR), ("bytes", b"x", ERROR),
        ("missing", {"x": x}, ERROR), ("unknown", {**good, "zz": x}, ERROR),
        ("nonstr_key", {1: x, "m": m}, ERROR), ("bytes_key", {b"x": x, "m": m}, ERROR),
        ("value_list", {"x": x.tolist(), "m": m}, ERROR), ("value_none", {"x": None, "m": m}, ERROR),
        ("value_str", {"x": "abc", "m": m}, ERROR), ("value_int", {"x": 3, "m": m}, ERROR),
        ("f64", {"x": x.astype(np.float64), "m": m}, ERROR), ("i32", {"x": x.astype(np.int32), "m": m}, ERROR),
        ("f16", {"x": x.astype(np.float16), "m": m}, ERROR), ("bool", {"x": x > 0, "m": m}, ERROR),
        ("complex", {"x": x.astype(np.complex64), "m": m}, ERROR),
        ("object", {"x": x.astype(object), "m": m}, ERROR),
        ("structured", {"x": np.zeros((b, 16), [("a", np.float32)]), "m": m}, ERROR),
        ("rank1", {"x": x.reshape(-1), "m": m}, ERROR), ("rank3", {"x": x[None], "m": m}, ERROR),
        ("scalar", {"x": np.float32(1), "m": m}, ERROR),
        ("batch0", {"x": x[:0], "m": m[:0]}, ERROR),
        ("batch_over", {"x": np.ones((sec_model.BATCH_MAX + 1, 16), np.float32),
                        "m": np.ones((sec_model.BATCH_MAX + 1, 8), np.float32)}, ERROR),
        ("broadcast_huge", {"x": big, "m": np.broadcast_to(np.float32(1), (30_000_000, 8))}, ERROR),
        ("static_dim", {"x": np.ones((b, 17), np.float32), "m": m}, ERROR),
        ("batch_disagree", {"x": x, "m": np.ones((x.shape[0] % sec_model.BATCH_MAX + 1, 8), np.float32)}, ERROR),
        ("noncontiguous", {"x": np.asfortranarray(x), "m": m[:, :]}, OK),
        ("transposed_view", {"x": np.ascontiguousarray(x.T).T, "m": m}, OK),
        ("negative_strides", {"x": x[::-1].copy()[::-1], "m": m[::-1][::-1]}, OK),
        ("readonly", {"x": _readonly(x), "m": m}, OK),
        ("misaligned", {"x": _misaligned(x), "m": m}, OK),
        ("nan_inf", {"x": _with_nonfinite(x, rng), "m": m}, OK),
        ("mapping_subclass", collections.OrderedDict(good), OK),
    ]


def _readonly(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def _misaligned(a):
    raw = np.zeros(a.nbytes + 1, np.uint8)
    v = raw[1:].view(np.float32).reshape(a.shape)
    v[...] = a
    return v


def _with_nonfinite(a, rng):
    a = a.copy()
    a.flat[int(rng.integers(a.size))] = np.nan
    a.flat[int(rng.integers(a.size))] = np.inf
    a.flat[int(rng.integers(a.size))] = -np.inf
    return a


def _bad_constants(rng, consts) -> list[tuple[str, object]]:
    w1 = consts["w1"]
    return [("list", [w1]), ("none", None), ("str", "w1"), ("unknown", {"nope": w1}),
            ("dtype", {"w1": w1.astype(np.float64)}), ("shape", {"w1": w1.reshape(16, 8)}),
            ("flat", {"b1": np.zeros((2, 4), np.float32)}), ("size", {"b1": np.zeros(9, np.float32)}),
            ("value_list", {"b1": [0.0] * 8}), ("half_bad", {"w1": w1, "b1": np.zeros(3, np.float32)}),
            ("nonstr_key", {3: w1})]


def _outcome(fn, expect: str, check) -> str:
    """'right', 'typed', or a description of the defect."""
    try:
        got = fn()
    except AitgenError as e:
        if expect == OK:
            return f"typed error for a valid call: {type(e).__name__}: {e}"
        return "typed" if str(e) else "typed error without a message"
    except Exception as e:  # noqa: BLE001 - the defect being counted
        return f"untyped {type(e).__name__}: {e}"
    if expect == ERROR:
        return "accepted a bad call"
    return "right" if check(got) else "wrong answer"


def fuzz(workdir: str, seed: int = 0, n_bad: int = 10_000, good_every: int = 4) -> dict:
    """Compile the model, then n_bad bad calls with a good call after every `good_every` of them."""
    outs, _ = sec_model.build(0)
    t0 = time.perf_counter()
    model = ag.compile_model(outs, target="cpu", workdir=workdir)
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    consts = sec_model.weights(0)
    counts: collections.Counter = collections.Counter()
    defects: list[str] = []
    n_good = 0
    t0 = time.perf_counter()
    for i in range(n_bad):
        good = sec_model.feeds(rng, int(rng.integers(1, sec_model.BATCH_MAX + 1)))
        kind = rng.integers(10)
        if kind < 8:  # run
            label, arg, expect = _pick(rng, _bad_runs(rng, good))
            res = _outcome(lambda: model.run(arg), expect,
                           lambda got: sec_model.close(got, sec_model.oracle(
                               {k: np.asarray(v) for k, v in dict(arg).items()}, consts)))
            label = "run/" + label
        elif kind == 8:  # set_constants: nothing may change when any entry is bad
            label, arg = _pick(rng, _bad_constants(rng, consts))
            res = _outcome(lambda: model.set_constants(arg), ERROR, None)
            label = "set_constants/" + label
        else:
            label, arg, _ = _pick(rng, _bad_runs(rng, good)[:12])
            res = _outcome(lambda: model.benchmark(arg, iters=1, warmup=0), ERROR, None)
            label = "benchmark/" + label
        counts[res if res in ("right", "typed") else "defect"] += 1
        if res not in ("right", "typed"):
            defects.append(f"{label}: {res}")
        if i % good_every == good_every - 1:
            if rng.integers(8) == 0:  # a good swap of every constant
                consts = sec_model.weights(int(rng.integers(1, 1 << 30)))
                model.set_constants(consts)
            got = model.run(good)
            n_good += 1
            if not sec_model.close(got, sec_model.oracle(good, consts)):
                defects.append(f"good call {n_good} after {label}: wrong answer")
    model.close()
    return {"bad_calls": n_bad, "good_calls": n_good, "typed_errors": counts["typed"],
            "valid_odd_calls_right": counts["right"], "defects": len(defects), "first_defects": defects[:20],
            "defect_kinds": sorted({d.split(":")[0] for d in defects})[:40],
            "build_s": round(build_s, 2), "fuzz_s": round(time.perf_counter() - t0, 2), "pid": os.getpid()}


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]
