"""Calibration for int8 post-training quantisation: activation statistics from the oracle.

The float32 graph runs through the reference interpreter (aitgen.reference) on every feed, and the
tensors that int8 GEMMs/convs will read are recorded. Three methods choose a threshold T (the
largest |x| that is represented; larger values saturate):

- "minmax": T = max(|min|, |max|) over all feeds (running min/max).
- "percentile": a 2048-bin histogram of |x| over [0, max|x|], T = the edge where its cumulative
  share reaches `percentile` (99.999, onnxruntime's HistogramCalibrater default), as ORT's
  compute_percentile computes it.
- "entropy": TensorRT's (and ORT's) KL-divergence selection over the same histogram: for every
  candidate i in [128, 2048] bins, the clipped distribution P (outliers folded into bin i-1) against
  the 128-level quantisation Q of the first i bins (MXNet's _get_optimal_threshold); T = the
  upper edge of the i with the least KL(P || Q).

Histograms need max|x| first, so those methods run the feeds twice (the range is then exact, and no
re-binning approximates it).

Scales (oneDNN's fast x86 form is u8 activations x s8 weights, VNNI's vpdpbusd; s8 activations it
runs by shifting them +128 internally with a weight compensation, a little slower):
- a tensor whose calibrated minimum is >= 0 (after ReLU) is uint8, scale T / 255, zero point 0:
  the full 8 bits for a one-signed range, and no zero-point term in the kernel;
- otherwise int8 symmetric, scale T / 127.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
import numpy as np

from ..errors import CalibrationError, RuntimeInputError
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.tensor import Tensor

METHODS = ("minmax", "percentile", "entropy")
NUM_BINS = 2048
NUM_QUANT_BINS = 128
PERCENTILE = 99.999


@dataclasses.dataclass(frozen=True)
class ActScale:
    """How one activation tensor is quantised: q = clip(rint(x / scale)) in act's range."""
    scale: float
    act: DType           # DType.int8 (symmetric) or DType.uint8 (x >= 0, zero point 0)
    threshold: float     # the calibrated |x| bound, T


def check_feeds(calibration, inputs: list[Tensor]) -> list[dict[str, np.ndarray]]:
    """The feeds as a list of dicts name -> array, or a CalibrationError naming the fault."""
    if calibration is None:
        raise CalibrationError('precision="int8" needs calibration=FEEDS (an iterable of input dicts name -> '
                               'array): the activation scales are calibrated on them (no dynamic quantisation)')
    if isinstance(calibration, (Mapping, str, bytes)) or not isinstance(calibration, Iterable):
        raise CalibrationError(f"calibration must be an iterable of input dicts, got a {type(calibration).__name__}")
    feeds = list(calibration)
    if not feeds:
        raise CalibrationError("calibration is empty: give at least one input dict")
    from ..reference import bind_dims   # the oracle: a leaf the passes may call
    out = []
    for i, f in enumerate(feeds):
        if not isinstance(f, Mapping):
            raise CalibrationError(f"calibration feed {i} is a {type(f).__name__}, not a dict name -> array")
        try:   # the oracle's own input checks (dtype, rank, static dims, IntVar bounds and agreement)
            bind_dims(inputs, f)
        except RuntimeInputError as e:
            raise CalibrationError(f"calibration feed {i}: {e}") from None
        out.append({k: np.asarray(v) for k, v in f.items()})
    return out


def observe(graph: Graph, tensors: list[Tensor], feeds: list[dict], method: str) -> dict[int, ActScale]:
    """id(tensor) -> its ActScale, calibrated with `method` on `feeds` (already check_feeds'ed)."""
    from ..reference import evaluate   # the oracle: a leaf the passes may call
    if method not in METHODS:
        raise CalibrationError(f"calibration_method {method!r}: expected one of {list(METHODS)}")
    lo = {id(t): np.inf for t in tensors}
    hi = {id(t): -np.inf for t in tensors}
    for f in feeds:
        vals = evaluate(graph, f, keep=tensors)
        for t in tensors:
            v = vals[id(t)]
            if v.size:
                lo[id(t)] = min(lo[id(t)], float(v.min()))
                hi[id(t)] = max(hi[id(t)], float(v.max()))
    amax = {k: max(abs(lo[k]), abs(hi[k])) if np.isfinite(lo[k]) else 0.0 for k in lo}
    thresholds = dict(amax)
    if method != "minmax":
        hists = {id(t): np.zeros(NUM_BINS, np.int64) for t in tensors}
        for f in feeds:
            vals = evaluate(graph, f, keep=tensors)
            for t in tensors:
                if amax[id(t)] > 0:
                    hists[id(t)] += np.histogram(np.abs(vals[id(t)]), NUM_BINS, (0.0, amax[id(t)]))[0]
        for k, h in hists.items():
            if amax[k] > 0:
                edges = np.linspace(0.0, amax[k], NUM_BINS + 1)
                thresholds[k] = (percentile_threshold(h, edges) if method == "percentile"
                                 else entropy_threshold(h, edges))
    return {k: act_scale(thresholds[k], lo[k]) for k in lo}


def act_scale(threshold: float, minimum: float) -> ActScale:
    act = DType.uint8 if minimum >= 0 else DType.int8
    t = float(threshold) if threshold > 0 and np.isfinite(threshold) else 1.0  # all zeros: any scale
    return ActScale(float(np.float32(t / (255.0 if act is DType.uint8 else 127.0))), act, t)


def percentile_threshold(hist: np.ndarray, edges: np.ndarray, percentile: float = PERCENTILE) -> float:
    """ORT's compute_percentile for a histogram of |x|: the edge where the CDF reaches percentile."""
    cdf = np.cumsum(hist / hist.sum())
    idx = int(np.searchsorted(cdf, percentile / 100.0))
    return float(edges[min(idx, len(edges) - 1)])


def entropy_threshold(hist: np.ndarray, edges: np.ndarray, num_quant: int = NUM_QUANT_BINS) -> float:
    """TensorRT's KL-divergence threshold over a histogram of |x| (see the module's head)."""
    hist = hist.astype(np.float64)
    n = len(hist)
    if n <= num_quant:
        return float(edges[-1])
    best_i, best_kl = n, np.inf
    for i in range(num_quant, n + 1):
        p = hist[:i].copy()
        p[i - 1] += hist[i:].sum()          # outliers saturate into the last kept bin
        nonzero = p != 0
        # Q: the kept bins merged into num_quant levels, each level's mass spread over its
        # non-empty bins (empty bins stay empty in Q, as in P)
        bounds = np.linspace(0, i, num_quant + 1).astype(np.int64)  # strictly increasing: i >= num_quant
        sums = np.add.reduceat(hist[:i], bounds[:-1])
        cnts = np.add.reduceat(nonzero.astype(np.int64), bounds[:-1])
        level = np.where(cnts > 0, sums / np.maximum(cnts, 1), 0.0)
        q = np.repeat(level, np.diff(bounds)) * nonzero
        kl = _kl(p, q)
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(edges[best_i])


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    ps, qs = p.sum(), q.sum()
    if ps == 0 or qs == 0:
        return np.inf
    p, q = p / ps, q / qs
    m = p > 0
    if np.any(q[m] == 0):
        return np.inf
    return float(np.sum(p[m] * np.log(p[m] / q[m])))


__all__ = ["METHODS", "ActScale", "check_feeds", "observe", "act_scale", "percentile_threshold",
           "entropy_threshold"]
