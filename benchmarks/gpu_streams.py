#!/usr/bin/env python
"""Multi-stream scheduling on the GPU: one multi-branch model built with streams=1 and streams=N
(compile_model(..., streams=N), off by default until this says it pays), timed side by side.

    python benchmarks/gpu_streams.py --out $OUT/gpu_streams.json
    python benchmarks/gpu_streams.py --rows 16 --width 1024 --towers 4 --streams 4

The model: --towers independent towers of float16 GEMM + element-wise + row-reduction steps over one
input [rows, width], summed at the end (tests/backends/cuda/cuda_helpers.py's towers, in float16 so
the GEMMs take tensor cores). At a small batch each kernel fills a few SMs of the GPU, which is the
case several streams are for: the towers' kernels may then run at once. Both builds run as CUDA
graphs; each time is the median of --rounds rounds of --iters runs (interleaved), the wall clock of
whole runs, and the numbers of the two builds are compared (they must agree: same kernels, same
order within a tower).

Results: JSON (--out, default benchmarks/results/gpu_streams.json).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--towers", type=int, default=4)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--workdir", default="/tmp/aitgen_gpu_streams")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_streams.json"))
    return ap.parse_args(argv)


def graph(args):
    """The towers model in float16 (cast once at the input, back at the output)."""
    sys.path.insert(0, str(HERE.parent / "tests" / "backends" / "cuda"))
    from cuda_helpers import towers
    from aitgen import ops
    outs = towers(0, n_towers=args.towers, depth=args.depth, width=args.width, batch=args.rows)
    return {k: ops.cast(v, "float16") for k, v in outs.items()}


def build(args, streams: int, arch=None) -> Path:
    """compile_model(load=False) of the model with `streams` streams for `arch` (None: the GPU's);
    scripts/gpu_prebuild.py calls it ahead of time with an arch."""
    import aitgen as ag
    from aitgen.codegen.backend import load_backend
    from aitgen.runtime.device import cuda_capability
    arch = arch or load_backend("cuda").resolve_arch(None, cuda_capability)
    return ag.compile_model(graph(args), target="cuda", arch=arch, workdir=Path(args.workdir) / f"s{streams}",
                            precision="float16", streams=streams, load=False)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    import aitgen as ag
    from gpu_bandwidth import median_ms
    if not torch.cuda.is_available():
        print("gpu_streams: no CUDA device", file=sys.stderr)
        return 2
    works = {n: build(args, n) for n in (1, args.streams)}
    result = {"device": torch.cuda.get_device_name(), "config": vars(args).copy(), "median_ms": {}}
    result["config"].pop("out")
    result["multi_stream_code"] = "AIT_STREAMS_BEGIN(" in (works[args.streams] / "obj" / "src" / "model.cu").read_text()
    x = torch.randn(args.rows, args.width, device="cuda")
    feeds = {"x": x}
    models = {n: ag.Model.load(w, cuda_graph=True) for n, w in works.items()}
    try:
        got = {n: m.run(feeds) for n, m in models.items()}
        result["max_abs_diff"] = max(float((got[1][k].float() - got[args.streams][k].float()).abs().max())
                                     for k in got[1])
        samples = {n: [] for n in models}
        for r in range(args.rounds):
            for n in (list(models) if r % 2 == 0 else list(models)[::-1]):
                samples[n].append(median_ms(lambda m=models[n]: m.run(feeds), torch.cuda.synchronize, args.iters, 1))
        for n, v in samples.items():
            result["median_ms"][f"streams_{n}"] = float(np.median(v))
        result["speedup"] = result["median_ms"]["streams_1"] / result["median_ms"][f"streams_{args.streams}"]
    finally:
        for m in models.values():
            m.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
