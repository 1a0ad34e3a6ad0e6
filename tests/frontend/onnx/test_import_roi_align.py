"""RoiAlign (the roi_align op, ops/roi_align.py) against onnx's numpy reference and onnxruntime in
ONE CPU build: avg and max, half_pixel and output_half_pixel (opset 16) and opset 10's default,
a fixed and an adaptive grid (sampling_ratio 0: the grid follows rois fed at run time, checked
with two sets of rois through one build), a spatial scale, rois reaching outside the image and a
degenerate one; and a batch index out of range, refused at run time naming the op.
Tolerance: rtol 1e-5 / atol 1e-5 (we sum in double, onnx and onnxruntime in float32).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

import aitgen as ag
from aitgen.errors import RuntimeInputError
from aitgen.frontend import onnx as ox

I64 = np.int64
X = rand((2, 3, 10, 10), 0.0, 1.0, seed=1)
ROIS = np.array([[0, 0, 9, 9], [0, 5, 4, 9], [5, 5, 9, 9], [-3, 2, 12, 14], [4, 4, 4, 4]], np.float32)
ROIS2 = np.array([[1, 1, 3, 7], [2, 0, 9, 2.5], [0, 0, 1, 1], [6, 6, 20, 20], [0, 0, 9, 9]], np.float32)
BI = np.array([0, 1, 0, 1, 1], I64)


def _roi(name, attrs, opset=16, other=False):
    ins = [In("x", X), In("r", ROIS), In("b", BI)]
    # Opset 10 has no half-pixel offset (the attribute came in 16); onnx's reference applies its
    # newest default (half_pixel) to opset-10 models too, onnxruntime does not: it decides there.
    return case(name, "RoiAlign", ins, attrs, opset=opset, sizes=[{"r": ROIS2, "b": BI[::-1].copy()}] if other else [],
                ref=opset >= 16)


def _cases():
    return [
        _roi("avg_half", {"output_height": 3, "output_width": 4, "sampling_ratio": 2}),
        _roi("max_out_half", {"output_height": 5, "output_width": 5, "sampling_ratio": 2, "mode": "max",
                              "coordinate_transformation_mode": "output_half_pixel"}),
        _roi("avg_adaptive", {"output_height": 2, "output_width": 3, "spatial_scale": 0.5}, other=True),
        _roi("opset10", {"output_height": 2, "output_width": 2, "sampling_ratio": 1}, opset=10),
    ]


def test_roi_align_matches_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_cases(), tmp_path / "roi", dict(rtol=1e-5, atol=1e-5))


def test_roi_align_bad_batch_index_is_refused(tmp_path):
    c = _cases()[0]
    _, outs = ox.load(c.model)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "bad")
    bad = {**c.feeds, "b": np.array([0, 1, 2, 0, 0], I64)}
    with pytest.raises(RuntimeInputError, match="batch index 2"):
        m.run(bad)
    with pytest.raises(RuntimeInputError, match="out of range"):
        ag.reference.run(outs, bad)
    np.testing.assert_allclose(m.run(c.feeds)["y"], ag.reference.run(outs, c.feeds)["y"], rtol=1e-5, atol=1e-5)
    m.close()
