#!/usr/bin/env python
"""How much one runtime's idle threads slow the next one in the same process: the bias of timing
aitgen and onnxruntime interleaved (cpu_vs_peers.interleave, which cpu_int8.py and cpu_bf16.py use).

    python benchmarks/peer_spin.py                 # resnet50 int8 (aitgen) vs ORT's quantize_static model
    python benchmarks/peer_spin.py --model resnet50 --threads 2 --rounds 5

After a run, ORT's intra-op threads spin for work (session.intra_op.allow_spinning, on by default)
and so do OpenMP's (aitgen's kernels); a runtime timed right after the other shares the cores with
those spinning threads. For each setting of ORT's spinning this times each runtime alone (a pause
before it) and right after the other, medians of 3-call rounds, and writes
benchmarks/results/peer_spin.json with the CPU ISA. The int8 builds are cpu_int8.py's (run it
first: it makes build/bench_int8/full/<model>_int8 and <model>_int8.onnx).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cpu_bf16  # noqa: E402  (cpu_isa)
import cpu_vs_peers as peers  # noqa: E402  (CONFIGS, make_feeds, nchw)


def median_ms(fn, calls: int) -> float:
    import numpy as np
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(1000 * np.median(ts))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", choices=sorted(peers.CONFIGS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path("build/bench_int8/full"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "peer_spin.json")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import json

    import onnxruntime as ort

    import aitgen as ag
    from aitgen import models

    cfg = peers.CONFIGS[args.model]["full"]
    _, inputs, _ = models.build(args.model, **cfg)
    feeds = peers.make_feeds(inputs, cfg)
    onnx_path = args.workdir / f"{args.model}_int8.onnx"
    model = ag.Model.load(args.workdir / f"{args.model}_int8")
    nchw = peers.nchw(feeds)

    def session(spin: bool):
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        s = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
        names = [i.name for i in s.get_inputs()]
        return lambda: s.run(None, {k: nchw[k] for k in names})

    ours = lambda: model.run(feeds)  # noqa: E731
    results = {}
    for spin in (True, False):
        peer = session(spin)
        for _ in range(3):
            peer(), ours()
        alone = {"onnxruntime": [], "aitgen": []}
        after = {"onnxruntime after aitgen": [], "aitgen after onnxruntime": []}
        for _ in range(args.rounds):
            time.sleep(0.5)   # a pause, then one runtime; the other right after it
            alone["onnxruntime"].append(median_ms(peer, 3))
            after["aitgen after onnxruntime"].append(median_ms(ours, 3))
            time.sleep(0.5)
            alone["aitgen"].append(median_ms(ours, 3))
            after["onnxruntime after aitgen"].append(median_ms(peer, 3))
        results[f"allow_spinning={int(spin)}"] = {k: sorted(v)[len(v) // 2] for k, v in {**alone, **after}.items()}
        print(f"allow_spinning={int(spin)}:", {k: round(v, 2) for k, v in results[f'allow_spinning={int(spin)}'].items()})
    model.close()
    out = {"model": args.model, "threads": args.threads, "rounds": args.rounds, "cpu_isa": cpu_bf16.cpu_isa(),
           "loadavg_1min": os.getloadavg()[0], "median_ms": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
