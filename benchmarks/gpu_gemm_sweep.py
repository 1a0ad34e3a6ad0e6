#!/usr/bin/env python
"""aitgen's CUTLASS GEMMs against torch.matmul (cuBLAS) on the present GPU, in TFLOP/s.

    python benchmarks/gpu_gemm_sweep.py --out $OUT/gemm_sweep.json
    python benchmarks/gpu_gemm_sweep.py --profile          # time every candidate config first (minutes)
    python benchmarks/gpu_gemm_sweep.py --shapes 4096 8192 --dtypes bfloat16

Each shape is a model of --repeat GEMMs C_i = A_i @ B (A_i [M, K] distinct inputs, so no pass
merges them; B [K, N] row-major, as torch.matmul(a, b) reads it), built once with fusion off (no
grouping into one launch). A run costs a host round trip that a GEMM of a few hundred microseconds
does not hide, so the time per GEMM is (t(repeat) - t(1)) / (repeat - 1): two models, the same
kernels (compiled once, the build cache shares them). torch gets the same difference of a
chain of `repeat` and of 1 matmul. Each time is the median of --rounds rounds of --iters calls.
That difference still counts a run's host work per input and output; the kernels' own device time,
read by torch.profiler on the 1-GEMM model and one torch.matmul, is reported beside it
(`*_kernel_ms`, `*_kernel_tflops`, `kernel_ratio_vs_torch`).
The configs are the heuristic's, or with --profile the profiler's winners (aitgen.profiler, cached
in the build cache dir, so a second run reuses them). Target: large bf16 >= 0.95x torch.

JSON: per case, dtype, M/N/K, aitgen and torch ms and TFLOP/s, the ratio, and the kernel configs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpu_bandwidth import median_ms

HERE = Path(__file__).resolve().parent
SHAPES = {  # name: (M, N, K)
    "4096": (4096, 4096, 4096),
    "8192": (8192, 8192, 8192),
    "bert_qkv_b32": (4096, 2304, 768),      # BERT-base, batch 32 x seq 128
    "bert_ffn1_b32": (4096, 3072, 768),
    "bert_ffn2_b32": (4096, 768, 3072),
    "llm_4k": (8192, 4096, 4096),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=["4096", "8192", "bert_ffn1_b32", "bert_ffn2_b32"],
                    choices=list(SHAPES))
    ap.add_argument("--dtypes", nargs="*", default=["bfloat16", "float16"])
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="profile the candidate configs before building")
    ap.add_argument("--workdir", default="/tmp/aitgen_gemm_sweep")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_gemm_sweep.json"))
    return ap.parse_args(argv)


def build(name, dt, m, n, k, repeat, args, arch=None):
    """Compile the model of `repeat` GEMMs for `arch` (None: the GPU's); returns (workdir, the GEMM
    kernel's configs). scripts/gpu_prebuild.py calls it ahead of time with an arch."""
    import aitgen as ag
    from aitgen import ops
    from aitgen.codegen.backend import load_backend
    from aitgen.codegen.kernels.cuda import gemm as gemm_k
    from aitgen.codegen.kernels.cuda.configs import configs as kernel_configs
    from aitgen.compiler import compile_options
    from aitgen.ir.graph import Graph
    from aitgen.passes import PIPELINE, run_pipeline
    from aitgen.runtime.device import cuda_capability
    b = ag.Tensor([k, n], dtype=dt, name="b")
    outs = {f"c{i}": ops.gemm(ag.Tensor([m, k], dtype=dt, name=f"a{i}"), b) for i in range(repeat)}
    work = Path(args.workdir) / f"{name}_{dt}_{repeat}"
    arch = arch or load_backend("cuda").resolve_arch(None, cuda_capability)
    opts = compile_options("cuda", arch=arch, fusion=False)
    g = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    if args.profile and repeat == 1:
        from aitgen.codegen.kernels.cuda.profile import profile_graph
        print(name, dt, "profile:", profile_graph(g, opts, work / "profile")["winners"], flush=True)
    op = next(o for o in g.ops if o.kind is ag.OpKind.GEMM)
    kern = gemm_k.gemm_kernel(gemm_k.gemm_problem(op), arch, False)
    configs = [c["name"] for c in kernel_configs(kern.problem, arch)] if kern.problem else ["simt"]
    ag.compile_model(outs, target="cuda", arch=arch, workdir=work, fusion=False, load=False)
    return work, configs


def kernel_ms(fn, torch, iters: int = 10) -> tuple[float, list[str]]:
    """Device time per call of the kernels `fn` launches, read by torch.profiler (CUPTI, which sees
    every kernel of the process, aitgen's too, graph replays included), and their names. Unlike the
    wall-clock difference below, no host work is in it: a model run's Python and DLPack work per
    input and output grows with --repeat, which the difference counts as GEMM time."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.lower().startswith(("memcpy", "memset"))]
    total_us = sum(e.time_range.end - e.time_range.start for e in kernels)
    return total_us / iters / 1e3, sorted({e.name[:120] for e in kernels})


def measure(entry: dict, tdt, args, torch, ag) -> None:
    """Time one shape at 1 and args.repeat GEMMs per run (aitgen and torch), into entry."""
    name, dt, m, n, k = entry["case"], entry["dtype"], entry["m"], entry["n"], entry["k"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = [torch.randn(m, k, device="cuda", dtype=tdt, generator=gen) * 0.1 for _ in range(args.repeat)]
    b = torch.randn(k, n, device="cuda", dtype=tdt, generator=gen) * 0.1
    ms = {}
    for rep in (1, args.repeat):
        work, configs = build(name, dt, m, n, k, rep, args)
        model = ag.Model.load(work)
        try:
            feeds = {"b": b, **{f"a{i}": a[i] for i in range(rep)}}
            if rep == 1:
                got = model.run(feeds)["c0"].float()
                ref = torch.matmul(a[0], b).float()
                entry["max_rel_diff_vs_torch"] = float((got - ref).abs().max() / ref.abs().max())
                entry["configs"] = configs
            ms[("aitgen", rep)] = median_ms(lambda mdl=model, f=feeds: mdl.run(f), torch.cuda.synchronize, args.iters,
                                            args.rounds)
            if rep == 1:
                try:
                    entry["aitgen_kernel_ms"], entry["aitgen_kernels"] = kernel_ms(lambda: model.run(feeds), torch)
                    entry["torch_kernel_ms"], entry["torch_kernels"] = kernel_ms(lambda: torch.matmul(a[0], b), torch)
                except Exception as e:  # noqa: BLE001 - no CUPTI: the wall-clock figures stand alone
                    entry["kernel_ms_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        finally:
            model.close()
        ms[("torch", rep)] = median_ms(lambda r=rep, a=a, b=b: [torch.matmul(a[i], b) for i in range(r)],
                                       torch.cuda.synchronize, args.iters, args.rounds)
    flop = 2.0 * m * n * k
    for who in ("aitgen", "torch"):
        per = (ms[(who, args.repeat)] - ms[(who, 1)]) / (args.repeat - 1)
        entry[f"{who}_ms"] = per
        entry[f"{who}_tflops"] = flop / (per * 1e-3) / 1e12 if per > 0 else None
    if entry["aitgen_tflops"] and entry["torch_tflops"]:
        entry["ratio_vs_torch"] = entry["aitgen_tflops"] / entry["torch_tflops"]
    for who in ("aitgen", "torch"):   # from the kernels' own device time (kernel_ms)
        if entry.get(f"{who}_kernel_ms"):
            entry[f"{who}_kernel_tflops"] = flop / (entry[f"{who}_kernel_ms"] * 1e-3) / 1e12
    if entry.get("aitgen_kernel_tflops") and entry.get("torch_kernel_tflops"):
        entry["kernel_ratio_vs_torch"] = entry["aitgen_kernel_tflops"] / entry["torch_kernel_tflops"]


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    import aitgen as ag
    if not torch.cuda.is_available():
        print("gpu_gemm_sweep: no CUDA device", file=sys.stderr)
        return 2
    results = {"device": torch.cuda.get_device_name(), "repeat": args.repeat, "cases": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:   # after every case: a time box or a crash keeps the cases already measured
        big = [c.get("ratio_vs_torch") for c in results["cases"]
               if c["dtype"] == "bfloat16" and c["m"] * c["n"] >= 4096 ** 2]
        results["large_bf16_min_ratio"] = min((r for r in big if r), default=None)
        bigk = [c.get("kernel_ratio_vs_torch") for c in results["cases"]
                if c["dtype"] == "bfloat16" and c["m"] * c["n"] >= 4096 ** 2]
        results["large_bf16_min_kernel_ratio"] = min((r for r in bigk if r), default=None)
        out.write_text(json.dumps(results, indent=1))

    for dt in args.dtypes:
        for name in args.shapes:
            m, n, k = SHAPES[name]
            entry = {"case": name, "dtype": dt, "m": m, "n": n, "k": k}
            try:
                measure(entry, getattr(torch, dt), args, torch, ag)
            except Exception as e:  # one failing shape must not cost the sweep the others
                entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(entry), flush=True)
            results["cases"].append(entry)
            save()
    save()
    print(f"gpu_gemm_sweep: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
