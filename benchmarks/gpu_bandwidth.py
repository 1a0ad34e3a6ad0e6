#!/usr/bin/env python
"""Memory bandwidth of aitgen's fused element-wise kernel on the GPU, against a plain copy.

    python benchmarks/gpu_bandwidth.py                       # 1 GiB of float16 in, 1 GiB out
    python benchmarks/gpu_bandwidth.py --mib 256 --dtype bfloat16

One model, y = gelu(x * a + b) + x with a, b per-column constants, which the fusion passes turn into
a single element-wise kernel: it reads x once and writes y once. A second, y = x * a + b (`affine`
in the JSON), has too little arithmetic to hide the memory: its GB/s is the kernel's HBM figure. GB/s = (bytes of x + bytes of y) /
time. The references on the same GPU: torch's device-to-device copy (x.clone(): the same bytes
moved, no math, about the practical ceiling) and torch.compile of the same expression when it
compiles. A model run includes a host round trip (Python, the C API, a stream synchronisation),
timed separately on a 1-element input and reported as `overhead_ms`; the bandwidth figures are
from the wall time of whole runs, so they understate the kernel by that overhead.

Results: JSON (--out, default benchmarks/results/gpu_bandwidth.json).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
COLS = 4096


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="size of x in MiB (y is the same)")
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--workdir", default="/tmp/aitgen_gpu_bandwidth")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_bandwidth.json"))
    return ap.parse_args(argv)


def median_ms(fn, sync, iters: int, rounds: int) -> float:
    for _ in range(3):
        fn()
    sync()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / iters * 1e3)
    return statistics.median(per)


def build_model(workdir, arch, dtype: str = "float16", rows: int = (1024 << 20) // (COLS * 2),
                expr: str = "gelu"):
    """gelu(x * a + b) + x (expr "gelu") or x * a + b (expr "affine") over [rows, COLS], compiled
    (load=False) for `arch` (None: the GPU's); returns (workdir, a, b). scripts/gpu_prebuild.py
    builds the same models ahead of time."""
    import aitgen as ag
    from aitgen import ops
    x = ag.Tensor([ag.IntVar("rows", 1, rows), COLS], dtype=dtype, name="x")
    rng = np.random.default_rng(0)
    a = ag.constant(rng.uniform(0.5, 1.5, COLS).astype(np.float32), dtype=dtype, name="a")
    b = ag.constant(rng.standard_normal(COLS).astype(np.float32), dtype=dtype, name="b")
    y = ops.gelu(x * a + b) + x if expr == "gelu" else x * a + b
    work = ag.compile_model({"y": y}, target="cuda", arch=arch, workdir=Path(workdir) / expr, load=False)
    return work, a, b


def affine_case(args, dt, rows, torch, tx, sync) -> dict:
    """x * a + b: two FMAs an element, so the kernel is bound by memory alone (the erf of GELU,
    a polynomial with a division, makes the main case bound by arithmetic on an H200)."""
    import aitgen as ag
    work, a, b = build_model(args.workdir, None, args.dtype, rows, expr="affine")
    tdt = tx.dtype
    ta, tb = (torch.from_numpy(c.value.astype(np.float32)).cuda().to(tdt) for c in (a, b))
    with ag.Model.load(work, cuda_graph=True) as model:
        y = model.run({"x": tx})["y"]
        ref = tx.float() * ta.float() + tb.float()
        t = median_ms(lambda: model.run({"x": tx}), sync, args.iters, args.rounds)
    nbytes = 2 * rows * COLS * dt.itemsize
    return {"max_rel_diff_vs_torch": float((y.float() - ref).abs().max() / ref.abs().max()), "aitgen_ms": t,
            "aitgen_GBps": nbytes / (t * 1e-3) / 1e9}


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    import aitgen as ag
    from aitgen import ops

    if not torch.cuda.is_available():
        print("gpu_bandwidth: no CUDA device", file=sys.stderr)
        return 2
    dt = ag.ir.dtype.as_dtype(args.dtype)
    rows = args.mib * (1 << 20) // (COLS * dt.itemsize)
    work, a, b = build_model(args.workdir, None, args.dtype, rows)
    report = json.loads((work / "report.json").read_text())
    model = ag.Model.load(work, cuda_graph=True)

    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    tx = torch.randn(rows, COLS, device="cuda").to(tdt)
    ta, tb = (torch.from_numpy(c.value.astype(np.float32)).cuda().to(tdt) for c in (a, b))
    sync = torch.cuda.synchronize

    # numerics first: the kernel against torch (float32 math on the same stored inputs)
    y = model.run({"x": tx})["y"]
    ref = torch.nn.functional.gelu(tx.float() * ta.float() + tb.float()) + tx.float()
    rel = float((y.float() - ref).abs().max() / ref.abs().max())

    nbytes = 2 * rows * COLS * dt.itemsize
    result = {"device": torch.cuda.get_device_name(), "dtype": args.dtype, "bytes_moved": nbytes,
              "kernels_per_run": report["num_kernels"], "max_rel_diff_vs_torch": rel}
    t = median_ms(lambda: model.run({"x": tx}), sync, args.iters, args.rounds)
    one = tx[:1]
    result["overhead_ms"] = median_ms(lambda: model.run({"x": one}), sync, args.iters, args.rounds)
    result["aitgen_ms"] = t
    result["aitgen_GBps"] = nbytes / (t * 1e-3) / 1e9
    tc = median_ms(lambda: tx.clone(), sync, args.iters, args.rounds)
    result["torch_copy_ms"] = tc
    result["torch_copy_GBps"] = nbytes / (tc * 1e-3) / 1e9
    try:
        result["affine"] = affine_case(args, dt, rows, torch, tx, sync)
    except Exception as e:  # noqa: BLE001 - recorded; the rest stands
        result["affine"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))   # before torch.compile, which may outlast a time box
    if not args.no_compile:
        try:
            f = torch.compile(lambda v: torch.nn.functional.gelu(v * ta + tb) + v)
            f(tx)
            tcomp = median_ms(lambda: f(tx), sync, args.iters, args.rounds)
            result["torch_compile_ms"] = tcomp
            result["torch_compile_GBps"] = nbytes / (tcomp * 1e-3) / 1e9
        except Exception as e:  # noqa: BLE001 - recorded; the rest stands
            result["torch_compile_error"] = f"{type(e).__name__}: {e}"[:500]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
