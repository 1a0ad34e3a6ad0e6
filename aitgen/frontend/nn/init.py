"""Seeded parameter initialisation.

One global numpy Generator feeds every initialiser, so a model's values depend only on the seed
and on the order in which its layers are constructed (as with torch.manual_seed). Values are drawn
in float32 and then cast: a float16 or bfloat16 model built under the same seed holds the rounded
values of its float32 twin, which is what precision tests compare against.
"""
from __future__ import annotations

import math
from typing import Iterable, Union

import numpy as np

from ...ir.dtype import as_dtype

__all__ = ["manual_seed", "generator", "uniform", "normal", "zeros", "ones", "fan_in_uniform"]

# Seeded at import so that a script that never calls manual_seed is still reproducible.
_DEFAULT_SEED = 0
_rng = np.random.default_rng(_DEFAULT_SEED)

Shape = Union[int, Iterable[int]]


def manual_seed(seed: int) -> None:
    """Reset the generator behind every initialiser."""
    global _rng
    _rng = np.random.default_rng(int(seed))


def generator() -> np.random.Generator:
    return _rng


def _shape(shape: Shape) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def _cast(a: np.ndarray, dtype) -> np.ndarray:
    return a.astype(as_dtype(dtype).np, copy=False)


def uniform(shape: Shape, low: float, high: float, dtype="float32") -> np.ndarray:
    # float32 draws: half the time and memory of float64 for BERT-sized embeddings.
    a = _rng.random(_shape(shape), dtype=np.float32)
    a *= np.float32(high - low)
    a += np.float32(low)
    return _cast(a, dtype)


def normal(shape: Shape, mean: float = 0.0, std: float = 1.0, dtype="float32") -> np.ndarray:
    a = _rng.standard_normal(_shape(shape), dtype=np.float32)
    if std != 1.0:
        a *= np.float32(std)
    if mean != 0.0:
        a += np.float32(mean)
    return _cast(a, dtype)


def zeros(shape: Shape, dtype="float32") -> np.ndarray:
    return np.zeros(_shape(shape), as_dtype(dtype).np)


def ones(shape: Shape, dtype="float32") -> np.ndarray:
    return np.ones(_shape(shape), as_dtype(dtype).np)


def fan_in_uniform(shape: Shape, fan_in: int, dtype="float32") -> np.ndarray:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)): torch's default for Linear and Conv weights and biases
    (kaiming_uniform with a=sqrt(5) reduces to this bound)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return uniform(shape, -bound, bound, dtype)
