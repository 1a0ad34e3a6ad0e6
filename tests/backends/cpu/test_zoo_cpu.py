"""The whole model zoo (small configurations) compiled for the CPU equals the oracle, and none of
its GEMMs or convs runs oneDNN's reference kernel."""
import numpy as np
import pytest

import aitgen as ag
from aitgen import models
from cpu_cases import assert_no_reference_kernels

SMALL = {
    "resnet50": dict(layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10),
    "mobilenet_v2": dict(width=0.25, image_size=32, num_classes=10),
    "bert_base": dict(layers=2, hidden=32, heads=2, intermediate=64, vocab=100, seq=8),
    "vit_b16": dict(image_size=32, patch=8, layers=2, hidden=32, heads=2, mlp=64, num_classes=10),
    "gpt2": dict(layers=2, hidden=32, heads=2, vocab=100, seq=8),
}


def feeds_for(inputs, rng, sizes=None):
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d.value if d.is_static else (sizes or {}).get(d.name, d.upper) for d in t.shape)
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(t.dtype.np)
        elif name == "attention_mask":
            m = np.ones(shape, t.dtype.np)
            m[..., -2:] = 0  # padding at the end of each row exercises the additive mask
            feeds[name] = m
        elif name == "token_type_ids":
            feeds[name] = rng.integers(0, 2, shape).astype(t.dtype.np)
        else:
            feeds[name] = rng.integers(0, 100, shape).astype(t.dtype.np)
    return feeds


def close(got, want):
    # float32; oneDNN and our reductions sum in another order than numpy: relative to the magnitude
    scale = max(float(np.max(np.abs(want))), 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_zoo_small_equals_oracle(tmp_path, name, fusion):
    # Fused and unfused builds each equal the oracle of the graph as written, so they agree.
    inputs, outputs = models.get(name, **SMALL[name])
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / name, fusion=fusion)
    feeds = feeds_for(inputs, np.random.default_rng(0))
    got, want = model.run(feeds), ag.reference.run(outputs, feeds)
    assert set(got) == set(want)
    for k in want:
        close(got[k], want[k])
    assert_no_reference_kernels(tmp_path / name, model)


@pytest.mark.parametrize("name", ["bert_base", "gpt2"])
def test_zoo_dynamic_batch_and_seq(tmp_path, name):
    batch, seq = ag.IntVar("batch", 1, 4), ag.IntVar("seq", 1, 16)
    inputs, outputs = models.get(name, **{**SMALL[name], "batch": batch, "seq": seq})
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / name)
    rng = np.random.default_rng(1)
    for sizes in ({"batch": 3, "seq": 5}, {"batch": 1, "seq": 16}):  # one build, two shapes
        feeds = feeds_for(inputs, rng, sizes)
        got, want = model.run(feeds), ag.reference.run(outputs, feeds)
        for k in want:
            assert got[k].shape == want[k].shape
            close(got[k], want[k])
    assert_no_reference_kernels(tmp_path / name, model)  # the shapes run after the build's check too
