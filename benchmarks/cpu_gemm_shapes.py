#!/usr/bin/env python
"""One linear layer y = x W + b, float32 and int8, across output widths: GFLOP/s (GOP/s for int8)
of aitgen's kernel per shape, with the oneDNN implementation each build got.

    python benchmarks/cpu_gemm_shapes.py                       # M=128, K=768, N=384..3072, K=3072
    python benchmarks/cpu_gemm_shapes.py --shapes 128x768x3072,128x768x768 --rounds 9

Why: on an AVX2-only EPYC (no AVX-512, no VNNI) oneDNN 3.2's int8 matmul is `gemm:jit`, and
aitgen's int8 BERT-base ran slower than its float32 one. This script found the int8 layer at 79-109
GOP/s for every N against float32's 110-124 (benchmarks/results/cpu_gemm_shapes_before_shift.json);
storing a signed source as u8 with a zero point (onednn_kernels.cpp shift_s8_src) made it 141-199
(cpu_gemm_shapes.json, a noisy run: float32 97-124; 181-257 in a quieter int8-only run).

float32_unpacked is the float32 build run with AITGEN_PACKED_SGEMM=0 (a copy of it, whose first
run creates its primitives with the switch off): oneDNN's matmul primitive rather than its packed
sgemm, which float32 gets for constant weights on CPUs without AVX-512 (onednn_sgemm.cpp). With
--layers L each model holds L linear layers of the shape with distinct weights on one input, timed
per layer: the weights then stream from memory, as a model's do (one layer's weight stays in cache).

Each shape is one model per precision (int8: minmax calibration on 4 random feeds), with its error
against the float32 oracle reported (relative to max |y|); a round times every build (Model.benchmark,
--iters runs) in turn, and the report gives the median over --rounds rounds. Writes JSON with the
CPU's ISA flags (default benchmarks/results/cpu_gemm_shapes.json).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu_vs_peers import cpu_isa, write_json  # noqa: E402

DEFAULT = "128x768x384,128x768x768,128x768x1024,128x768x1536,128x768x2304,128x768x3072,128x3072x768"


def build(m: int, k: int, n: int, precision: str, work: Path, layers: int = 1):
    import shutil

    import numpy as np
    import aitgen as ag
    from aitgen.frontend import nn
    x = ag.Tensor([m, k], "float32", name="x")
    nn.manual_seed(0)  # the same weights for every precision (float32_unpacked runs a copy of float32's)
    outs = {f"y{i}": nn.Linear(k, n)(x) for i in range(layers)}
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((m, k)).astype(np.float32)}
    kw = {}
    if precision == "int8":
        kw = dict(precision="int8", calibration=[{"x": rng.standard_normal((m, k)).astype(np.float32)}
                                                 for _ in range(4)])
    name = f"{m}x{k}x{n}" + (f"_l{layers}" if layers > 1 else "")
    dest = work / f"{precision}_{name}"
    if precision == "float32_unpacked":  # the float32 build, its primitives created with the switch off
        src = work / f"float32_{name}"
        if not src.exists():
            ag.compile_model(outs, target="cpu", workdir=src)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest)
        model = ag.Model.load(dest)
        os.environ["AITGEN_PACKED_SGEMM"] = "0"
        try:
            got = model.run(feeds)
        finally:
            del os.environ["AITGEN_PACKED_SGEMM"]
    else:
        model = ag.compile_model(outs, target="cpu", workdir=dest, **kw)
        got = model.run(feeds)
    want = ag.reference.run(outs, feeds)
    err = max(float(np.max(np.abs(got[o] - want[o])) / max(1.0, float(np.max(np.abs(want[o]))))) for o in outs)
    impls = sorted(set(model.kernel_report().get("onednn_impls", {}).values()))
    return model, feeds, err, impls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT, help="MxKxN, comma-separated")
    ap.add_argument("--precisions", default="float32,int8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--layers", type=int, default=1, help="linear layers per model (distinct weights)")
    ap.add_argument("--work", default="build/cpu_gemm_shapes")
    ap.add_argument("--out", default=str(HERE / "results" / "cpu_gemm_shapes.json"))
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    precisions = args.precisions.split(",")
    work = Path(args.work).resolve()
    builds = {}
    for shape in shapes:
        for prec in precisions:
            builds[shape, prec] = build(*shape, prec, work, args.layers)
    times: dict = {key: [] for key in builds}
    for _ in range(args.rounds):
        for key, (model, feeds, _, _) in builds.items():
            times[key].append(model.benchmark(feeds, iters=args.iters, warmup=2)["median_ms"])
    rows = []
    for (shape, prec), (_, _, err, impls) in builds.items():
        ms = statistics.median(times[shape, prec]) / args.layers  # per layer
        m, k, n = shape
        rate = 2.0 * m * k * n / ms / 1e6
        rows.append(dict(m=m, k=k, n=n, precision=prec, median_ms=ms, rate=rate, rel_err=err, impls=impls,
                         round_medians_ms=times[shape, prec], layers=args.layers))
        print(f"{m}x{k}x{n:<5d} {prec:8s} {ms:8.3f} ms {rate:7.1f} G{'OP' if prec == 'int8' else 'FLOP'}/s  "
              f"err {err:.1e}  {', '.join(impls)}", flush=True)
    out = {"benchmark": "cpu_gemm_shapes", "cpu_isa": cpu_isa(), "threads": os.environ.get("OMP_NUM_THREADS"),
           "rounds": args.rounds, "iters": args.iters, "layers": args.layers, "rows": rows}
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
