"""Concurrent and interrupted builds (issue 10, item 4).

Two compiles of one graph shape with different weights into one workdir, at once, from two threads
or two processes: each returned Model must compute with ITS weights. A build killed with SIGKILL
must leave no ninja or compiler process behind, and the next build into that workdir must work.
Numbers are compared with the numpy oracle at rtol = atol = 1e-4.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops

TOL = dict(rtol=1e-4, atol=1e-4)
TRIALS = 5


def _graph(seed: int, width: int = 8):
    """y = relu(x w^T + b): the same names and shapes for every seed, only the weights differ."""
    rng = np.random.default_rng(seed)
    b = ag.IntVar("batch", 1, 4)
    x = ag.Tensor([b, width], "float32", name="x")
    w = ag.constant(rng.standard_normal((4, width)).astype(np.float32), name="w")
    bias = ag.constant(rng.standard_normal(4).astype(np.float32), name="b")
    return {"y": ops.relu(ops.linear(x, w, bias))}


FEEDS = {"x": np.random.default_rng(99).standard_normal((3, 8)).astype(np.float32)}


def _assert_oracle(model, seed: int) -> None:
    got = model.run(FEEDS)["y"]
    ref = ag.reference.run(_graph(seed), FEEDS)["y"]
    np.testing.assert_allclose(got, ref, **TOL, err_msg=f"the model built with seed {seed} computes other weights")


def _compile(seed: int, workdir: Path, **kw):
    return ag.compile_model(_graph(seed), target="cpu", workdir=workdir, jobs=1, **kw)


def test_two_threads_building_one_workdir_each_get_their_own_weights(tmp_path):
    _compile(0, tmp_path / "warm").close()   # the cache holds every object: the trials only link
    for trial in range(TRIALS):
        work = tmp_path / f"t{trial}"
        seeds = (2 * trial + 1, 2 * trial + 2)
        start = threading.Barrier(2)
        models, errors = {}, []

        def one(seed):
            try:
                start.wait()
                models[seed] = _compile(seed, work)
            except BaseException as e:  # noqa: BLE001 - reported below, with the seed
                errors.append((seed, e))

        threads = [threading.Thread(target=one, args=(s,)) for s in seeds]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for seed in seeds:
            with models[seed] as m:
                _assert_oracle(m, seed)


_CHILD = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    sys.path.insert(0, {here!r})
    import test_builds as tb
    seed, work, go, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    open(out + ".ready", "w").close()
    while not os.path.exists(go):   # start both compiles at once
        time.sleep(0.005)
    with tb._compile(seed, work) as m:
        got = m.run(tb.FEEDS)["y"]
    np.save(out, got)
""")


def test_two_processes_building_one_workdir_each_get_their_own_weights(tmp_path):
    _compile(0, tmp_path / "warm").close()
    code = _CHILD.format(here=str(Path(__file__).parent))
    for trial in range(TRIALS):
        work, go = tmp_path / f"p{trial}", tmp_path / f"go{trial}"
        seeds = (2 * trial + 1, 2 * trial + 2)
        outs = {s: tmp_path / f"out{trial}_{s}.npy" for s in seeds}
        procs = {s: subprocess.Popen([sys.executable, "-c", code, str(s), str(work), str(go), str(outs[s])])
                 for s in seeds}
        deadline = time.monotonic() + 120
        while not all(Path(f"{o}.ready").exists() for o in outs.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        for s, p in procs.items():
            assert p.wait(timeout=300) == 0, f"compile with seed {s} failed"
        for s in seeds:
            got = np.load(outs[s])
            ref = ag.reference.run(_graph(s), FEEDS)["y"]
            np.testing.assert_allclose(got, ref, **TOL, err_msg=f"process with seed {s} ran other weights")


def test_model_json_pairs_library_and_weights_by_build_id(tmp_path):
    work = tmp_path / "w"
    _compile(1, work, load=False)
    meta = json.loads((work / "model.json").read_text())
    first_id = meta["build_id"]
    assert meta["format"] == 2 and re.fullmatch("[0-9a-f]{32}", first_id)
    lib = work / meta["library"]
    assert meta["library_sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()
    raw = (work / "weights.safetensors").read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    assert header["__metadata__"] == {"aitgen_build_id": first_id}
    for name, c in meta["constants"].items():
        begin, end = header[name]["data_offsets"]
        assert (c["offset"], c["nbytes"], c["shape"]) == (begin, end - begin, header[name]["shape"])
        assert c["dtype"] == "float32"
    assert sorted(meta["constants"]) == sorted(k for k in header if k != "__metadata__")
    # Another build of the same shape: a new id, the same library (its name and bytes do not
    # depend on the id), and the weights follow.
    _compile(2, work, load=False)
    meta2 = json.loads((work / "model.json").read_text())
    assert meta2["build_id"] != first_id and meta2["library"] == meta["library"]
    with ag.Model.load(work) as m:
        _assert_oracle(m, 2)


def _procs_in(workdir: Path) -> list[str]:
    """'pid comm' of every process whose current directory is inside workdir (ninja runs in
    workdir/obj, and the compilers it starts inherit that)."""
    root = str(workdir.resolve())
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + "/"):
            found.append(f"{pid} {comm}")
    return found


def _cmdline(proc: str) -> str:
    try:
        return Path(f"/proc/{proc.split()[0]}/cmdline").read_text()
    except OSError:
        return ""


LONG_UNIT = "src/onednn_kernels.cpp"   # the oneDNN glue: several seconds, the longest unit of a CPU build


def _wait_for_a_long_compile(work: Path, building) -> bool:
    """True once the compiler of LONG_UNIT has run for half a second, so that it would outlive a short
    wait after the kill by seconds. False when `building()` turns false (or 120 s pass) before that."""
    first_seen = None
    deadline = time.monotonic() + 120
    while building() and time.monotonic() < deadline:
        if any(p.endswith(" cc1plus") and LONG_UNIT in _cmdline(p) for p in _procs_in(work)):
            first_seen = first_seen or time.monotonic()
            if time.monotonic() - first_seen >= 0.5:
                return True
        time.sleep(0.05)
    return False


def _assert_none_left(work: Path) -> None:
    deadline = time.monotonic() + 1.0   # ninja stops its jobs at once on SIGTERM
    while _procs_in(work) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _procs_in(work) == [], "processes of the stopped build still run"


def test_a_build_killed_during_ninja_leaves_no_process_and_the_next_build_works(tmp_path):
    work = tmp_path / "killed"
    _compile(4, work, load=False)   # the build the killed one would have replaced
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_builds as tb
        tb._compile(1, {str(work)!r}, load=False)
    """)
    # A fresh cache: every translation unit compiles, the oneDNN glue for many seconds.
    env = {**os.environ, "AITGEN_CACHE_DIR": str(tmp_path / "fresh_cache")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        assert _wait_for_a_long_compile(work, lambda: proc.poll() is None), "no long compile was seen"
        assert any(p.endswith(" ninja") for p in _procs_in(work))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _assert_none_left(work)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Nothing of the killed build replaced the previous one: its files are written under temp names.
    with ag.Model.load(work) as m:
        _assert_oracle(m, 4)
    with _compile(3, work) as m:
        _assert_oracle(m, 3)
    assert sorted(p.name for p in work.glob(".*.tmp")) == [], "the killed build's temp files are left"


def test_ctrl_c_during_ninja_stops_the_compiles(tmp_path, monkeypatch):
    """SIGINT (Ctrl-C) while ninja runs: the KeyboardInterrupt surfaces only after the compiles stopped."""
    work = tmp_path / "interrupted"
    monkeypatch.setenv("AITGEN_CACHE_DIR", str(tmp_path / "fresh_cache"))

    done = threading.Event()

    def interrupt_when_compiling():
        if _wait_for_a_long_compile(work, lambda: not done.is_set()):
            os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_when_compiling)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _compile(1, work, load=False)
    finally:
        done.set()
        watcher.join()
    _assert_none_left(work)
