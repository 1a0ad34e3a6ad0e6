"""Model zoo: registry, structure at the default (full-size) configs, and numerics of small configs
against hand-written torch twins (aitgen/models/torch_refs.py) loaded with the same weights.

Full-size models are only built here (shape inference and seeded weights, about a second each);
evaluating them with the numpy oracle is marked slow.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import aitgen as ag
from aitgen import models

# aitgen's oracle computes in float32; the torch twins run in float64, so the gap is aitgen's own
# float32 rounding, which stays below this for the small configs below.
RTOL = ATOL = 1e-5

SMALL = {
    "resnet50": dict(layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10),
    "mobilenet_v2": dict(width=0.25, image_size=32, num_classes=10),
    "vit_b16": dict(image_size=32, patch=8, layers=2, hidden=32, heads=2, mlp=64, num_classes=10),
    "bert_base": dict(layers=2, hidden=32, heads=2, intermediate=64, vocab=100, max_position=16, seq=8),
    "gpt2": dict(layers=2, hidden=32, heads=2, vocab=100, max_position=16, seq=8),
}


def _counts(outputs) -> dict[str, int]:
    return ag.Graph.from_outputs(outputs).op_counts()


def _check_graph(outputs) -> ag.Graph:
    """The IR verifier passes, and parameter names are unique (weights are looked up by name)."""
    g = ag.Graph.from_outputs(outputs)
    ag.verify(g)
    names = [t.name for t in g.constants if t.name]
    assert len(names) == len(set(names))
    return g


def _shape(t) -> list:
    return [d.value if d.is_static else d for d in t.shape]


def _feeds(name: str, inputs: dict, batch: int, seq: int = 8, vocab: int = 100, seed: int = 0):
    rng = np.random.default_rng(seed)
    if "x" in inputs:
        size = inputs["x"].shape[1].value
        return {"x": rng.standard_normal((batch, size, size, 3)).astype(np.float32)}
    feeds = {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64)}
    if "token_type_ids" in inputs:
        feeds["token_type_ids"] = rng.integers(0, 2, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[0, seq - 3:] = 0  # padding at the end of the first sequence exercises the mask
        feeds["attention_mask"] = mask
    return feeds


def _torch_outputs(name: str, module, config: dict, feeds: dict) -> dict[str, np.ndarray]:
    torch = pytest.importorskip("torch")
    from aitgen.models import torch_refs  # imports torch: only after the skip

    # float64 twin; the twins take only architecture keys (batch, seq, image_size belong to the input).
    ref = torch_refs.from_aitgen(name, module, config)
    with torch.no_grad():
        if "x" in feeds:  # NHWC -> NCHW at the edge
            return {"logits": ref(torch.from_numpy(feeds["x"].transpose(0, 3, 1, 2).astype(np.float64))).numpy()}
        args = [torch.from_numpy(feeds[k]) for k in ("input_ids", "token_type_ids", "attention_mask") if k in feeds]
        out = ref(*args)
    if name == "bert_base":
        return {"last_hidden_state": out[0].numpy(), "pooler_output": out[1].numpy()}
    return {"logits": out.numpy()}


# -- registry -------------------------------------------------------------------------------

def test_list_models():
    assert models.list_models() == sorted(["resnet50", "bert_base", "vit_b16", "gpt2", "mobilenet_v2"])


def test_unknown_model_and_config_key():
    with pytest.raises(ValueError, match="unknown model 'resnet18'"):
        models.get("resnet18")
    with pytest.raises(TypeError):
        models.get("gpt2", hidden_size=32)
    with pytest.raises(ValueError, match="max_position"):
        models.get("gpt2", **{**SMALL["gpt2"], "seq": 17})


def test_build_returns_named_inputs_and_outputs():
    module, inputs, outputs = models.build("bert_base", **SMALL["bert_base"])
    assert isinstance(module, ag.nn.Module)
    assert list(inputs) == ["input_ids", "token_type_ids", "attention_mask"]
    assert all(t.name == k and t.dtype == ag.DType.int64 for k, t in inputs.items())
    assert list(outputs) == ["last_hidden_state", "pooler_output"]


# -- structure at the default configs -------------------------------------------------------

def test_resnet50_default_structure():
    module, inputs, outputs = models.build("resnet50")
    assert _shape(inputs["x"]) == [1, 224, 224, 3]
    assert _shape(outputs["logits"]) == [1, 1000]
    counts = _check_graph(outputs).op_counts()
    assert counts["conv2d"] == 53 and counts["gemm"] == 1, counts
    running = sum(v.size for k, v in module.state_dict().items() if ".running_" in k)
    # torchvision resnet50's trainable count; nn keeps BN running stats as parameters too.
    assert module.num_parameters() - running == 25_557_032


def test_bert_base_default_structure():
    module, inputs, outputs = models.build("bert_base")
    shapes = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    layers = {int(m.group(1)) for k in shapes if (m := re.match(r"encoder\.layer\.(\d+)\.", k))}
    assert layers == set(range(12))
    assert shapes["embeddings.word_embeddings.weight"] == (30522, 768)
    assert shapes["embeddings.position_embeddings.weight"] == (512, 768)
    assert shapes["embeddings.token_type_embeddings.weight"] == (2, 768)
    for i in range(12):
        p = f"encoder.layer.{i}."
        for qkv in ("query", "key", "value"):
            assert shapes[p + f"attention.self.{qkv}.weight"] == (768, 768)
        assert shapes[p + "intermediate.dense.weight"] == (3072, 768)
        assert shapes[p + "output.dense.weight"] == (768, 3072)
    assert module.encoder.layer[0].attention.self.heads == 12
    assert sum(int(np.prod(s)) for s in shapes.values()) == 109_482_240  # HF bert-base-uncased
    counts = _check_graph(outputs).op_counts()
    assert counts["attention"] == 12 and counts["layernorm"] == 25, counts
    assert _shape(outputs["last_hidden_state"]) == [1, 128, 768]
    assert _shape(outputs["pooler_output"]) == [1, 768]
    # The attention op sees 12 heads of 64.
    attn = [op for op in ag.Graph.from_outputs(outputs).ops if op.kind.value == "attention"]
    assert _shape(attn[0].inputs[0])[1:] == [12, 128, 64]


@pytest.mark.parametrize("name,logits,params", [
    ("vit_b16", [1, 1000], 86_567_656),       # torchvision vit_b_16
    ("mobilenet_v2", [1, 1000], 3_504_872),   # torchvision mobilenet_v2
    ("gpt2", [1, 128, 50257], 124_439_808),   # HF gpt2 (tied head counted once)
])
def test_default_configs_build(name, logits, params):
    module, _, outputs = models.build(name)
    assert _shape(outputs["logits"]) == logits
    _check_graph(outputs)
    running = sum(v.size for k, v in module.state_dict().items() if ".running_" in k)
    assert module.num_parameters() - running == params


def test_mobilenet_v2_structure():
    _, _, outputs = models.build("mobilenet_v2")
    counts = _counts(outputs)
    assert counts["conv2d"] == 52 and counts["gemm"] == 1, counts  # 1 + 17 blocks (3 or 2 convs) + 1
    assert counts["add"] == 10, counts  # residual connections


@pytest.mark.parametrize("name", ["bert_base", "gpt2"])
def test_position_ids_static_and_dynamic(name):
    # Position rows are one slice of the table with a symbolic end: no gather, no helper ops.
    _, static = models.get(name, **SMALL[name])
    seq = ag.IntVar("seq", 1, 16)
    _, dynamic = models.get(name, **{**SMALL[name], "seq": seq})
    for outs in (static, dynamic):
        assert "concat" not in _counts(outs)
    out = next(iter(dynamic.values()))
    assert out.shape[1] is seq


def test_gpt2_head_is_tied_to_wte():
    module, _, outputs = models.build("gpt2", **SMALL["gpt2"])
    head = outputs["logits"].producer
    assert head.kind.value == "gemm" and head.attrs.layout == "rcr"
    assert head.inputs[1] is module.transformer.wte.weight


# -- determinism ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_constants(name):
    def constants(seed):
        _, outputs = models.get(name, seed=seed, **SMALL[name])
        return {t.name: t.value for t in ag.Graph.from_outputs(outputs).constants if t.name}

    a, b, c = constants(0), constants(0), constants(1)
    assert a.keys() == b.keys() and len(a) > 0
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.array_equal(a[k], c[k]) for k in a)


def test_parameters_named_by_path():
    module, _, outputs = models.build("resnet50", **SMALL["resnet50"])
    names = {t.name for t in ag.Graph.from_outputs(outputs).constants}
    assert {"conv1.weight", "layer1.0.downsample.0.weight", "layer4.0.bn3.running_var", "fc.bias"} <= names


# -- numerics against torch -----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_matches_torch(name):
    pytest.importorskip("torch")
    cfg = dict(SMALL[name], batch=2)
    module, inputs, outputs = models.build(name, **cfg)
    feeds = _feeds(name, inputs, batch=2, seq=cfg.get("seq", 8))
    got = ag.reference.run(outputs, feeds)
    want = _torch_outputs(name, module, cfg, feeds)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == np.float32 and got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL, err_msg=f"{name}:{k}")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_dynamic_batch_and_seq_match_torch(name):
    pytest.importorskip("torch")
    cfg = dict(SMALL[name], batch=ag.IntVar("batch", 1, 4))
    if "seq" in cfg:
        cfg["seq"] = ag.IntVar("seq", 1, 16)
    module, inputs, outputs = models.build(name, **cfg)
    assert not inputs[next(iter(inputs))].shape[0].is_static
    for batch, seq in ((3, 5), (1, 16)):
        feeds = _feeds(name, inputs, batch=batch, seq=seq)
        got = ag.reference.run(outputs, feeds)
        want = _torch_outputs(name, module, cfg, feeds)
        for k in want:
            assert got[k].shape == want[k].shape
            np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL, err_msg=f"{name}:{k} {batch}x{seq}")


def test_resnet50_float16_parameters():
    inputs, outputs = models.get("resnet50", dtype="float16", batch=2, **SMALL["resnet50"])
    assert inputs["x"].dtype == ag.DType.float16
    consts = ag.Graph.from_outputs(outputs).constants
    assert consts and all(t.dtype == ag.DType.float16 for t in consts if t.dtype.is_float)
    # Same seed, same draws: the float16 model holds its float32 twin's weights, rounded.
    _, ref = models.get("resnet50", batch=2, **SMALL["resnet50"])
    x = _feeds("resnet50", inputs, batch=2)["x"]
    got = ag.reference.run(outputs, {"x": x.astype(np.float16)})["logits"]
    want = ag.reference.run(ref, {"x": x})["logits"]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0, atol=2e-3)


# -- full size through the oracle -----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_default_matches_torch(name):
    pytest.importorskip("torch")
    module, inputs, outputs = models.build(name)
    feeds = _feeds(name, inputs, batch=1, seq=128, vocab=1000)
    got = ag.reference.run(outputs, feeds)
    want = _torch_outputs(name, module, {}, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=f"{name}:{k}")
