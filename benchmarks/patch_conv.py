#!/usr/bin/env python
"""ViT's patch convolution on the CPU: the conv alone and in whole models, median latency.

    OMP_NUM_THREADS=2 python benchmarks/patch_conv.py                     # three cases, 5 rounds of 20 runs
    OMP_NUM_THREADS=2 python benchmarks/patch_conv.py --cases conv --iters 50
    OMP_NUM_THREADS=2 python benchmarks/patch_conv.py --baseline OLD/build/patch_conv   # A/B, one process

Cases: `conv`, a single-op model [1, 224, 224, 3] -> 768 channels, kernel 16, stride 16, with bias
(ViT-B/16's patch embedding); `vit`, the zoo's vit_b16 at full size, batch 1; `vit_onnx`, the same
model's torch twin exported to ONNX (opset 17) and imported (skipped without torch and onnx). Each is
compiled for the CPU into --work/<case> and checked against a reference (the numpy oracle; for the
ONNX case the torch twin). --baseline names the --work folder of the same script run by another
checkout (e.g. one before a change): its libraries are loaded next to these (the runtime reads any
build of the same model.json format), so both are timed in one process, round by round, in
alternating order, and drift of a shared machine's load hits both alike. A round is
Model.benchmark(--iters runs after 2 warm-ups) per case and side; the report gives the median and
the minimum over the rounds' medians. The JSON also names the oneDNN implementation of every
primitive (Model.kernel_report, where the build has one), the CPU's ISA flags, the thread count
(OMP_NUM_THREADS) and the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile")
CASES = ("conv", "vit", "vit_onnx")


def cpu_info() -> dict:
    flags, model = set(), ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
    return {"model": model, "flags": {f: f in flags for f in FLAGS}, "cores": os.cpu_count()}


def case_conv(work: Path):
    import numpy as np
    import aitgen as ag
    from aitgen.frontend import nn
    x = ag.Tensor([1, 224, 224, 3], "float32", name="x")
    y = nn.Conv2d(3, 768, 16, stride=16)(x)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype(np.float32)}
    return {"y": y}, feeds, ag.reference.run({"y": y}, feeds)


def case_vit(work: Path):
    import numpy as np
    import aitgen as ag
    from aitgen import models
    _, outputs = models.get("vit_b16", batch=1)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype(np.float32)}
    return outputs, feeds, ag.reference.run(outputs, feeds)


def case_vit_onnx(work: Path):
    import numpy as np
    import torch
    from aitgen import models
    from aitgen.frontend import onnx as ox
    from aitgen.models import torch_refs
    cfg = dict(batch=1)
    module, _, _ = models.build("vit_b16", **cfg)
    twin = torch_refs.from_aitgen("vit_b16", module, cfg, torch.float32)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    path = work / "vit_b16.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(twin, (torch.from_numpy(x),), str(path), opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["logits"])
    _, outs = ox.load(path)
    with torch.inference_mode():
        want = {"logits": twin(torch.from_numpy(x)).numpy()}
    return outs, {"x": x}, want


def build_case(name: str, work: Path) -> tuple:
    """(model, feeds, entry): compiled, checked against its reference, described."""
    import numpy as np
    import aitgen as ag
    outputs, feeds, want = {"conv": case_conv, "vit": case_vit, "vit_onnx": case_vit_onnx}[name](work)
    model = ag.compile_model(outputs, target="cpu", workdir=work / name)
    got = model.run(feeds)
    report = json.loads((work / name / "report.json").read_text())
    entry = {"max_abs_err": max(float(np.max(np.abs(got[k] - want[k]))) for k in want),
             "num_kernels": report["num_kernels"], "kernel_report": model.kernel_report()}
    return model, feeds, entry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--iters", type=int, default=20, help="timed runs per round (Model.benchmark)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", default="build/patch_conv")
    ap.add_argument("--baseline", help="the --work folder of another checkout's run: A/B in this process")
    ap.add_argument("--out", default=str(HERE / "results" / "patch_conv.json"))
    args = ap.parse_args(argv)
    import aitgen as ag
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    result = {"cpu": cpu_info(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "loadavg_before": os.getloadavg(), "iters": args.iters, "rounds": args.rounds, "cases": {}}
    runs = {}  # (case, side) -> (model, feeds)
    for name in args.cases:
        try:
            model, feeds, entry = build_case(name, work)
        except ImportError as e:
            result["cases"][name] = {"skipped": str(e)}
            continue
        result["cases"][name] = {"this": entry}
        runs[name, "this"] = (model, feeds)
        if args.baseline:
            old = ag.Model.load(Path(args.baseline) / name)
            result["cases"][name]["baseline"] = {"workdir": str(Path(args.baseline) / name),
                                                 "kernel_report": old.kernel_report()}
            runs[name, "baseline"] = (old, feeds)
    medians: dict = {key: [] for key in runs}
    for r in range(args.rounds):
        for name in args.cases:
            sides = [s for s in ("this", "baseline") if (name, s) in runs]
            for side in sides if r % 2 == 0 else sides[::-1]:  # alternate who goes first
                model, feeds = runs[name, side]
                medians[name, side].append(model.benchmark(feeds, iters=args.iters, warmup=2)["median_ms"])
    for (name, side), m in medians.items():
        result["cases"][name][side].update(median_ms=statistics.median(m), min_ms=min(m), round_medians_ms=m)
        print(f"{name:9s} {side:8s} median {statistics.median(m):9.3f} ms  min {min(m):9.3f} ms  "
              f"rounds {[round(v, 2) for v in m]}", flush=True)
    result["loadavg_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
