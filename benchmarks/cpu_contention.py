#!/usr/bin/env python
"""aitgen (OpenMP) and onnxruntime (its own thread pool) when another process takes a core.

    python benchmarks/cpu_contention.py                                # resnet50, mobilenet_v2, bert_base
    python benchmarks/cpu_contention.py --models mobilenet_v2 --rounds 5

A thread pool that splits work statically (OpenMP's, under oneDNN) waits at every barrier for its
slowest thread, so a busy neighbour on one core could slow it more than a pool that hands out small
tasks (onnxruntime's). This measures it instead of assuming it. For each setting it runs
benchmarks/cpu_vs_peers.py (same models, weights, inputs and interleaved rounds) in a child process:

- quiet, T threads (T = the cores this process may use);
- busy: a neighbour process spinning on the CPU (one busy loop per --hogs) for the whole child run,
  T threads, in --repeats fresh child processes (the slowdown depends on where the scheduler puts
  the neighbour against each pool's threads, so one try can be 2x and the next 100x);
- busy, T - 1 threads: what a user who knows a core is taken would set (OMP_NUM_THREADS, ORT's
  intra_op_num_threads), when T > 1;
- quiet and busy with OMP_WAIT_POLICY=passive (aitgen's OpenMP threads sleep at once when idle;
  onnxruntime's pool is not OpenMP and keeps its own policy).

Results: a table on stdout and JSON (default benchmarks/results/cpu_contention.json) with every
setting's medians and aitgen/onnxruntime ratios, the slowdown of each framework against its quiet
time, and the CPU ISA. Busy settings keep every round (--max-foreign 1): the neighbour is the point.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu_vs_peers import cpu_isa  # noqa: E402  (one definition of the ISA record)

SPIN = "import time\nwhile True:\n    pass\n"


def run_setting(models: str, threads: int, hogs: int, args, env: dict) -> dict:
    """cpu_vs_peers.py's JSON for one setting, with `hogs` spinning neighbours alive throughout and
    `env` added to the child's environment."""
    neighbours = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(hogs)]
    try:
        time.sleep(0.5 if hogs else 0)  # the neighbours are running before the first timing
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            cmd = [sys.executable, str(HERE / "cpu_vs_peers.py"), "--models", models, "--rounds", str(args.rounds),
                   "--threads", str(threads), "--peers", "onnxruntime", "--no-imported", "--out", str(out)]
            if hogs:
                cmd += ["--max-foreign", "1"]
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
            if proc.returncode != 0 or not out.exists():
                raise RuntimeError(f"cpu_vs_peers.py failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
            return json.loads(out.read_text())
    finally:
        for p in neighbours:
            p.kill()
            p.wait()


def medians(report: dict) -> dict:
    out = {}
    for name, entry in report["models"].items():
        lat = entry.get("latency_ms", {})
        out[name] = {fw: v["median"] for fw, v in lat.items() if fw in ("aitgen", "onnxruntime")}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--hogs", type=int, default=1, help="spinning neighbour processes in the busy settings")
    ap.add_argument("--repeats", type=int, default=3, help="child processes for the busy full-width setting")
    ap.add_argument("--out", default=str(HERE / "results" / "cpu_contention.json"))
    args = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    # The busy full-width setting several times: where the scheduler puts the neighbour against the
    # pool's threads changes from one process to the next, and with it the slowdown (2x to 100x seen).
    settings = [("quiet", cores, 0)] + [(f"busy ({args.hogs} spinning neighbour), try {i + 1}", cores, args.hogs)
                                        for i in range(args.repeats)]
    if cores > 1:
        settings.append((f"busy, {cores - 1} thread(s)", cores - 1, args.hogs))
    settings = [(*s, {}) for s in settings]
    # OpenMP's other waiting policy: idle threads sleep at once instead of spinning first, so a
    # thread that lost its core can move to the one a waiting thread left; it costs a wake-up per
    # parallel region when the machine is quiet.
    passive = {"OMP_WAIT_POLICY": "passive"}
    settings += [("quiet, OMP_WAIT_POLICY=passive", cores, 0, passive),
                 ("busy, OMP_WAIT_POLICY=passive", cores, args.hogs, passive)]
    results = {}
    for label, threads, hogs, env in settings:
        print(f"[cpu_contention] {label}: {threads} threads ...", flush=True)
        results[label] = {"threads": threads, "neighbours": hogs, "env": env,
                          "median_ms": medians(run_setting(args.models, threads, hogs, args, env))}
    quiet = results["quiet"]["median_ms"]
    for label, r in results.items():
        r["aitgen/onnxruntime"] = {m: v["aitgen"] / v["onnxruntime"] for m, v in r["median_ms"].items()
                                   if "aitgen" in v and "onnxruntime" in v}
        r["slowdown_vs_quiet"] = {m: {fw: t / quiet[m][fw] for fw, t in v.items() if fw in quiet.get(m, {})}
                                  for m, v in r["median_ms"].items()}
    doc = {"benchmark": "cpu_contention", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": cores,
           "cpu_isa": cpu_isa(), "loadavg_1min_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
           "rounds": args.rounds, "settings": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"{'setting':44s} {'model':14s} {'aitgen ms':>10s} {'ort ms':>10s} {'aitgen/ort':>10s} {'aitgen slower':>14s} {'ort slower':>11s}")
    for label, r in results.items():
        for m, v in r["median_ms"].items():
            s = r["slowdown_vs_quiet"][m]
            print(f"{label:44s} {m:14s} {v.get('aitgen', float('nan')):10.2f} {v.get('onnxruntime', float('nan')):10.2f} "
                  f"{r['aitgen/onnxruntime'].get(m, float('nan')):10.2f} {s.get('aitgen', float('nan')):13.2f}x "
                  f"{s.get('onnxruntime', float('nan')):10.2f}x")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
