#!/usr/bin/env python
"""aitgen's fused attention kernel on the GPU against torch's scaled_dot_product_attention.

    python benchmarks/gpu_attention.py                 # the shapes below, sm arch of the present GPU
    python benchmarks/gpu_attention.py --chain 8 --rounds 3

A model run costs a host round trip (Python, the C API, a stream synchronisation) that dwarfs a
few-microsecond kernel, so each case is a chain of --chain attention ops (the output of one is the
query of the next) built as one model, and timed as (t(chain) - t(1 op)) / (chain - 1): the
per-attention device time, launch included. torch gets the same chain, eager and CUDA-graph
replayed (torch.cuda.graphs: its launch overhead gone too), timed the same way. TFLOP/s counts
4 B H Sq Sk D (halved when causal). Before timing, aitgen's output is compared with torch's.

Results: JSON (--out, default benchmarks/results/gpu_attention.json).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

# the same timing loop (benchmarks/ is on sys.path when a script here runs)
from gpu_bandwidth import median_ms as per_call_ms

HERE = Path(__file__).resolve().parent
# name: (dtype, batch, heads, seq, head dim, mask, causal)
CASES = {
    "bert_base_s128_b1": ("float16", 1, 12, 128, 64, "add", False),
    "bert_base_s512_b8": ("float16", 8, 12, 512, 64, "add", False),
    "gpt2_s1024_b4_causal": ("bfloat16", 4, 12, 1024, 64, None, True),
    "d128_s2048_b2": ("float16", 2, 16, 2048, 128, None, False),
    "d128_s2048_b2_causal": ("bfloat16", 2, 16, 2048, 128, None, True),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--chain", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/aitgen_gpu_attention")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_attention.json"))
    return ap.parse_args(argv)


def bench_case(name, args, torch) -> dict:
    import aitgen as ag
    from aitgen import ops

    dtype, b, h, s, d, mask, causal = CASES[name]
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    dev = {n: torch.randn(b, h, s, d, device="cuda", dtype=tdt, generator=gen) for n in ("q", "k", "v")}
    if mask == "add":
        m = torch.zeros(b, 1, 1, s, device="cuda", dtype=tdt)
        m[..., -s // 8:] = -10000.0
        dev["m"] = m
    entry = {"dtype": dtype, "batch": b, "heads": h, "seq": s, "head_dim": d, "mask": mask,
             "causal": causal}
    times = {}
    for n_ops in (1, args.chain):
        q, k, v = (ag.Tensor([b, h, s, d], dtype, name=n) for n in ("q", "k", "v"))
        mt = ag.Tensor([b, 1, 1, s], dtype, name="m") if mask else None
        y = q
        for _ in range(n_ops):
            y = ops.scaled_dot_product_attention(y, k, v, mt, causal=causal)
        work = ag.compile_model({"y": y}, target="cuda", workdir=Path(args.workdir) / f"{name}_{n_ops}", load=False)
        for graphed in (False, True):
            model = ag.Model.load(work, cuda_graph=graphed)
            if n_ops == 1 and not graphed:
                ref = torch.nn.functional.scaled_dot_product_attention(
                    dev["q"], dev["k"], dev["v"], attn_mask=dev.get("m"), is_causal=causal)
                got = model.run(dev)["y"]
                entry["max_rel_diff_vs_torch"] = float((got.float() - ref.float()).abs().max()
                                                       / ref.float().abs().max().clamp_min(1e-6))
            times[("aitgen_cuda_graph" if graphed else "aitgen", n_ops)] = per_call_ms(
                lambda m=model: m.run(dev), torch.cuda.synchronize, args.iters, args.rounds)
            model.close()

        def chain(n=n_ops):
            y = dev["q"]
            for _ in range(n):
                y = torch.nn.functional.scaled_dot_product_attention(y, dev["k"], dev["v"], attn_mask=dev.get("m"),
                                                                     is_causal=causal)
            return y
        with torch.inference_mode():
            times[("torch_eager", n_ops)] = per_call_ms(chain, torch.cuda.synchronize, args.iters, args.rounds)
            chain()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                chain()
            times[("torch_cuda_graph", n_ops)] = per_call_ms(graph.replay, torch.cuda.synchronize,
                                                             args.iters, args.rounds)
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    entry["per_attention_us"], entry["tflops"] = {}, {}
    for who in ("aitgen", "aitgen_cuda_graph", "torch_eager", "torch_cuda_graph"):
        ms = (times[(who, args.chain)] - times[(who, 1)]) / (args.chain - 1)
        entry["per_attention_us"][who] = round(ms * 1e3, 2)
        entry["tflops"][who] = round(flops / (ms * 1e-3) / 1e12, 1) if ms > 0 else None
    entry["run_ms"] = {f"{who}_x{n}": round(t, 4) for (who, n), t in times.items()}
    return entry


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 1
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "chain": args.chain, "cases": {}}
    for name in args.cases:
        result["cases"][name] = e = bench_case(name, args, torch)
        print(f"{name:24s} aitgen {e['per_attention_us']['aitgen_cuda_graph']:8.2f} us  "
              f"torch {e['per_attention_us']['torch_cuda_graph']:8.2f} us  (graph-replayed; "
              f"max rel diff {e['max_rel_diff_vs_torch']:.2e})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
