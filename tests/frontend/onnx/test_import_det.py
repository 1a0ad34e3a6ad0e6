"""Det (the det op, ops/linalg.py): batched determinants against onnx's numpy reference (and
onnxruntime for float32, its only Det type) in ONE CPU build: n = 1, 2, 3 and 6, leading batch dims, a singular matrix (0), a
matrix that needs row swaps (a zero leading pivot), float64 and float16.
Tolerance: rtol 1e-4 / atol 1e-4 (float32 LU in onnxruntime vs ours in float64); float16 against
numpy's float64 det rounded once, rtol 2e-3 / atol 2e-3 (entries scaled by 0.4 keep |det| small).
"""
from __future__ import annotations

import numpy as np
from onnx_cases import In, case, check_cases_ref, rand, used_inputs

import aitgen as ag
from aitgen.frontend import onnx as ox


def _cases(dt, scale=1.0):
    swap = np.array([[0.0, 2.0, 1.0], [3.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    tag = np.dtype(dt).name
    ort = dt == np.float32  # onnxruntime 1.32 has Det for float32 only
    return [
        case(f"det1_{tag}", "Det", [In("x", (scale * rand((4, 1, 1), seed=1)).astype(dt))], opset=22, ort=ort),
        case(f"det2_{tag}", "Det", [In("x", np.stack([singular, scale * rand((2, 2), seed=2)]).astype(dt))], opset=22, ort=ort),
        case(f"det3_{tag}", "Det", [In("x", np.stack([swap, scale * rand((3, 3), seed=3)]).astype(dt))], opset=22, ort=ort),
        case(f"det6_{tag}", "Det", [In("x", (scale * rand((2, 3, 6, 6), seed=4)).astype(dt))], opset=22, ort=ort),
    ]


def test_det_matches_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_cases(np.float32) + _cases(np.float64), tmp_path / "det", dict(rtol=1e-4, atol=1e-4))


def test_det_float16(tmp_path):
    # Neither onnx.reference (np.linalg.det) nor onnxruntime takes float16: numpy in float64,
    # rounded once to float16, is the reference.
    merged, feeds, wants = {}, {}, {}
    for c in _cases(np.float16, 0.4):
        _, outs = ox.load(c.model)
        x = c.feeds["x"]
        want = np.linalg.det(x.astype(np.float64)).astype(np.float16)
        np.testing.assert_allclose(ag.reference.run(outs, {"x": x})["y"].astype(np.float64), want, rtol=2e-3, atol=2e-3)
        used_inputs(outs)["x"].name = c.name
        merged[c.name + "_y"], feeds[c.name], wants[c.name + "_y"] = outs["y"], x, want
    m = ag.compile_model(merged, target="cpu", workdir=tmp_path / "det16")
    for k, v in m.run(feeds).items():
        assert v.dtype == np.float16
        np.testing.assert_allclose(v.astype(np.float64), wants[k], rtol=2e-3, atol=2e-3, err_msg=k)
    m.close()
