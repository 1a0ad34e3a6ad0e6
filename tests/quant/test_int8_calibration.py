"""Calibration (aitgen/quant/calibrate.py) against independent numpy re-computations, and the typed
errors for bad calibration feeds. No builds: the oracle only."""
import numpy as np
import pytest

import aitgen as ag
from aitgen import nn, ops
from aitgen.errors import CalibrationError, TargetError
from aitgen.ir.dtype import DType
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.quant.calibrate import check_feeds, entropy_threshold, observe, percentile_threshold


def _mlp():
    nn.manual_seed(0)
    x = ag.Tensor([4, 16], dtype="float32", name="x")
    h = ops.relu(nn.Linear(16, 32)(x))
    y = nn.Linear(32, 8)(h)
    return x, h, y


def _feeds(n=3, seed=0, shape=(4, 16)):
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal(shape) * (i + 1)).astype(np.float32)} for i in range(n)]


def _graph():
    """The MLP as a Graph (a copy of the DAG) and its x and ReLU result tensors."""
    _, _, y = _mlp()
    g = Graph.from_outputs({"y": y})
    h = next(op.outputs[0] for op in g.ops if op.kind is OpKind.RELU)
    return g, g.inputs[0], h, y


def test_minmax_is_the_running_extremes():
    g, x, h, y = _graph()
    feeds = _feeds()
    s = observe(g, [x, h], feeds, "minmax")
    xs = np.concatenate([f["x"] for f in feeds])
    hs = np.maximum(xs @ g.ops[0].inputs[1].value.T + g.ops[0].inputs[2].value, 0)  # relu(linear(x))
    # x takes both signs: int8 symmetric, T/127; h is after a ReLU: uint8, T/255 (exactly, in float32)
    assert s[id(x)].act is DType.int8 and s[id(x)].scale == float(np.float32(np.abs(xs).max() / 127.0))
    assert s[id(h)].act is DType.uint8 and s[id(h)].scale == float(np.float32(hs.max() / 255.0))


def _percentile_loop(values, bins, pct):
    """ORT's compute_percentile written out: histogram of |x| over [0, max], first edge whose CDF >= pct."""
    a = np.abs(values)
    hist, edges = np.histogram(a, bins, (0, a.max()))
    total, acc = hist.sum(), 0
    for i, c in enumerate(hist):
        acc += c
        if acc / total >= pct / 100:
            return edges[i]
    return edges[-1]


def test_percentile_matches_a_literal_implementation_and_the_quantile():
    rng = np.random.default_rng(1)
    v = rng.standard_normal(200_000).astype(np.float32)
    v[:3] = [40.0, -35.0, 30.0]  # outliers the percentile must clip
    hist, edges = np.histogram(np.abs(v), 2048, (0, np.abs(v).max()))
    for pct in (99.0, 99.99, 99.999):
        t = percentile_threshold(hist, edges, pct)
        assert t == pytest.approx(_percentile_loop(v, 2048, pct), abs=1e-6)
        # within one bin of the exact quantile of |x|
        assert abs(t - np.quantile(np.abs(v), pct / 100)) <= 2 * (edges[1] - edges[0])
    assert percentile_threshold(hist, edges, 99.99) < 10.0  # the outliers are clipped


def _entropy_loop(hist, edges, num_quant):
    """MXNet's _get_optimal_threshold (|x| histogram form) with explicit loops."""
    hist = hist.astype(np.float64)
    best, best_i = np.inf, len(hist)
    for i in range(num_quant, len(hist) + 1):
        p = list(hist[:i])
        p[-1] += hist[i:].sum()
        merge = i / num_quant
        q = [0.0] * i
        for j in range(num_quant):
            a, b = int(j * merge), int((j + 1) * merge) if j < num_quant - 1 else i
            nz = [k for k in range(a, b) if p[k] != 0]
            for k in nz:
                q[k] = hist[a:b].sum() / len(nz)
        ps, qs = sum(p), sum(q)
        kl = 0.0
        for pk, qk in zip(p, q):
            if pk > 0:
                if qk == 0:
                    kl = np.inf
                    break
                kl += pk / ps * np.log((pk / ps) / (qk / qs))
        if kl < best:
            best, best_i = kl, i
    return edges[best_i]


def test_entropy_matches_a_literal_implementation():
    rng = np.random.default_rng(2)
    v = np.abs(np.concatenate([rng.standard_normal(50_000), rng.uniform(-20, 20, 50)]))
    hist, edges = np.histogram(v, 160, (0, v.max()))
    assert entropy_threshold(hist, edges, num_quant=32) == pytest.approx(_entropy_loop(hist, edges, 32), abs=1e-9)
    # the full-size default on a heavy tail: above the bulk, below the largest value
    v = np.abs(rng.laplace(size=200_000))
    hist, edges = np.histogram(v, 2048, (0, v.max()))
    t = entropy_threshold(hist, edges)
    assert np.quantile(v, 0.99) < t < v.max()


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_histogram_methods_clip_below_minmax(method):
    g, x, h, y = _graph()
    feeds = _feeds(2, shape=(4, 16))
    mm = observe(g, [x], feeds, "minmax")[id(x)]
    s = observe(g, [x], feeds, method)[id(x)]
    assert 0 < s.threshold <= mm.threshold and s.act is DType.int8


def test_bad_feeds_raise_typed_errors_naming_the_input():
    x, h, y = _mlp()
    inputs = [x]
    good = {"x": np.zeros((4, 16), np.float32)}
    cases = [
        (None, "calibration=FEEDS"),
        (good, "iterable of input dicts"),           # a dict, not an iterable of dicts
        ([], "empty"),
        ([good, 3], "feed 1 is a int"),
        ([{}], "missing input 'x'"),
        ([{"x": np.zeros((4, 15), np.float32)}], "feed 0: input 'x': dim 1 is 15"),
        ([{"x": np.zeros((4, 16), np.float64)}], "feed 0: input 'x': dtype float64"),
        ([{"x": np.zeros((4, 16), np.float32), "z": good["x"]}], "unknown input 'z'"),
    ]
    for feeds, msg in cases:
        with pytest.raises(CalibrationError, match=msg):
            check_feeds(feeds, inputs)
    assert len(check_feeds((f for f in [good, good]), inputs)) == 2   # any iterable, a generator too


def test_compile_model_checks_calibration_first(tmp_path):
    x, h, y = _mlp()
    with pytest.raises(CalibrationError, match="calibration=FEEDS"):
        ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, precision="int8")
    with pytest.raises(CalibrationError, match="missing input 'x'"):
        ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, precision="int8", calibration=[{}])
    with pytest.raises(CalibrationError, match="applies to precision=\"int8\""):
        ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, calibration=_feeds())
    with pytest.raises(CalibrationError, match="calibration_method"):
        ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, precision="int8", calibration=_feeds(),
                         calibration_method="kl")
    # the int8 kinds have CPU kernels only: another target is refused before anything is built
    with pytest.raises(TargetError, match='precision="int8" runs on the CPU backend only'):
        ag.compile_model({"y": y}, target="cuda", workdir=tmp_path, precision="int8", calibration=_feeds(),
                         load=False)
    assert not (tmp_path / "model.json").exists()


def test_weight_grids():
    from aitgen.passes.quantize_int8 import quantize_weight, weight_grid
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    w[3] = 0.0                                            # an all-zero channel: scale 1, zeros
    for act, reduced in [(DType.int8, False), (DType.uint8, True), (DType.int8, True)]:
        qmax, step = weight_grid(act, reduced)
        q, s = quantize_weight(w, 0, qmax, step)
        assert q.dtype == np.int8 and np.abs(q).max() == qmax - (qmax % step)
        assert np.all(q % step == 0) and s[3] == 1.0 and not q[3].any()
        # per channel: max|w[n]| maps to the grid's largest value, the rest rounds to the nearest step
        np.testing.assert_allclose(s, np.where(np.abs(w).max(1) > 0, np.abs(w).max(1) / qmax, 1), rtol=1e-6)
        assert np.abs(q * s[:, None] - w).max() <= step * s.max() / 2 * (1 + 1e-5)
    assert weight_grid(DType.int8, False) == (127, 1)
    assert weight_grid(DType.uint8, True) == (63, 1) and weight_grid(DType.int8, True) == (62, 2)
