"""The model zoo at the small configurations the pass tests run (cached: building is deterministic)."""
from __future__ import annotations

import functools

import aitgen
from aitgen.ir import Graph, IntVar

ZOO_CONFIGS: dict[str, dict] = {
    "resnet50": dict(layers=(1, 1, 1, 1), width=8, image_size=32),
    "bert_base": dict(layers=2, hidden=32, heads=2, intermediate=64, vocab=100, seq=8),
    "vit_b16": dict(image_size=32, patch=8, layers=2, hidden=32, heads=2, mlp=64),
    "gpt2": dict(layers=2, hidden=32, heads=2, vocab=100, seq=8),
    "mobilenet_v2": dict(width=0.25, image_size=32),
}
# Symbolic dims keep some ops out of constant folding and make shape equality symbolic: worth a run.
DYNAMIC = {
    "resnet50@batch": ("resnet50", lambda: dict(ZOO_CONFIGS["resnet50"], batch=IntVar("batch", 1, 4))),
    "gpt2@batch,seq": ("gpt2", lambda: dict(ZOO_CONFIGS["gpt2"], batch=IntVar("batch", 1, 4),
                                            seq=IntVar("seq", 1, 8))),
}
ZOO = list(ZOO_CONFIGS) + list(DYNAMIC)


@functools.lru_cache(maxsize=None)
def _build(key: str) -> Graph:
    if key in DYNAMIC:
        name, config = DYNAMIC[key][0], DYNAMIC[key][1]()
    else:
        name, config = key, ZOO_CONFIGS[key]
    inputs, outputs = aitgen.models.get(name, **config)
    return Graph.from_outputs(outputs, inputs=list(inputs.values()))


def zoo_graph(name: str) -> Graph:
    """A fresh copy of the model's graph (callers may rewrite it; constant arrays stay shared,
    which is what lets check_pass catch a pass that writes into one)."""
    return _build(name).copy()
