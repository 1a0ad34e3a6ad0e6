"""The small model the attack suite fuzzes: two inputs sharing a dynamic batch, two outputs, named
constants that set_constants can replace, and the oracle for any set of constant values."""
from __future__ import annotations

import numpy as np

import aitgen as ag
from aitgen import ops
from aitgen.ir.tensor import constant

BATCH_MAX = 8
CONSTANT_NAMES = ("w1", "b1", "w2")


def weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((8, 16)).astype(np.float32),
            "b1": rng.standard_normal(8).astype(np.float32),
            "w2": rng.standard_normal((4, 8)).astype(np.float32)}


def build(seed: int = 0):
    """(outputs dict, constant tensors by name); the graph is y = relu(x w1^T + b1) + m,
    z = softmax(y w2^T)."""
    b = ag.IntVar("batch", 1, BATCH_MAX)
    x = ag.Tensor([b, 16], "float32", name="x")
    m = ag.Tensor([b, 8], "float32", name="m")
    c = {k: constant(v, name=k) for k, v in weights(seed).items()}
    y = ops.relu(ops.linear(x, c["w1"], c["b1"])) + m
    z = ops.softmax(ops.linear(y, c["w2"]), -1)
    return {"y": y, "z": z}, c


_ORACLE: dict = {}


def oracle(feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """aitgen.reference on the model's graph holding these constant values."""
    if not _ORACLE:
        _ORACLE["outs"], _ORACLE["consts"] = build(0)
    for k, v in consts.items():
        _ORACLE["consts"][k].value = v
    with np.errstate(all="ignore"):
        return ag.reference.run(_ORACLE["outs"], {k: np.asarray(v) for k, v in feeds.items()})


def feeds(rng: np.random.Generator, batch: int) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((batch, 16)).astype(np.float32),
            "m": rng.standard_normal((batch, 8)).astype(np.float32)}


def close(got: dict, want: dict, tol: float = 1e-4) -> bool:
    return set(got) == set(want) and all(
        np.asarray(got[k]).shape == want[k].shape
        and np.allclose(np.asarray(got[k], np.float64), want[k], rtol=tol, atol=tol, equal_nan=True)
        for k in want)
