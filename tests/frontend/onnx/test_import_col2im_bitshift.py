"""Col2Im (ops_col2im.py: a transposed conv with one-hot weights) and BitShift (ops_elementwise.py:
power-of-two integer arithmetic) against onnx's numpy reference and onnxruntime, in ONE CPU build.

Col2Im: 1-D, 2-D and 3-D blocks with strides (a remainder no window reaches), dilations, pads and
several channels, a dynamic batch. BitShift: int8 / int32 / int64 over their full range, counts
from -3 to width + 3 (out of range: 0, or -1 for a negative x shifted right), both directions,
broadcast counts. Tolerance: float32 rtol 1e-5 / atol 1e-5; integers exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox

TOL = dict(rtol=1e-5, atol=1e-5)
I64 = np.int64


def _col2im(name, x, image, block, attrs, **kw):
    return case(name, "Col2Im", [x, In("img", np.array(image, I64), True), In("blk", np.array(block, I64), True)],
                attrs, opset=18, **kw)


def _col2im_cases():
    return [
        # 2 channels, block 2x3, image 7x8, strides 2x2 (a remainder row), dilation 1x2, pads
        _col2im("c2i_2d", In("x", rand((2, 12, 12), seed=1), dims=["N", 12, 12]), [7, 8], [2, 3],
                {"strides": [2, 2], "dilations": [1, 2], "pads": [1, 0, 0, 1]}, dim_bounds={"N": (1, 3)},
                sizes=[{"x": rand((1, 12, 12), seed=2)}]),
        _col2im("c2i_1d", In("x", rand((1, 9, 5), seed=3)), [11], [3], {"strides": [2], "pads": [1, 0]}),
        # onnxruntime 1.32 gets 3-D blocks with dilations wrong (a brute-force loop agrees with onnx's
        # reference and with us): the reference decides, onnxruntime is not asked.
        _col2im("c2i_3d", In("x", rand((1, 16, 24), seed=4)), [4, 5, 6], [2, 2, 2],
                {"strides": [2, 1, 2], "dilations": [1, 2, 1], "pads": [0, 1, 1, 1, 0, 0]}, ort=False),
    ]


def _shift_cases():
    cs = []
    for dt in (np.int8, np.int32, np.int64):
        info = np.iinfo(dt)
        rng = np.random.default_rng(info.bits)
        x = rng.integers(info.min, info.max, (4, 11), dtype=dt, endpoint=True)
        x[0, :4] = [info.min, info.max, -1, 0]
        y = np.arange(-3, info.bits + 4)[:11].astype(dt) if info.bits == 8 else \
            rng.integers(-3, info.bits + 4, (4, 11)).astype(dt)
        ycol = np.array([[0], [1], [info.bits - 1], [info.bits]], dt)
        for d in ("LEFT", "RIGHT"):
            cs.append(case(f"shift_{d}_{info.bits}", "BitShift", [In("a", x), In("b", y)], {"direction": d}, opset=28))
            cs.append(case(f"shift_{d}_{info.bits}_bcast", "BitShift", [In("a", x), In("b", ycol)], {"direction": d},
                           opset=28))
    return cs


def test_col2im_and_bitshift_match_numpy_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_col2im_cases() + _shift_cases(), tmp_path / "rare", TOL)


@pytest.mark.parametrize("name,make,err,match", [
    ("c2i_blocks", lambda: _col2im("c", In("x", rand((1, 4, 5))), [4, 4], [2, 2], {}, infer=False),
     ImportError_, "blocks"),
    ("c2i_rows", lambda: _col2im("c", In("x", rand((1, 5, 9))), [4, 4], [2, 2], {}, infer=False),
     ImportError_, "multiple"),
    # run-time shapes import (test_import_runtime_sizes.py); 4 spatial dims stay refused there too
    ("c2i_runtime_shape", lambda: case("c", "Col2Im", [In("x", rand((1, 4, 9))), In("img", np.array([4, 4, 1, 1], I64)),
                                                       In("blk", np.array([2, 2, 1, 1], I64), True)], opset=18,
                                       infer=False),
     UnsupportedOpError, "1 to 3"),
    ("c2i_huge_block", lambda: _col2im("c", In("x", rand((1, 8192, 1))), [4096, 2], [4096, 2], {}, infer=False),
     UnsupportedOpError, "limit"),
    ("shift_direction", lambda: case("s", "BitShift", [In("a", np.ones(3, np.int32)), In("b", np.ones(3, np.int32))],
                                     {"direction": "UP"}, opset=28, infer=False), ImportError_, "direction"),
])
def test_typed_errors(name, make, err, match):
    c = make()
    op = c.model.graph.node[0].op_type
    with pytest.raises(err, match=match) as e:
        ox.load(c.model)
    assert f"({op}, opset " in str(e.value)
