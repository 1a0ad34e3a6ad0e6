"""3-D Conv / ConvTranspose / MaxPool / AveragePool / LpPool (ops_nn3d.py: 2-D IR ops over depth
slices) against onnx's numpy reference and onnxruntime, in ONE CPU build.

What the node-test conformance cases do not cover is here: groups (the per-tap sum instead of the
one concatenated conv), constant weights, a dynamic batch, strides and dilations in depth,
ConvTranspose's output_padding and output_shape in depth, pads beyond half a pooling window, ceil
mode. Tolerance: float32 rtol 1e-5 / atol 1e-5 (sums over up to 54 taps in another order).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox

TOL = dict(rtol=1e-5, atol=1e-5)
X5 = rand((2, 4, 5, 6, 7), seed=1)


def _cases():
    w = rand((3, 4, 2, 3, 2), -1, 1, seed=2)
    wg = rand((6, 2, 3, 2, 2), -1, 1, seed=3)
    wt = rand((4, 3, 3, 2, 2), -1, 1, seed=4)
    b3, b6 = rand((3,), seed=5), rand((6,), seed=6)
    return [
        case("conv3d_const_dyn", "Conv", [In("x", X5, dims=["N", 4, 5, 6, 7]), In("w", w, True), In("b", b3, True)],
             {"pads": [1, 0, 1, 0, 1, 1], "strides": [2, 1, 2], "dilations": [2, 1, 1]},
             dim_bounds={"N": (1, 3)}, sizes=[{"x": rand((3, 4, 5, 6, 7), seed=7)}]),
        case("conv3d_groups", "Conv", [In("x", X5), In("w", wg), In("b", b6)], {"group": 2, "auto_pad": "SAME_UPPER"}),
        case("convT3d_stride", "ConvTranspose", [In("x", X5), In("w", wt, True), In("b", b3, True)],
             {"strides": [2, 1, 2], "pads": [1, 0, 0, 2, 1, 0], "output_padding": [1, 0, 1], "dilations": [1, 2, 1]}),
        case("convT3d_groups_shape", "ConvTranspose", [In("x", X5), In("w", rand((4, 1, 2, 2, 3), seed=8))],
             {"group": 2, "strides": [3, 2, 1], "output_shape": [15, 12, 9]}, ref=False),  # onnx.reference: no groups
        case("maxpool3d_ceil", "MaxPool", [In("x", X5)],
             {"kernel_shape": [3, 2, 3], "strides": [2, 2, 2], "pads": [1, 0, 1, 1, 1, 0], "ceil_mode": 1}),
        case("maxpool3d_big_pad_dil", "MaxPool", [In("x", X5)],
             {"kernel_shape": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1], "dilations": [2, 1, 2]}),
        case("avgpool3d_excl", "AveragePool", [In("x", X5)],
             {"kernel_shape": [3, 3, 2], "strides": [2, 2, 1], "pads": [2, 1, 0, 2, 1, 1]}),
        case("avgpool3d_incl_ceil", "AveragePool", [In("x", X5)],
             {"kernel_shape": [2, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 0, 0, 1], "ceil_mode": 1,
              "count_include_pad": 1}),
        case("lppool3d", "LpPool", [In("x", X5)], {"kernel_shape": [2, 2, 2], "p": 3, "strides": [1, 2, 2]}),
    ]


def test_3d_windows_match_numpy_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_cases(), tmp_path / "nn3d", TOL)


def test_one_group_conv3d_is_one_conv2d():
    from aitgen.ir.graph import topo_order
    from aitgen.ir.op import OpKind
    c = _cases()[0]
    _, outs = ox.load(c.model, dim_bounds=c.dim_bounds)
    convs = [op for op in topo_order(outs.values())[0] if op.kind is OpKind.CONV2D]
    assert len(convs) == 1 and convs[0].inputs[1].shape[-1].value == 2 * 4  # KD * C input channels


@pytest.mark.parametrize("op,attrs,err,match", [
    ("Conv", {"pads": [0, 0, 0, 0, 0, 0], "kernel_shape": [9, 2, 2]}, ImportError_, "kernel_shape"),
    ("MaxPool", {"kernel_shape": [9, 2, 2]}, ImportError_, "larger than the padded"),
])
def test_typed_errors(op, attrs, err, match):
    ins = [In("x", X5)] + ([In("w", rand((3, 4, 2, 2, 2)), True)] if op == "Conv" else [])
    with pytest.raises(err, match=match) as e:
        ox.load(case(op, op, ins, attrs, opset=13).model)
    assert f"({op}, opset 13)" in str(e.value)


def test_dynamic_depth_is_refused():
    c = case("c", "Conv", [In("x", X5, dims=[2, 4, "D", 6, 7]), In("w", rand((3, 4, 2, 2, 2)), True)])
    with pytest.raises(UnsupportedOpError, match="dynamic spatial dims"):
        ox.load(c.model)


def test_float16_3d_windows(tmp_path):
    """float16 storage, float32 compute: within float16's rounding of onnx's float16 reference."""
    x = rand((1, 2, 4, 5, 6), seed=20).astype(np.float16)
    w = rand((3, 2, 2, 2, 2), -1, 1, seed=21).astype(np.float16)
    cs = [case("conv3d_f16", "Conv", [In("x", x), In("w", w, True)], {"pads": [1, 0, 1, 0, 1, 1]}, ort=False),
          case("avgpool3d_f16", "AveragePool", [In("x", x)], {"kernel_shape": [2, 2, 3], "pads": [1, 0, 0, 0, 1, 1]},
               ort=False)]
    check_cases_ref(cs, tmp_path / "f16", dict(rtol=1e-2, atol=1e-2))
