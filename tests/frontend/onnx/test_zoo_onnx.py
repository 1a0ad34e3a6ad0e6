"""ONNX exports of the zoo's torch twins: imported, compiled for the CPU, equal to onnxruntime.

The twins (aitgen/models/torch_refs.py) hold the weights of the aitgen zoo models; torch 2.13's
TorchScript exporter (`dynamo=False`: the dynamo exporter needs onnxscript, which is not a
dependency) writes them as opset-17 ONNX. Tolerance: float32 on both sides, rtol 1e-4 and atol
1e-4 of the output's largest magnitude (the two runtimes sum GEMMs and reductions in different
orders). GPT-2 and BERT are also exported with dynamic batch / sequence axes and run at two
sizes from one build (GPT-2's causal mask is then a Trilu over a dynamic [seq, seq]). The default tier
runs ResNet, BERT and dynamic BERT; the rest, and the full-size models, are in the slow tier.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import aitgen as ag  # noqa: E402
from aitgen import models  # noqa: E402
from aitgen.frontend import onnx as ox  # noqa: E402
from aitgen.ir.op import OpKind  # noqa: E402
from aitgen.models import torch_refs  # noqa: E402

SMALL = {
    "resnet50": dict(layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10),
    "mobilenet_v2": dict(width=0.25, image_size=32, num_classes=10),
    "bert_base": dict(layers=2, hidden=32, heads=2, intermediate=64, vocab=100, seq=8),
    "vit_b16": dict(image_size=32, patch=8, layers=2, hidden=32, heads=2, mlp=64, num_classes=10),
    "gpt2": dict(layers=2, hidden=32, heads=2, vocab=100, seq=8),
}
FULL = {"resnet50": dict(), "mobilenet_v2": dict(), "bert_base": dict(seq=128), "vit_b16": dict(),
        "gpt2": dict(seq=128)}


def _feeds(inputs: dict, rng, sizes=None) -> dict:
    """Feeds in the twins' layout (images NCHW)."""
    out = {}
    for name, t in inputs.items():
        shape = [d.value if d.is_static else (sizes or {}).get(d.name, d.upper) for d in t.shape]
        if t.dtype.is_float:
            a = rng.standard_normal(shape).astype(np.float32)
            out[name] = np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if a.ndim == 4 else a
        elif name == "attention_mask":
            m = np.ones(shape, t.dtype.np)
            m[..., -2:] = 0
            out[name] = m
        elif name == "token_type_ids":
            out[name] = rng.integers(0, 2, shape).astype(t.dtype.np)
        else:
            out[name] = rng.integers(0, 100, shape).astype(t.dtype.np)
    return out


def _export(name: str, cfg: dict, path, dynamic: bool = False):
    module, inputs, outputs = models.build(name, **cfg)
    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
    feeds = _feeds(inputs, np.random.default_rng(0))
    out_names = list(outputs)
    axes = None
    if dynamic:
        axes = {k: ({0: "batch", 1: "seq"} if v.ndim == 2 else {0: "batch"}) for k, v in feeds.items()}
        axes.update({o: {0: "batch"} for o in out_names})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(twin, tuple(torch.from_numpy(v) for v in feeds.values()), str(path), opset_version=17,
                          dynamo=False, input_names=list(feeds), output_names=out_names, dynamic_axes=axes)
    return inputs, feeds, out_names


def _ort(path, feeds: dict) -> dict:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, (what, got.shape, want.shape)
    scale = max(float(np.max(np.abs(want))), 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


def _check(name: str, cfg: dict, tmp_path, dynamic: bool = False, sizes=({},)):
    path = tmp_path / f"{name}.onnx"
    inputs, feeds, out_names = _export(name, cfg, path, dynamic)
    bounds = {"batch": (1, 4), "seq": (1, 16)} if dynamic else None
    ins, outs = ox.load(path, dim_bounds=bounds)
    assert set(outs) == set(out_names)
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "build")
    # compile_model's kernel check: no GEMM/conv of the import runs oneDNN's reference kernel
    report = json.loads((tmp_path / "build" / "report.json").read_text())
    assert report["onednn_impls"] and report["reference_kernels"] == [], report["reference_kernels"]
    rng = np.random.default_rng(1)
    for sz in sizes:
        f = _feeds(inputs, rng, sz) if sz else feeds
        f = {k: v for k, v in f.items() if k in model.input_specs}
        want = _ort(path, f)
        got = model.run(f)
        for k in out_names:
            _close(got[k], want[k], f"{name} {k} {sz}")
    assert model.kernel_report()["reference_kernels"] == []
    model.close()
    return outs


# The default tier keeps one conv net and one transformer; CI's slow tier runs the other three.
_DEFAULT = ("resnet50", "bert_base")


@pytest.mark.torch
@pytest.mark.parametrize("name", [n if n in _DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in sorted(SMALL)])
def test_zoo_export_small_equals_onnxruntime(tmp_path, name):
    outs = _check(name, SMALL[name], tmp_path)
    if name in ("resnet50", "mobilenet_v2"):
        # NCHW <-> NHWC at the edges only: after the passes no permute sits between two convs.
        from aitgen.compiler import compile_options
        from aitgen.ir.graph import Graph
        from aitgen.passes import PIPELINE, run_pipeline
        g = run_pipeline(Graph.from_outputs(outs), compile_options(target="cpu"), list(PIPELINE))
        permutes = [op for op in g.ops if op.kind is OpKind.PERMUTE]
        convs = [op for op in g.ops if op.kind is OpKind.CONV2D]
        assert convs and len(permutes) <= 1, [op.name for op in permutes]


@pytest.mark.torch
@pytest.mark.parametrize("name", ["bert_base", pytest.param("gpt2", marks=pytest.mark.slow)])
def test_zoo_export_dynamic_batch_and_seq(tmp_path, name):
    cfg = {**SMALL[name], "batch": 2}
    _check(name, cfg, tmp_path, dynamic=True, sizes=({"batch": 3, "seq": 5}, {"batch": 1, "seq": 16}))


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(FULL))
def test_zoo_export_full_equals_onnxruntime(tmp_path, name):
    _check(name, FULL[name], tmp_path)
