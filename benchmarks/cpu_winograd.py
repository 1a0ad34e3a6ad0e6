#!/usr/bin/env python
"""CPU float32 3x3 convolutions: Winograd F(4x4, 3x3) against the direct form (oneDNN's brgconv).

    OMP_NUM_THREADS=2 python benchmarks/cpu_winograd.py                    # ResNet-50's four shapes
    OMP_NUM_THREADS=2 python benchmarks/cpu_winograd.py --shapes 56x64 --batch 4 --rounds 9

Each shape HxC is a model of `chain` convs of its own weight (3x3, stride 1, padding 1, C -> C
channels, bias, relu), enough that the transformed weights (36 x C x C floats each) pass 64 MB: as in
a whole model, every conv reads its weight from memory, not from a cache the previous call warmed.
The model is built twice, compile_model(winograd=True) and (winograd=False), both checked against
the numpy oracle, and timed in one process, round by round in alternating order (Model.benchmark,
--iters calls after 2 warm-ups). The JSON gives per-conv milliseconds (a round's median over the
chain), the median of per-round ratios, the implementation each build's kernel got, the error of
each against the oracle, and the CPU's ISA flags.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu_vs_peers import cpu_isa, write_json  # noqa: E402

SHAPES = ("56x64", "28x128", "14x256", "7x512")  # ResNet-50's stride-1 3x3 convs (H=W, C in = C out)


def build(work: Path, h: int, c: int, batch: int, chain: int):
    import numpy as np

    import aitgen as ag
    from aitgen import ops
    rng = np.random.default_rng(h * 1000 + c)
    x = ag.Tensor([batch, h, h, c], name="x")
    y = x
    for i in range(chain):
        w = ag.constant((rng.standard_normal((c, 3, 3, c)) * (2.0 / (9 * c)) ** 0.5).astype(np.float32), name=f"w{i}")
        b = ag.constant((rng.standard_normal(c) * 0.1).astype(np.float32), name=f"b{i}")
        y = ops.relu(ops.conv2d(y, w, b, padding=1))
    outs = {"y": y}
    feeds = {"x": np.maximum(rng.standard_normal((batch, h, h, c)), 0).astype(np.float32)}
    want = ag.reference.run(outs, feeds)["y"]
    models = {}
    for wino in (True, False):
        m = ag.compile_model(outs, target="cpu", workdir=work / f"{h}x{c}_b{batch}_{'wino' if wino else 'direct'}",
                             winograd=wino)
        got = m.run(feeds)["y"]
        err = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
        models["winograd" if wino else "direct"] = (m, err)
    return models, feeds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), help="HxC, e.g. 56x64")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--max-chain", type=int, default=16, help="at most this many convs per model")
    ap.add_argument("--work", default="build/cpu_winograd")
    ap.add_argument("--out", default=str(HERE / "results" / "cpu_winograd.json"))
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.iters < 1 or args.batch < 1 or args.max_chain < 1:
        ap.error("--rounds, --iters, --batch and --max-chain must be >= 1")
    work = Path(args.work)
    results = {}
    for shape in args.shapes:
        h, c = (int(v) for v in shape.split("x"))
        chain = max(2, min(args.max_chain, -(-64 * 2**20 // (36 * c * c * 4))))
        models, feeds = build(work, h, c, args.batch, chain)
        times = {k: [] for k in models}
        ratios = []
        for r in range(args.rounds):
            order = list(models) if r % 2 == 0 else list(reversed(models))
            got = {}
            for k in order:
                got[k] = models[k][0].benchmark(feeds, iters=args.iters, warmup=2)["median_ms"] / chain
                times[k].append(got[k])
            ratios.append(got["winograd"] / got["direct"])
        impls = {k: sorted(set(m.kernel_report()["onednn_impls"].values())) for k, (m, _) in models.items()}
        results[f"{shape}_b{args.batch}"] = {
            "h": h, "c": c, "batch": args.batch, "chain": chain,
            "per_conv_ms": {k: {"median": statistics.median(v), "rounds": v} for k, v in times.items()},
            "winograd/direct": statistics.median(ratios),
            "max_rel_err_vs_oracle": {k: err for k, (_, err) in models.items()},
            "onednn_impls": impls}
        row = results[f"{shape}_b{args.batch}"]
        print(f"{shape} batch {args.batch} ({chain} convs): winograd {row['per_conv_ms']['winograd']['median']:.3f} ms, "
              f"direct {row['per_conv_ms']['direct']['median']:.3f} ms, ratio {row['winograd/direct']:.2f}; "
              f"errors {row['max_rel_err_vs_oracle']['winograd']:.1e} / {row['max_rel_err_vs_oracle']['direct']:.1e}; "
              f"{impls['winograd']}")
        for m, _ in models.values():
            m.close()
    doc = {"benchmark": "cpu_winograd", "cpu": cpu_isa(), "threads": os.environ.get("OMP_NUM_THREADS"),
           "rounds": args.rounds, "iters": args.iters, "shapes": results}
    write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
