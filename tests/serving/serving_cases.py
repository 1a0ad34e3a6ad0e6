"""Shared pieces of the serving tests: one small model with dynamic dims (built once per session by
the `served_model` fixture in conftest.py), v2 JSON requests for it, the numpy oracle's answer, and a
server started through the `serve` command in a process of its own (so SIGTERM, stdout and the exit
code are the real thing).

Every server binds 127.0.0.1 on a free port, every wait has a deadline, and the server's whole
process group is killed in teardown whatever happened in the test."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pytest

import aitgen as ag
from aitgen import nn, ops

B_MAX, S_MAX, D_IN, D_OUT = 16, 8, 16, 8
# Every answer is compared with the oracle at these tolerances: a batch of stacked requests runs
# GEMMs of another M than one request alone, so float32 sums may round differently.
RTOL, ATOL = 1e-4, 1e-4
READY_TIMEOUT_S = 150   # Ray on two busy cores takes 10-40 s to start
STOP_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 60
REPO = Path(__file__).resolve().parents[2]


def build_graph() -> dict:
    """y: a two-layer MLP per row plus a per-batch bias; m: its row sums; i2: an int32 path."""
    nn.manual_seed(0)
    b, s = ag.IntVar("batch", 1, B_MAX), ag.IntVar("seq", 1, S_MAX)
    x = ag.Tensor([b, s, D_IN], dtype="float32", name="x")
    bias = ag.Tensor([b, D_OUT], dtype="float32", name="bias")
    ids = ag.Tensor([b, 4], dtype="int32", name="ids")
    y = nn.Linear(32, D_OUT)(ops.relu(nn.Linear(D_IN, 32)(x))) + ops.reshape(bias, [b, 1, D_OUT])
    return {"y": y, "m": ops.reduce_sum(y, -1), "i2": ids * 2}


def feeds_for(seed: int, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, D_IN)).astype(np.float32),
            "bias": rng.standard_normal((batch, D_OUT)).astype(np.float32),
            "ids": rng.integers(-1000, 1000, (batch, 4)).astype(np.int32)}


_V2 = {np.dtype(np.float32): "FP32", np.dtype(np.int32): "INT32"}


def v2_request(feeds: dict[str, np.ndarray], request_id: Optional[str] = None) -> dict:
    doc: dict = {"inputs": [{"name": n, "datatype": _V2[a.dtype], "shape": list(a.shape), "data": a.ravel().tolist()}
                            for n, a in feeds.items()]}
    if request_id is not None:
        doc["id"] = request_id
    return doc


def decode_v2(doc: dict) -> dict[str, np.ndarray]:
    types = {"FP32": np.float32, "INT32": np.int32}
    return {o["name"]: np.asarray(o["data"], dtype=types[o["datatype"]]).reshape(o["shape"]) for o in doc["outputs"]}


def check_against_oracle(outputs: dict, feeds: dict, got: dict[str, np.ndarray]) -> None:
    want = ag.reference.run(outputs, feeds)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for name, ref in want.items():
        assert got[name].shape == ref.shape, (name, got[name].shape, ref.shape)
        if np.issubdtype(ref.dtype, np.integer):
            np.testing.assert_array_equal(got[name], ref, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], ref, rtol=RTOL, atol=ATOL, err_msg=name)


def http_full(method: str, url: str, body: Optional[bytes] = None,
              timeout: float = REQUEST_TIMEOUT_S) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}


def http(method: str, url: str, body: Optional[bytes] = None, timeout: float = REQUEST_TIMEOUT_S) -> tuple[int, bytes]:
    return http_full(method, url, body, timeout)[:2]


def post_json(url: str, doc) -> tuple[int, dict]:
    status, body = http("POST", url, json.dumps(doc).encode())
    return status, json.loads(body) if body else {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m aitgen.serving.cli serve ...` in its own session, output to a log file."""

    def __init__(self, args: list[str], log: Path, env: Optional[dict] = None):
        self.log = log
        self._log_file = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "aitgen.serving.cli", "serve", *args],
                                     stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=REPO, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})})

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "aitgen serve: ready" in self.text():
                return
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode} before it was ready:\n{self.text()[-4000:]}")
            time.sleep(0.3)
        pytest.fail(f"server not ready after {timeout} s:\n{self.text()[-4000:]}")

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> Optional[int]:
        """SIGTERM to the server process alone (as a service manager sends it); its exit code, or
        None when it did not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill_all(self) -> None:
        """Teardown: whatever is left of the server's process group (engines start helpers there)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._log_file.close()


@contextlib.contextmanager
def running_server(args: list[str], log: Path, env: Optional[dict] = None) -> Iterator[ServerProcess]:
    server = ServerProcess(args, log, env)
    try:
        server.wait_ready()
        yield server
    finally:
        if server.proc.poll() is None:
            server.terminate(timeout=30)
        server.kill_all()


# -- the load every engine test sends ---------------------------------------------------------------

BATCHES, SEQS = (1, 2, 3, 4, 6), (2, 5)   # few signatures, so concurrent requests can share a call


def plan(i: int, bad_every: int) -> tuple[int, int, bool]:
    """Request i: (batch, seq, bad). A bad one has seq past its bound, which only the model's
    bounds (not the datatype or a static dim) can catch."""
    bad = bad_every > 0 and i % bad_every == bad_every - 1
    return BATCHES[i % len(BATCHES)], S_MAX + 1 if bad else SEQS[(i // len(BATCHES)) % len(SEQS)], bad


def flood(infer_url: str, outputs: dict, n: int = 240, workers: int = 16, bad_every: int = 12,
          bad_status: tuple[int, ...] = (400,)) -> dict:
    """n requests from `workers` threads at once, every good answer checked against the oracle and
    every bad one for its error; the count of each, and the most requests that shared a model call
    (from the Ray engine's x-aitgen-batch-requests header; 0 where the engine does not say)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int):
        batch, seq, bad = plan(i, bad_every)
        feeds = feeds_for(i, batch, seq)
        status, body, headers = http_full("POST", infer_url, json.dumps(v2_request(feeds, request_id=f"r{i}")).encode())
        return i, feeds, bad, status, json.loads(body), int(headers.get("x-aitgen-batch-requests", 0))

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(one, range(n)))
    good = bad = 0
    for i, feeds, is_bad, status, doc, _ in results:
        if is_bad:
            assert status in bad_status, (i, status, doc)
            assert f"is {S_MAX + 1}, outside its bounds [1, {S_MAX}]" in doc["error"], doc
            bad += 1
        else:
            assert status == 200, (i, status, doc)
            assert doc.get("id") == f"r{i}" and doc["model_name"], doc
            check_against_oracle(outputs, feeds, decode_v2(doc))
            good += 1
    assert good + bad == n
    return {"good": good, "bad": bad, "most_shared": max(r[-1] for r in results)}


# -- requests the servers must refuse ------------------------------------------------------------------

def good_request(seed: int = 1, batch: int = 2, seq: int = 3) -> tuple[dict, dict]:
    feeds = feeds_for(seed, batch, seq)
    return feeds, v2_request(feeds)


def with_input(doc: dict, name: str, **change) -> dict:
    doc = json.loads(json.dumps(doc))
    for entry in doc["inputs"]:
        if entry["name"] == name:
            entry.update(change)
    return doc


def bad_requests() -> list[tuple[str, object, int, str]]:
    """(what, body: a dict to send as JSON or raw bytes, status, a piece of the error message)."""
    _, doc = good_request()
    return [
        ("malformed JSON", b'{"inputs": [', 400, "malformed JSON"),
        ("not an object", b"[1, 2]", 400, "must be a JSON object"),
        ("no inputs", {}, 400, '"inputs"'),
        ("unknown input", {"inputs": doc["inputs"] + [{"name": "zz", "datatype": "FP32", "shape": [1], "data": [1]}]},
         400, "unknown input 'zz'"),
        ("missing input", {"inputs": doc["inputs"][:2]}, 400, "missing input 'ids'"),
        ("wrong datatype", with_input(doc, "x", datatype="FP64"), 400, "datatype 'FP64', expected 'FP32'"),
        ("wrong static dim", with_input(doc, "bias", shape=[2, 7], data=[0.0] * 14), 400, "dim 1 is 7, expected 8"),
        ("batch past its bound", v2_request(feeds_for(2, B_MAX + 1, 3)), 400,
         f"dim 0 ('batch') is {B_MAX + 1}, outside its bounds [1, {B_MAX}]"),
        ("seq past its bound", v2_request(feeds_for(3, 2, S_MAX + 1)), 400,
         f"dim 1 ('seq') is {S_MAX + 1}, outside its bounds [1, {S_MAX}]"),
        ("batch disagrees between inputs", with_input(doc, "bias", shape=[3, 8], data=[0.0] * 24), 400,
         "but input 'x' gives 'batch' = 2"),
        ("too few values", with_input(doc, "ids", data=[1, 2, 3]), 400, "holds 3 values"),
        ("floats for INT32", with_input(doc, "ids", data=[0.5] * 8), 400, "not fit for INT32"),
        ("ragged data", with_input(doc, "ids", data=[[1, 2, 3, 4], [1, 2]]), 400, "ragged"),
        ("unknown output", {**doc, "outputs": [{"name": "nope"}]}, 400, "unknown output 'nope'"),
    ]
