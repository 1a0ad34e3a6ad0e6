"""benchmarks/cpu_hf_exports.py end to end at its tiny configurations: five models written outside
this project (transformers), exported by torch's dynamo exporter, imported and built by aitgen; the
JSON has the documented structure, aitgen and onnxruntime agree with torch eager, and the
transformers' attention, convolutions and layer norms became aitgen's fused kernels (no reference
implementation from oneDNN). No timing assertions: these machines are shared and noisy."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

for mod in ("torch", "onnxruntime", "transformers", "onnxscript"):
    pytest.importorskip(mod, reason=f"needs {mod}: pip install -e '.[torch,bench]'")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_hf_exports.py"


def test_tiny_exports_import_agree_and_write_json(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}   # the script sets its own: it must not inherit this
    proc = subprocess.run([sys.executable, str(SCRIPT), "--small", "--rounds", "1", "--iters", "1", "--warmup", "1",
                           "--max-foreign", "1", "--pause", "0", "--out", str(out), "--workdir", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "cpu_hf_exports" and doc["target_ratio"] == 0.8
    assert "avx2" in doc["environment"]["cpu_isa"]["flags"]
    assert list(doc["models"]) == ["bert_base", "gpt2", "vit_b16", "resnet50", "mobilenet_v2"]
    for name, e in doc["models"].items():
        num = e["numerics"]
        assert num["ok"] is True, (name, num)
        for fw in ("aitgen_onnx", "onnxruntime"):
            for k, d in num["max_abs_diff"][fw].items():
                # a real comparison: outputs of unit scale, not the near-zero ones of an untrained model
                assert num["max_abs_reference"][k] > 1e-2 and 0 <= d <= 1e-3 * num["max_abs_reference"][k], (name, fw, k)
        lat = e["latency_ms"]
        assert set(lat) == {"aitgen_onnx", "onnxruntime", "torch"} and all(v["median"] > 0 for v in lat.values())
        assert e["ratio"]["aitgen_onnx/onnxruntime"] == pytest.approx(
            lat["aitgen_onnx"]["median"] / lat["onnxruntime"]["median"])
        build = e["aitgen_build"]
        assert build["onednn_isa"] and not any(impl.startswith("ref") for impl in build["onednn_isa"]), build
        templates = build["kernels_by_template"]
        layers = 1 if name in ("resnet50", "mobilenet_v2") else 2
        if name in ("bert_base", "gpt2", "vit_b16"):
            assert templates.get("attention") == layers and templates.get("norm_rows", 0) >= 2 * layers, templates
        else:
            assert templates.get("conv_onednn", 0) >= 4 and "pad" not in templates, templates


@pytest.mark.slow
def test_tiny_extra_architectures_import_agree_and_fuse(tmp_path):
    """`--models extra` at tiny sizes: LLaMA, T5, Whisper, DistilBERT, DeBERTa-v2, CLIP, Swin, ConvNeXt,
    RegNet as transformers writes them. Each agrees with torch eager within 1e-3 of its output's
    magnitude, and the patterns exporters spell out op by op arrive fused: LLaMA's and T5's RMS norms
    (pow-mean-rsqrt around a residual stream read twice) become norm kernels, every attention one
    attention kernel, and RegNet's squeeze-excite pools read the NHWC conv results (no layout copy
    but the model's own NCHW input and output)."""
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--small", "--models", "extra", "--rounds", "1", "--iters", "1",
                           "--warmup", "1", "--max-foreign", "1", "--pause", "0", "--out", str(out),
                           "--workdir", str(tmp_path / "w")], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert list(doc["models"]) == ["llama", "t5_encoder", "whisper_encoder", "distilbert", "deberta_v2", "clip_vision",
                                   "swin", "convnext", "regnet"]
    for name, e in doc["models"].items():
        num = e["numerics"]
        assert num["ok"] is True, (name, num)
        for k, d in num["max_abs_diff"]["aitgen_onnx"].items():
            assert num["max_abs_reference"][k] > 1e-2 and 0 <= d <= 1e-3 * num["max_abs_reference"][k], (name, k)
        build = e["aitgen_build"]
        assert not any(impl.startswith("ref") for impl in build["onednn_isa"]), (name, build)
    t = {name: e["aitgen_build"]["kernels_by_template"] for name, e in doc["models"].items()}
    for name in ("llama", "t5_encoder"):  # 2 layers: 2 norms each and the final one
        assert t[name].get("norm_rows") == 5 and t[name].get("attention") == 2, (name, t[name])
    for name in ("whisper_encoder", "distilbert", "clip_vision", "swin"):
        assert t[name].get("attention") == 2, (name, t[name])
    assert t["regnet"].get("strided_copy") == 2 and t["regnet"].get("reduce") == 2, t["regnet"]
