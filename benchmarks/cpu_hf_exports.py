#!/usr/bin/env python
"""aitgen's import of ONNX files exported from models written outside this project (Hugging Face
transformers), against onnxruntime on the same file and torch eager on the same model.

    python benchmarks/cpu_hf_exports.py                      # bert_base, gpt2, vit_b16, resnet50, mobilenet_v2
    python benchmarks/cpu_hf_exports.py --models gpt2 --rounds 15
    python benchmarks/cpu_hf_exports.py --small --rounds 2   # tiny configurations: a smoke run

Why: cpu_vs_peers.py exports this project's own torch twins (aitgen/models/torch_refs.py), whose
attention and masks are spelt out; onnxruntime fuses less of that than of what transformers
writes, and was 20% slower on the twin's GPT-2 export than on transformers' one on a Zen 4 EPYC.
Issue 14 measures exports of models written elsewhere, as users hold them; this is that
measurement. Each model is built from its transformers config with seeded random weights (no
download: BertModel, GPT2LMHeadModel, ViTForImageClassification, ResNetForImageClassification,
MobileNetV2ForImageClassification at their default, base-size configs), exported with
torch.onnx.export(dynamo=True), as current torch does by default, then imported with
aitgen.frontend.onnx.load and compiled for the CPU.

Numerics: aitgen and onnxruntime against torch eager (max abs difference per output, within --tol of
the output's magnitude; a disagreement makes the exit status 1). Timing: cpu_vs_peers.interleave
(rotating turns, a pause before each, busy rounds dropped), medians over the rounds, same threads
for all three. JSON (default benchmarks/results/cpu_hf_exports[_small].json) with the CPU's ISA flags
and the oneDNN implementations aitgen's build chose. Needs the bench and torch extras
(pip install -e ".[torch,bench]": transformers, onnxscript, onnxruntime).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cpu_vs_peers as peers  # noqa: E402  (interleave, agreement, environment, onednn_isa, write_json)

MODELS = ("bert_base", "gpt2", "vit_b16", "resnet50", "mobilenet_v2")
SEQ, IMAGE = 128, 224
# Small: a few layers and narrow widths, for the smoke test.
SMALL = {
    "bert_base": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                      vocab_size=100, max_position_embeddings=64),
    "gpt2": dict(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=64),
    "vit_b16": dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                    image_size=32, patch_size=8, num_labels=10),
    "resnet50": dict(embedding_size=8, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10),
    "mobilenet_v2": dict(depth_multiplier=0.25, image_size=32, num_labels=10),
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {list(MODELS)}")
    ap.add_argument("--small", action="store_true", help="tiny configurations (smoke run)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-foreign", type=float, default=0.05)
    ap.add_argument("--max-rounds", type=int, default=None)
    ap.add_argument("--pause", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--workdir", type=Path, default=None, help="keep exports and builds here (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    if set(args.models) - set(MODELS):
        ap.error(f"unknown model(s) {sorted(set(args.models) - set(MODELS))}; choose from {list(MODELS)}")
    if args.rounds < 1 or args.iters < 1 or args.threads < 1:
        ap.error("--rounds, --iters and --threads must be >= 1")
    args.max_rounds = args.max_rounds or 5 * args.rounds
    args.peers = ["onnxruntime", "torch"]   # what cpu_vs_peers.environment records
    args.out = args.out or HERE / "results" / ("cpu_hf_exports_small.json" if args.small else "cpu_hf_exports.json")
    return args


def hf_model(name: str, small: bool):
    """(the transformers model in eval mode, its feeds as numpy arrays, its output names)."""
    import numpy as np
    import torch
    import transformers as tf

    torch.manual_seed(0)
    extra = SMALL[name] if small else {}
    rng = np.random.default_rng(0)
    seq = 16 if small else SEQ
    if name in ("bert_base", "gpt2"):
        if name == "bert_base":
            model = tf.BertModel(tf.BertConfig(**extra))
            feeds = {"input_ids": rng.integers(0, model.config.vocab_size, (1, seq)),
                     "attention_mask": np.ones((1, seq), np.int64), "token_type_ids": np.zeros((1, seq), np.int64)}
            outs = ["last_hidden_state", "pooler_output"]
        else:
            model = tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False, **extra))
            feeds = {"input_ids": rng.integers(0, model.config.vocab_size, (1, seq))}
            outs = ["logits"]
        feeds = {k: v.astype(np.int64) for k, v in feeds.items()}
    else:
        cls = {"vit_b16": (tf.ViTConfig, tf.ViTForImageClassification),
               "resnet50": (tf.ResNetConfig, tf.ResNetForImageClassification),
               "mobilenet_v2": (tf.MobileNetV2Config, tf.MobileNetV2ForImageClassification)}[name]
        model = cls[1](cls[0](**({"num_labels": 1000} | extra)))
        # transformers initialises convs at std 0.02 whatever their fan-in: MobileNetV2's logits then
        # come out near 1e-32 (denormals on the way, which no trained model has). Trained batch norms
        # keep activations near unit scale: their statistics are taken here from random images
        # (a cumulative average over one training-mode pass), so every block's output is as large.
        size = extra.get("image_size", 32 if small else IMAGE)
        bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None
        model.train()
        with torch.no_grad():
            model(pixel_values=torch.from_numpy(rng.standard_normal((4, 3, size, size)).astype(np.float32)))
        feeds = {"pixel_values": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
        outs = ["logits"]
    return model.eval(), feeds, outs


def export(model, feeds: dict, outs: list, path: Path) -> None:
    import torch

    kwargs = {k: torch.from_numpy(v) for k, v in feeds.items()}
    with torch.no_grad():
        torch.onnx.export(model, (), str(path), kwargs=kwargs, input_names=list(feeds), output_names=outs,
                          dynamo=True, verbose=False)


def bench_model(name: str, args, work: Path) -> dict:
    import numpy as np
    import torch

    import aitgen as ag
    from aitgen.frontend import onnx as ag_onnx

    model, feeds, outs = hf_model(name, args.small)
    path = work / f"{name}.onnx"
    t0 = time.perf_counter()
    export(model, feeds, outs, path)
    entry = {"export_seconds": round(time.perf_counter() - t0, 1), "feeds": {k: list(v.shape) for k, v in feeds.items()}}
    t0 = time.perf_counter()
    inputs, outputs = ag_onnx.load(str(path))
    built = ag.compile_model({k: outputs[k] for k in outs}, target="cpu", workdir=work / f"{name}_aitgen")
    entry["aitgen_build_seconds"] = round(time.perf_counter() - t0, 1)
    report = json.loads((work / f"{name}_aitgen" / "report.json").read_text())
    entry["aitgen_build"] = {k: report.get(k) for k in ("num_ops", "num_kernels", "unique_kernels")}
    entry["aitgen_build"]["onednn_isa"] = peers.onednn_isa(report)
    kernels: dict = {}
    for k in report["kernels"]:
        t = Path(k["template"]).name.replace(".cpp.j2", "")
        kernels[t] = kernels.get(t, 0) + 1
    entry["aitgen_build"]["kernels_by_template"] = dict(sorted(kernels.items()))
    mine = {k: feeds[k] for k in inputs}
    tfeeds = {k: torch.from_numpy(v) for k, v in feeds.items()}

    def torch_run():
        with torch.no_grad():
            r = model(**tfeeds)
        return {k: r[k].numpy() for k in outs}

    runners = {"aitgen_onnx": lambda: built.run(mine),
               "onnxruntime": peers.ort_runner(path, feeds, outs, args.threads), "torch": torch_run}
    reference = torch_run()
    entry["numerics"] = peers.agreement({k: r() for k, r in runners.items() if k != "torch"}, reference, args.tol)
    entry["numerics"]["reference"] = "torch eager float32 (the exported model)"
    samples, entry["rounds"] = peers.interleave(runners, args)
    entry["latency_ms"] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "rounds": v}
                           for k, v in samples.items()}
    med = {k: v["median"] for k, v in entry["latency_ms"].items()}
    entry["ratio"] = {"aitgen_onnx/onnxruntime": med["aitgen_onnx"] / med["onnxruntime"],
                      "aitgen_onnx/torch": med["aitgen_onnx"] / med["torch"]}
    entry["target"] = {"aitgen_onnx/onnxruntime <=": peers.TARGET_RATIO,
                       "met": entry["ratio"]["aitgen_onnx/onnxruntime"] <= peers.TARGET_RATIO}
    built.close()
    return entry


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)   # before anything loads OpenMP
    import torch

    torch.set_num_threads(args.threads)
    load, results, status = os.getloadavg()[0], {}, 0
    with tempfile.TemporaryDirectory(prefix="aitgen_hf_") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.models:
            print(f"[cpu_hf_exports] {name}: exporting, building, checking, timing ...", file=sys.stderr, flush=True)
            results[name] = e = bench_model(name, args, work)
            gc.collect()
            status |= 0 if e["numerics"]["ok"] else 1
            lat = e["latency_ms"]
            print(f"  {name}: aitgen {lat['aitgen_onnx']['median']:.2f} ms, onnxruntime "
                  f"{lat['onnxruntime']['median']:.2f} ms, torch {lat['torch']['median']:.2f} ms; aitgen/ort "
                  f"{e['ratio']['aitgen_onnx/onnxruntime']:.2f}x; numerics {'ok' if e['numerics']['ok'] else 'MISMATCH'} "
                  f"{e['numerics']['max_abs_diff']}", flush=True)
    env = peers.environment(args, load)
    peers.write_json(args.out, {"benchmark": "cpu_hf_exports", "environment": env, "target_ratio": peers.TARGET_RATIO,
                                "models": results})
    return status


if __name__ == "__main__":
    sys.exit(main())
