"""GridSample, AffineGrid and DeformConv (ops_sample.py / ops_deform.py: index arithmetic + gathers,
a batched matmul, GEMMs) against onnx's numpy reference and onnxruntime, in ONE CPU build.

Every mode x padding x align_corners on 4-D inputs, linear and nearest on 5-D (cubic is 4-D only
in ONNX), the opset-16 mode names, a dynamic batch, grids reaching well outside [-1, 1] (so the
reflection and border paths run), float16. DeformConv: groups and offset groups, strides,
dilations, pads, a mask and a bias, constant weights, a dynamic batch, offsets reaching outside X. Tolerance: float32 rtol 1e-4 / atol 1e-5 (the
coordinate arithmetic rounds differently from onnx's reference in the last bits, which moves
interpolation weights by ~1e-6); float16 rtol/atol 1e-2.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox

TOL = dict(rtol=1e-4, atol=1e-5)


def _grid_cases():
    cs = []
    x4, x5 = rand((2, 3, 4, 5), seed=1), rand((2, 2, 3, 4, 5), seed=2)
    g4, g5 = rand((2, 3, 4, 2), -1.7, 1.7, seed=3), rand((2, 2, 3, 2, 3), -1.7, 1.7, seed=4)
    for mode, pad, align in itertools.product(("linear", "nearest", "cubic"), ("zeros", "border", "reflection"), (0, 1)):
        attrs = {"mode": mode, "padding_mode": pad, "align_corners": align}
        # onnxruntime (1.2x) leaves a cubic coordinate outside the border unclamped (torch's way) where
        # onnx's reference clamps it: the spec's reference decides, onnxruntime is not asked there.
        cs.append(case(f"gs_{mode}_{pad}_{align}", "GridSample", [In("x", x4), In("grid", g4)], attrs, opset=20,
                       ort=(mode, pad) != ("cubic", "border")))
        if mode != "cubic" and pad != "border":
            cs.append(case(f"gs5_{mode}_{pad}_{align}", "GridSample", [In("x", x5), In("grid", g5)], attrs, opset=20))
    # onnx.reference knows only the opset-20 mode names: onnxruntime is the reference here
    cs.append(case("gs16_bicubic_dyn", "GridSample", [In("x", x4, dims=["N", 3, 4, 5]), In("grid", g4, dims=["N", 3, 4, 2])],
                   {"mode": "bicubic", "padding_mode": "reflection"}, opset=16, dim_bounds={"N": (1, 3)}, ref=False,
                   sizes=[{"x": rand((1, 3, 4, 5), seed=5), "grid": rand((1, 3, 4, 2), -1.2, 1.2, seed=6)}]))
    return cs


def _affine_cases():
    t2, t3 = rand((2, 2, 3), -1, 1, seed=7), rand((2, 3, 4), -1, 1, seed=8)
    return [case(f"affine{len(size) - 2}d_{align}", "AffineGrid",
                 [In("theta", t2 if len(size) == 4 else t3), In("size", np.array(size, np.int64), True)],
                 {"align_corners": align}, opset=20)
            for size in ([2, 3, 5, 4], [2, 1, 3, 5, 4]) for align in (0, 1)]


def _deform_cases():
    x = rand((2, 4, 6, 7), seed=11)
    w = rand((6, 2, 2, 3), -1, 1, seed=12)  # group 2: 4 input channels, 2 per group
    attrs = {"group": 2, "offset_group": 2, "strides": [1, 2], "dilations": [2, 1], "pads": [1, 1, 0, 1]}
    oh, ow = (6 + 1 - 3) // 1 + 1, (7 + 2 - 3) // 2 + 1
    off = rand((2, 2 * 6 * 2, oh, ow), -2.5, 2.5, seed=13)
    mask, b = rand((2, 2 * 6, oh, ow), 0, 1, seed=14), rand((6,), seed=15)
    w1, off1 = rand((3, 4, 3, 3), -1, 1, seed=16), rand((2, 18, 4, 5), -1.5, 1.5, seed=17)
    return [
        case("deform_groups_mask", "DeformConv", [In("x", x), In("w", w), In("off", off), In("b", b), In("m", mask)],
             attrs, opset=19),
        case("deform_const_dyn", "DeformConv", [In("x", x, dims=["N", 4, 6, 7]), In("w", w1, True),
                                                In("off", off1, dims=["N", 18, 4, 5])],
             opset=19, dim_bounds={"N": (1, 3)}, sizes=[{"x": rand((1, 4, 6, 7), seed=18),
                                                          "off": rand((1, 18, 4, 5), -1.5, 1.5, seed=19)}]),
    ]


def test_grid_sample_and_affine_grid_match_numpy_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_grid_cases() + _affine_cases() + _deform_cases(), tmp_path / "sample", TOL)


def test_float16_grid_sample(tmp_path):
    c = case("gs_f16", "GridSample", [In("x", rand((1, 2, 4, 5), seed=9).astype(np.float16)),
                                      In("grid", rand((1, 3, 3, 2), -1.2, 1.2, seed=10).astype(np.float16))],
             {"mode": "linear"}, opset=20, ort=False)
    check_cases_ref([c], tmp_path / "f16", dict(rtol=1e-2, atol=1e-2))


@pytest.mark.parametrize("op,inputs,attrs,err,match", [
    ("GridSample", [In("x", rand((1, 1, 3, 3))), In("grid", rand((1, 2, 2, 2)))], {"mode": "area"}, ImportError_, "mode"),
    ("GridSample", [In("x", rand((1, 1, 3, 3, 3))), In("grid", rand((1, 2, 2, 2, 3)))], {"mode": "cubic"},
     ImportError_, "4-D X only"),
    ("GridSample", [In("x", rand((1, 1, 3, 3), ), dims=[1, 1, "H", 3]), In("grid", rand((1, 2, 2, 2)))], {},
     UnsupportedOpError, "must be static"),
    # a run-time size imports (test_import_runtime_sizes.py); theta must still fit its length
    ("AffineGrid", [In("theta", rand((1, 2, 3))), In("size", np.array([1, 1, 4, 4, 4], np.int64))], {},
     ImportError_, "theta must be"),
    ("AffineGrid", [In("theta", rand((1, 3, 4))), In("size", np.array([1, 1, 4, 4], np.int64), True)], {},
     ImportError_, "theta must be"),
    ("AffineGrid", [In("theta", rand((1, 2, 3))), In("size", np.array([1, 1, 1 << 20, 1 << 20], np.int64), True)], {},
     UnsupportedOpError, "limit"),
    ("DeformConv", [In("x", rand((1, 3, 4, 4))), In("w", rand((2, 3, 2, 2))), In("off", rand((1, 6, 3, 3)))], {},
     ImportError_, "offset must be"),
    ("DeformConv", [In("x", rand((1, 3, 4, 4))), In("w", rand((2, 3, 2, 2))), In("off", rand((1, 8, 3, 3)))],
     {"group": 2}, ImportError_, "groups"),
])
def test_typed_errors(op, inputs, attrs, err, match):
    with pytest.raises(err, match=match) as e:
        ox.load(case(op, op, inputs, attrs, opset=20, infer=False).model)
    assert f"({op}, opset 20)" in str(e.value)
