"""transformers models exported with dynamic batch and sequence (torch.onnx.export(dynamo=True,
dynamic_shapes=...)), as a user exports one model for every input length: aitgen imports each once
(dim_bounds) and runs it at several sizes against torch eager on the same weights.

What these exports write that static ones do not: Slice ends from Shape(input) (position_ids[:, :seq]),
GatherElements over the run-time sequence (BERT's token types), GatherND over [batch, seq] (the
vmapped mask function's attention_mask[b, s]). Tolerance: max abs difference within 1e-4 of the
output's magnitude (float32, 2-layer models of width 32-64; both sides sum in float32).
"""
from __future__ import annotations

import numpy as np
import pytest

for mod in ("torch", "transformers", "onnxscript", "onnx"):
    pytest.importorskip(mod, reason=f"needs {mod}: pip install -e '.[torch,bench]'")

import torch  # noqa: E402
import transformers as tf  # noqa: E402

import aitgen as ag  # noqa: E402
from aitgen.frontend import onnx as ox  # noqa: E402

TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=100,
            max_position_embeddings=64)


def _model(name: str):
    torch.manual_seed(0)
    if name == "bert":
        return tf.BertModel(tf.BertConfig(**TINY)).eval(), "last_hidden_state"
    return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=1, use_cache=False, **TINY)).eval(), "logits"


def _feeds(b: int, s: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((b, s), np.int64)
    mask[0, s - max(1, s // 4):] = 0  # padding at the end of the first sequence
    return {"input_ids": rng.integers(0, 100, (b, s)).astype(np.int64), "attention_mask": mask}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "llama"])
def test_one_dynamic_export_runs_at_every_size(tmp_path, name):
    model, out = _model(name)
    f = _feeds(2, 8, 0)
    batch, seq = torch.export.Dim("batch", max=4), torch.export.Dim("seq", max=48)
    path = tmp_path / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (), str(path), kwargs={k: torch.from_numpy(v) for k, v in f.items()},
                          input_names=list(f), output_names=[out], dynamo=True, verbose=False,
                          dynamic_shapes={k: {0: batch, 1: seq} for k in f})
    inputs, outputs = ox.load(str(path), dim_bounds={"batch": (1, 4), "seq": (1, 48)})
    assert {str(d) for t in inputs.values() for d in t.shape} == {"batch", "seq"}
    m = ag.compile_model({out: outputs[out]}, target="cpu", workdir=tmp_path / "w")
    for b, s in [(1, 5), (2, 8), (3, 33), (4, 48)]:
        f = _feeds(b, s, b * 100 + s)
        with torch.no_grad():
            want = model(**{k: torch.from_numpy(v) for k, v in f.items()})[out].numpy()
        got = m.run({k: f[k] for k in inputs})[out]
        assert got.shape == want.shape
        scale = float(np.abs(want).max())
        assert scale > 1e-2 and float(np.abs(got - want).max()) <= 1e-4 * scale, (b, s)
    m.close()
