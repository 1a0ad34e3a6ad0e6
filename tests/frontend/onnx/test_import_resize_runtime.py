"""Resize / Upsample with scales, sizes or roi fed as run-time data (ops_resize_runtime.py):
against onnx's numpy reference and onnxruntime, in ONE CPU build, each case also run with a
second set of scales or sizes so that one build serves output shapes it was not built for; the
run-time path against the static one (constant scales) on the same input; and the refusals.

Tolerance: rtol 1e-4 / atol 1e-5 for float32 (the taps are computed in float64 and rounded to
float32 as the static path does, so the build agrees with the reference to ~1e-7; the margin is
for the summation order of antialias weights); float16 rtol 1e-2 / atol 1e-2 (one rounding per tap).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

import aitgen as ag
from aitgen.errors import RuntimeInputError
from aitgen.frontend import onnx as ox
from aitgen.ir.graph import topo_order
from aitgen.ir.op import OpKind

F32 = np.float32
TOL = dict(rtol=1e-4, atol=1e-5)


def _scales(*v):
    return np.array(v, F32)


def _sizes(*v):
    return np.array(v, np.int64)


def _cases():
    # Scales keep scale * n integral where the coordinate mapping reads that width
    # (align_corners, half_pixel_symmetric): onnxruntime uses the integer output length there and
    # onnx's reference the real-valued one, so they disagree otherwise (we follow onnx).
    x = rand((1, 2, 4, 5), seed=1)
    cs = [
        case("linear_half_pixel", "Resize", [In("x", x), None, In("s", _scales(1, 1, 1.5, 0.8))],
             {"mode": "linear"}, opset=19, sizes=[{"s": _scales(1, 1, 2.0, 3.0)}]),
        case("cubic_align_corners", "Resize", [In("x", x), None, In("s", _scales(1, 1, 0.75, 1.6))],
             {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, opset=19,
             sizes=[{"s": _scales(1, 1, 2.5, 0.4)}]),
        case("cubic_exclude_outside", "Resize", [In("x", x), None, In("s", _scales(1, 1, 1.25, 0.6))],
             {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, opset=19),
        case("nearest_sizes_axes", "Resize", [In("x", x), None, None, In("z", _sizes(7, 3))],
             {"mode": "nearest", "axes": [3, 2], "nearest_mode": "ceil",
              "coordinate_transformation_mode": "asymmetric"}, opset=19, sizes=[{"z": _sizes(2, 9)}]),
        case("nearest_not_larger", "Resize", [In("x", x), None, None, In("z", _sizes(6, 6))],
             {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}, opset=19),
        case("linear_symmetric", "Resize", [In("x", x), None, In("s", _scales(1, 1, 0.5, 1.6))],
             {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, opset=19),
        case("pytorch_half_pixel_to_one", "Resize", [In("x", x), None, None, In("z", _sizes(1, 2, 1, 3))],
             {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, opset=19),
        case("crop_and_resize", "Resize", [In("x", x), In("r", np.array([0.2, 0.1, 0.9, 1.2], F32)), None,
                                           In("z", _sizes(3, 4))],
             {"mode": "linear", "axes": [2, 3], "coordinate_transformation_mode": "tf_crop_and_resize",
              "extrapolation_value": 7.0}, opset=19, sizes=[{"r": np.array([0.0, 0.0, 1.0, 0.5], F32)}]),
        case("linear_antialias_down", "Resize", [In("x", x), None, In("s", _scales(1, 1, 0.6, 0.4))],
             {"mode": "linear", "antialias": 1}, opset=19, sizes=[{"s": _scales(1, 1, 0.3, 1.0)}]),
        case("cubic_antialias_down", "Resize", [In("x", x), None, None, In("z", _sizes(1, 2, 3, 2))],
             {"mode": "cubic", "antialias": 1}, opset=19),
        case("upsample9_nearest", "Upsample", [In("x", x), In("s", _scales(1, 1, 2, 3))], {"mode": "nearest"},
             opset=9, sizes=[{"s": _scales(1, 2, 1, 3)}]),
        # integers are resized by nearest only, exactly
        case("nearest_int", "Resize", [In("x", np.arange(20, dtype=np.int64).reshape(1, 1, 4, 5)), None,
                                       In("s", _scales(1, 1, 0.5, 1.7))], {"mode": "nearest"}, opset=19,
             ort=False),  # onnxruntime has no int64 Resize kernel
    ]
    return cs


def test_runtime_resize_matches_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_cases(), tmp_path / "resize", TOL)


def test_runtime_resize_float16(tmp_path):
    x = rand((1, 3, 4, 4), seed=2).astype(np.float16)
    cs = [case("f16_linear", "Resize", [In("x", x), None, In("s", _scales(1, 1, 1.5, 0.75))], {"mode": "linear"},
               opset=19, ort=False)]
    check_cases_ref(cs, tmp_path / "f16", dict(rtol=1e-2, atol=1e-2))


def test_runtime_resize_equals_static_and_refuses_bad_scales(tmp_path):
    x = rand((2, 3, 6, 5), seed=3)
    attrs = {"mode": "cubic", "antialias": 1}
    rt = case("rt", "Resize", [In("x", x), None, In("s", _scales(1, 1, 0.5, 0.7))], attrs, opset=19)
    st = case("st", "Resize", [In("x", x), None, In("s", _scales(1, 1, 0.5, 0.7), const=True)], attrs, opset=19)
    _, outs = ox.load(rt.model)
    # the scales stay a graph input: the output lengths are bound by the run, not at import
    assert OpKind.BIND_DIMS in {op.kind for op in topo_order(outs.values())[0]}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "rt")
    ms = ag.compile_model(ox.load(st.model)[1], target="cpu", workdir=tmp_path / "st")
    want = ms.run({"x": x})["y"]
    got = m.run(rt.feeds)["y"]
    assert got.shape == want.shape == (2, 3, 3, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # a scale below what the antialiased taps cover, and one that asks for more than the bounds
    for bad, msg in ((_scales(1, 1, 0.2, 1), "Resize_0"), (_scales(1, 1, 1000, 1), "outside its bounds")):
        with pytest.raises(RuntimeInputError, match=msg):
            m.run({"x": x, "s": bad})
    # a refused run leaves the model usable: the next run is exact
    np.testing.assert_allclose(m.run(rt.feeds)["y"], want, rtol=1e-5, atol=1e-6)
    m.close()
    ms.close()
