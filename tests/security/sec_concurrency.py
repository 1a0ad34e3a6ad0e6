"""Concurrency attacks: set_constants swapping whole weight sets under running threads (every run sees
all old or all new constants), builds of different weights into one workdir from threads and from
processes (every returned model computes its own weights), and graphs with a cycle (a typed error,
never a hang)."""
from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path

import numpy as np

import aitgen as ag
from aitgen import ops
from aitgen.errors import AitgenError, GraphError

import sec_model


def swaps(workdir: str, runs: int = 2000, runners: int = 3) -> dict:
    outs, _ = sec_model.build(0)
    model = ag.compile_model(outs, target="cpu", workdir=workdir, num_runtimes=runners)
    sets = [sec_model.weights(0), sec_model.weights(1)]
    feeds = sec_model.feeds(np.random.default_rng(5), 4)
    wants = [sec_model.oracle(feeds, s) for s in sets]
    stop = threading.Event()
    mixed, done, errors = [0], [0], []

    def swapper():
        k = 0
        while not stop.is_set():
            k ^= 1
            model.set_constants(sets[k])

    def runner(n):
        for _ in range(n):
            try:
                got = model.run(feeds)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {e}")
                continue
            if not any(sec_model.close(got, w, tol=1e-5) for w in wants):
                mixed[0] += 1
            done[0] += 1

    sw = threading.Thread(target=swapper)
    sw.start()
    ts = [threading.Thread(target=runner, args=(runs // runners,)) for _ in range(runners)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    sw.join()
    model.close()
    return {"runs": done[0], "mixed": mixed[0], "errors": len(errors), "first_errors": errors[:5]}


def _build_one(workdir: str, seed: int, out):
    outs, _ = sec_model.build(seed)
    try:
        m = ag.compile_model(outs, target="cpu", workdir=workdir)
        feeds = sec_model.feeds(np.random.default_rng(seed), 2)
        ok = sec_model.close(m.run(feeds), sec_model.oracle(feeds, sec_model.weights(seed)))
        m.close()
        out.append("own" if ok else "other")
    except Exception as e:  # noqa: BLE001
        out.append(f"{type(e).__name__}: {e}")


def _proc_build(workdir: str, seed: int, q):
    out: list = []
    _build_one(workdir, seed, out)
    q.put(out[0])


def builds(workdir: str, trials: int = 5) -> dict:
    results: list[str] = []
    for t in range(trials):
        d = str(Path(workdir) / f"threads{t}")
        ts = [threading.Thread(target=_build_one, args=(d, 10 * t + k, results)) for k in range(2)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
    ctx = mp.get_context("spawn")
    for t in range(trials):
        q = ctx.Queue()
        d = str(Path(workdir) / f"procs{t}")
        ps = [ctx.Process(target=_proc_build, args=(d, 100 + 10 * t + k, q)) for k in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(600)
        results += [q.get(timeout=5) if not q.empty() else f"process exit {p.exitcode}" for p in ps]
    return {"builds": len(results), "own_weights": results.count("own"), "other_weights": results.count("other"),
            "failed": [r for r in results if r not in ("own", "other")][:5]}


def cycles(workdir: str) -> dict:
    """Mutate op inputs into cycles of several lengths; compile and the oracle must raise GraphError."""
    outcomes = {}
    for length in (1, 2, 5):
        x = ag.Tensor([4], "float32", name="x")
        chain = [ops.relu(x)]
        for _ in range(length):
            chain.append(ops.exp(chain[-1]))
        first = chain[0].producer
        first.inputs[0] = chain[-1]  # the first op now reads the last: a cycle of `length + 1` ops
        chain[-1].users.append(first)
        for what, fn in (("compile", lambda: ag.compile_model({"y": chain[-1]}, target="cpu",
                                                             workdir=str(Path(workdir) / f"c{length}"), load=False)),
                         ("oracle", lambda: ag.reference.run({"y": chain[-1]}, {"x": np.ones(4, np.float32)}))):
            t0 = time.perf_counter()
            try:
                fn()
                outcomes[f"{what}/{length}"] = "accepted"
            except GraphError:
                outcomes[f"{what}/{length}"] = "GraphError"
            except AitgenError as e:
                outcomes[f"{what}/{length}"] = type(e).__name__
            except Exception as e:  # noqa: BLE001
                outcomes[f"{what}/{length}"] = f"untyped {type(e).__name__}: {e}"
            outcomes[f"{what}/{length}/s"] = round(time.perf_counter() - t0, 2)
    return outcomes
