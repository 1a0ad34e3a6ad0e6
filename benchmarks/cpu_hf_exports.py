#!/usr/bin/env python
"""aitgen's import of ONNX files exported from models written outside this project (Hugging Face
transformers), against onnxruntime on the same file and torch eager on the same model.

    python benchmarks/cpu_hf_exports.py                      # bert_base, gpt2, vit_b16, resnet50, mobilenet_v2
    python benchmarks/cpu_hf_exports.py --models gpt2 --rounds 15
    python benchmarks/cpu_hf_exports.py --small --rounds 2   # tiny configurations: a smoke run
    python benchmarks/cpu_hf_exports.py --models extra       # nine more architectures (LLaMA, T5, Whisper, ...)

Why: cpu_vs_peers.py exports this project's own torch twins (aitgen/models/torch_refs.py), whose
attention and masks are spelt out; onnxruntime fuses less of that than of what transformers
writes, and was 20% slower on the twin's GPT-2 export than on transformers' one on a Zen 4 EPYC.
Issue 14 measures exports of models written elsewhere, as users hold them; this is that
measurement. Each model is built from its transformers config with seeded random weights (no
download: BertModel, GPT2LMHeadModel, ViTForImageClassification, ResNetForImageClassification,
MobileNetV2ForImageClassification at their default, base-size configs; `--models extra` adds LLaMA,
T5's encoder, Whisper's encoder, DistilBERT, DeBERTa-v2, CLIP's vision tower, Swin, ConvNeXt and
RegNet, at the base configurations written in FULL or transformers' defaults), exported with
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
# More architectures users import (`--models extra` or `--models all`): LLaMA's RMS norm, rotary
# embeddings and grouped-query attention; T5's relative position bias; Whisper's long (1500-frame)
# encoder; DeBERTa's disentangled attention; Swin's windows; ConvNeXt; RegNet's squeeze-excite.
EXTRA = ("llama", "t5_encoder", "whisper_encoder", "distilbert", "deberta_v2", "clip_vision", "swin", "convnext",
         "regnet")
SEQ, IMAGE = 128, 224
# Small: a few layers and narrow widths, for the smoke test.
_TINY_TEXT = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=100)
SMALL = {
    "bert_base": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                      vocab_size=100, max_position_embeddings=64),
    "gpt2": dict(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=64),
    "vit_b16": dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                    image_size=32, patch_size=8, num_labels=10),
    "resnet50": dict(embedding_size=8, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10),
    "mobilenet_v2": dict(depth_multiplier=0.25, image_size=32, num_labels=10),
    "llama": dict(_TINY_TEXT, num_key_value_heads=1, max_position_embeddings=64),
    "t5_encoder": dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, vocab_size=100),
    "whisper_encoder": dict(d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                            max_source_positions=8, vocab_size=100),
    "distilbert": dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=100),
    "deberta_v2": dict(_TINY_TEXT, max_position_embeddings=64),
    "clip_vision": dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64),
    "swin": dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4),
    "convnext": dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], image_size=32),
    "regnet": dict(hidden_sizes=[16, 32], depths=[1, 1], groups_width=8, embedding_size=16),
}
# The extras at full size: the published base configurations, written out (nothing is downloaded).
FULL = {
    "llama": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                  intermediate_size=2048, vocab_size=32000, max_position_embeddings=512),
    "t5_encoder": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12, vocab_size=32128),  # t5-base
    "whisper_encoder": dict(d_model=512, encoder_layers=6, encoder_attention_heads=8, encoder_ffn_dim=2048,
                            num_mel_bins=80, max_source_positions=1500),  # whisper-base's encoder, 30 s of audio
    "deberta_v2": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                       vocab_size=32000),
    "clip_vision": dict(image_size=224, patch_size=32),  # ViT-B/32
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, from {list(MODELS + EXTRA)}; 'extra': {list(EXTRA)}; 'all': both")
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
    groups = {"extra": list(EXTRA), "all": list(MODELS + EXTRA)}
    args.models = [n for m in args.models.split(",") if m for n in groups.get(m, [m])]
    if set(args.models) - set(MODELS + EXTRA):
        ap.error(f"unknown model(s) {sorted(set(args.models) - set(MODELS + EXTRA))}; choose from "
                 f"{list(MODELS + EXTRA)}, 'extra' or 'all'")
    if args.rounds < 1 or args.iters < 1 or args.threads < 1:
        ap.error("--rounds, --iters and --threads must be >= 1")
    args.max_rounds = args.max_rounds or 5 * args.rounds
    args.peers = ["onnxruntime", "torch"]   # what cpu_vs_peers.environment records
    args.out = args.out or HERE / "results" / ("cpu_hf_exports_small.json" if args.small else "cpu_hf_exports.json")
    return args


def _builders(tf):
    """name -> (config class, model class, input kind, output names)."""
    return {
        "bert_base": (tf.BertConfig, tf.BertModel, "bert", ["last_hidden_state", "pooler_output"]),
        "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel, "ids", ["logits"]),
        "vit_b16": (tf.ViTConfig, tf.ViTForImageClassification, "image", ["logits"]),
        "resnet50": (tf.ResNetConfig, tf.ResNetForImageClassification, "image", ["logits"]),
        "mobilenet_v2": (tf.MobileNetV2Config, tf.MobileNetV2ForImageClassification, "image", ["logits"]),
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, "text", ["logits"]),
        "t5_encoder": (tf.T5Config, tf.T5EncoderModel, "text", ["last_hidden_state"]),
        "whisper_encoder": (tf.WhisperConfig, tf.WhisperForAudioClassification, "audio", ["logits"]),
        "distilbert": (tf.DistilBertConfig, tf.DistilBertModel, "text", ["last_hidden_state"]),
        "deberta_v2": (tf.DebertaV2Config, tf.DebertaV2Model, "text", ["last_hidden_state"]),
        "clip_vision": (tf.CLIPVisionConfig, tf.CLIPVisionModel, "image", ["last_hidden_state"]),
        "swin": (tf.SwinConfig, tf.SwinModel, "image", ["last_hidden_state"]),
        "convnext": (tf.ConvNextConfig, tf.ConvNextModel, "image", ["last_hidden_state"]),
        "regnet": (tf.RegNetConfig, tf.RegNetModel, "image", ["last_hidden_state"]),
    }


def hf_model(name: str, small: bool):
    """(the transformers model in eval mode, its feeds as numpy arrays, its output names)."""
    import numpy as np
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config_cls, model_cls, kind, outs = _builders(tf)[name]
    extra = dict(SMALL[name] if small else FULL.get(name, {}))
    if name in ("gpt2", "llama"):
        extra["use_cache"] = False
    if kind == "image" and name in MODELS:
        extra = {"num_labels": 1000} | extra
    model = model_cls(config_cls(**extra))
    rng = np.random.default_rng(0)
    seq = 16 if small else SEQ
    vocab = getattr(model.config, "vocab_size", 100)
    if kind in ("bert", "ids", "text"):
        feeds = {"input_ids": rng.integers(0, vocab, (1, seq))}
        if kind != "ids":
            feeds["attention_mask"] = np.ones((1, seq), np.int64)
        if kind == "bert":
            feeds["token_type_ids"] = np.zeros((1, seq), np.int64)
        feeds = {k: v.astype(np.int64) for k, v in feeds.items()}
    elif kind == "audio":  # log-mel frames: twice the encoder's positions (its second conv has stride 2)
        frames = 2 * model.config.max_source_positions
        feeds = {"input_features": rng.standard_normal((1, model.config.num_mel_bins, frames)).astype(np.float32)}
    else:
        # transformers initialises convs at std 0.02 whatever their fan-in: MobileNetV2's logits then
        # come out near 1e-32 (denormals on the way, which no trained model has). Trained batch norms
        # keep activations near unit scale: their statistics are taken here from random images
        # (a cumulative average over one training-mode pass), so every block's output is as large.
        size = extra.get("image_size", 32 if small else IMAGE)
        calibration = torch.from_numpy(rng.standard_normal((4, 3, size, size)).astype(np.float32))
        bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        if bns:
            for bn in bns:
                bn.reset_running_stats()
                bn.momentum = None
            model.train()
            with torch.no_grad():
                model(pixel_values=calibration)
        feeds = {"pixel_values": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
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
