"""Serving overhead: requests/s and p50/p99 latency of `aitgen serve` (Ray Serve, Triton) against a
plain in-process loop (threads calling Model.run), at the same concurrency and request mix.

    python benchmarks/serve_vs_inprocess.py                                   # in-process + ray
    python benchmarks/serve_vs_inprocess.py --triton-python /path/venv-triton/bin/python

Each server runs as `python -m aitgen.serving.cli serve` in a process of its own on 127.0.0.1 (the
Triton one under --triton-python: it needs numpy<2, see docs/serving.md); the client threads keep
one HTTP connection each and send KServe v2 JSON. Every answer is checked against the in-process
output of the same request. The client shares the machine's cores with the server, as a sidecar
would: read the server figures as "what a loopback client sees", not as the engine's ceiling.

Writes benchmarks/results/serve_vs_inprocess.json: the CPU and its ISA flags, versions, the config,
and per engine the median over --repeats of req/s, p50 and p99 (ms).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# One OpenMP thread per run: concurrency comes from runtimes/instances/replicas, one per core, and
# every engine (servers inherit this) gets the same setting. Before numpy and aitgen load.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_bf16", "amx_int8")
BATCHES, SEQS = (1, 2, 4, 8), (4, 8)


def build(workdir: Path, hidden: int) -> None:
    import aitgen as ag
    from aitgen import nn, ops
    nn.manual_seed(0)
    b, s = ag.IntVar("batch", 1, 32), ag.IntVar("seq", 1, 16)
    x = ag.Tensor([b, s, 64], dtype="float32", name="x")
    y = nn.Linear(hidden, 64)(ops.gelu(nn.Linear(64, hidden)(x)))
    ag.compile_model({"y": y}, target="cpu", workdir=workdir, load=False)


def requests(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((BATCHES[i % len(BATCHES)], SEQS[(i // len(BATCHES)) % len(SEQS)], 64))
             .astype(np.float32)} for i in range(n)]


def v2_body(feeds: dict[str, np.ndarray]) -> bytes:
    return json.dumps({"inputs": [{"name": n, "datatype": "FP32", "shape": list(a.shape), "data": a.ravel().tolist()}
                                  for n, a in feeds.items()]}).encode()


def measure(call, n: int, concurrency: int) -> tuple[float, list[float], list]:
    """call(i) -> answer, from `concurrency` threads: (req/s, latencies in ms, answers)."""
    lat, answers = [0.0] * n, [None] * n

    def one(i: int) -> None:
        t0 = time.perf_counter()
        answers[i] = call(i)
        lat[i] = (time.perf_counter() - t0) * 1e3

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(n)))
    return n / (time.perf_counter() - t0), lat, answers


def summary(runs: list[tuple[float, list[float]]]) -> dict:
    med = lambda xs: statistics.median(xs)  # noqa: E731
    return {"req_per_s": round(med([r for r, _ in runs]), 1),
            "p50_ms": round(med([float(np.percentile(lat, 50)) for _, lat in runs]), 2),
            "p99_ms": round(med([float(np.percentile(lat, 99)) for _, lat in runs]), 2),
            "runs_req_per_s": [round(r, 1) for r, _ in runs]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, python: str, args: list[str], log: Path):
        self.log = log
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([python, "-m", "aitgen.serving.cli", "serve", *args], stdout=open(log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=ROOT)
        deadline = time.monotonic() + 240
        while "aitgen serve: ready" not in log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"server did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # helpers left in the server's group
        except (ProcessLookupError, PermissionError):
            pass


def http_caller(port: int, path: str, bodies: list[bytes]):
    local = threading.local()

    def call(i: int) -> np.ndarray:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", path, bodies[i], {"Content-Type": "application/json"})
        r = conn.getresponse()
        doc = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"request {i}: HTTP {r.status}: {doc}")
        out = doc["outputs"][0]
        return np.asarray(out["data"], np.float32).reshape(out["shape"])
    return call


def versions(python: str) -> dict:
    code = ("import json, importlib.metadata as m\nv = {}\nfor p in ('aitgen', 'numpy', 'ray', 'nvidia-pytriton'):\n"
            "    try: v[p] = m.version(p)\n    except m.PackageNotFoundError: v[p] = None\nprint(json.dumps(v))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-300:]}


def cpu_info() -> dict:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    field = lambda key: next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith(key)), "")  # noqa
    flags = set(field("flags").split())
    return {"model": field("model name") or platform.processor(), "cores": os.cpu_count(),
            "isa": {f: f in flags for f in ISA_FLAGS}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--runtimes", type=int, default=os.cpu_count() or 1,
                    help="runtimes of the in-process container and Triton instances (default: the cores)")
    ap.add_argument("--engines", default="inprocess,ray,triton")
    ap.add_argument("--triton-python", default=sys.executable, help="a Python whose environment has the triton extra")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serve_vs_inprocess.json"))
    args = ap.parse_args()

    import aitgen as ag
    work = Path(tempfile.mkdtemp(prefix="serve_bench_"))
    workdir = work / "mlp"
    build(workdir, args.hidden)
    reqs = requests(args.requests)
    bodies = [v2_body(f) for f in reqs]
    results, engines = {}, args.engines.split(",")
    with ag.Model.load(workdir, num_runtimes=args.runtimes) as model:
        expected = [model.run(f)["y"] for f in reqs]
        runs = []
        for _ in range(args.repeats):
            rate, lat, _ = measure(lambda i: model.run(reqs[i])["y"], len(reqs), args.concurrency)
            runs.append((rate, lat))
        results["inprocess"] = summary(runs)
        print(f"inprocess: {results['inprocess']}", flush=True)

    engine_args = {
        "ray": (sys.executable, ["--engine", "ray", "--num-cpus", str(os.cpu_count()), "--batch-wait-ms", "2"]),
        "triton": (args.triton_python, ["--engine", "triton", "--instances", str(args.runtimes), "--batch-wait-ms", "2"]),
    }
    for engine in [e for e in engines if e in engine_args]:
        python, extra = engine_args[engine]
        if engine == "triton" and not versions(python).get("nvidia-pytriton"):
            results[engine] = {"skipped": f"no nvidia-pytriton under {python} (pass --triton-python)"}
            print(f"{engine}: skipped", flush=True)
            continue
        port = free_port()
        server_args = [str(workdir), "--name", "mlp", "--http-port", str(port), "--max-batch", str(args.max_batch),
                       *extra] + (["--grpc-port", str(free_port())] if engine == "triton" else [])
        try:
            server = Server(python, server_args, work / f"{engine}.log")
        except SystemExit as e:
            results[engine] = {"failed": str(e)[-1500:]}
            print(f"{engine}: failed to start", flush=True)
            continue
        try:
            call = http_caller(port, "/v2/models/mlp/infer", bodies)
            measure(call, min(64, len(reqs)), args.concurrency)   # warm-up: replicas, connections, caches
            runs = []
            for _ in range(args.repeats):
                rate, lat, answers = measure(call, len(reqs), args.concurrency)
                for i, (got, want) in enumerate(zip(answers, expected)):
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{engine} request {i}")
                runs.append((rate, lat))
            results[engine] = summary(runs)
            print(f"{engine}: {results[engine]}", flush=True)
        finally:
            server.stop()

    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu": cpu_info(), "python": platform.python_version(),
           "versions": {"driver": versions(sys.executable), "triton_python": versions(args.triton_python)},
           "config": {"requests": args.requests, "concurrency": args.concurrency, "repeats": args.repeats,
                      "model": f"x[batch<=32, seq<=16, 64] -> Linear(64,{args.hidden}) -> gelu -> Linear({args.hidden},64)",
                      "batches": BATCHES, "seqs": SEQS, "max_batch": args.max_batch, "runtimes": args.runtimes,
                      "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                      "note": "client threads share the cores with the server; JSON encode/decode is on both sides"},
           "results": results,
           "answers_checked": "every server answer against the in-process output of the same request (rtol=atol=1e-4)"}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
