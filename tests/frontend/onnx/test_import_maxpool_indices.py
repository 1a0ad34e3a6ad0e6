"""MaxPool's second output, Indices (_pool_indices.py: argmax over the window's taps), against
onnxruntime and onnx's numpy reference, in one CPU build per check.

Configs: 1-D, 2-D and 3-D windows; both storage orders; pads (beyond half a window too), dilations,
strides, ceil_mode, auto_pad; a dynamic batch; ties (integer-valued floats and int8/uint8, where a
window holds its maximum more than once: the first in row-major window order wins; float16 too);
uint8 zeros next to padding (the padding must never win). Indices are compared exactly; Y too (a
max moves no bits).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases, check_cases_ref, ints, rand

from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox

X4 = rand((2, 3, 7, 6), seed=1)
TIES4 = np.round(rand((2, 3, 7, 6), -2, 2, seed=2)).astype(np.float32)  # many equal maxima per window
X5 = rand((2, 2, 5, 6, 7), seed=3)


def _mp(name, x, attrs, **kw):
    return case(name, "MaxPool", [In("x", x, dims=kw.pop("dims", None))], attrs, n_out=2, **kw)


def _cases():
    return [
        _mp("ceil_pads", X4, {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1}),
        _mp("ties_colmajor_dil", TIES4, {"kernel_shape": [2, 3], "dilations": [2, 1], "storage_order": 1}),
        _mp("ties_pads", TIES4, {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 1, 1, 1]}),
        _mp("same_upper", TIES4, {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        _mp("dyn_batch", X4, {"kernel_shape": [2, 2], "strides": [1, 2], "pads": [0, 1, 1, 0]},
            dims=["N", 3, 7, 6], dim_bounds={"N": (1, 4)}, sizes=[{"x": rand((3, 3, 7, 6), seed=4)}]),
        _mp("pool1d", np.round(rand((2, 3, 9), seed=5)), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
        _mp("pool3d_colmajor", X5, {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1],
                                    "storage_order": 1}),
        _mp("pool3d_ceil_ties", np.round(X5), {"kernel_shape": [3, 2, 3], "strides": [2, 2, 2],
                                               "pads": [1, 0, 1, 1, 1, 0], "ceil_mode": 1}),
        _mp("f16_ties", TIES4.astype(np.float16), {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 1, 1, 1]}),
        _mp("int8_ties", ints((1, 2, 5, 5), -3, 3, np.int8, seed=6), {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}),
        # uint8 pads low with 0 in Y's kernel; a zero next to the pad must still give a real index
        _mp("uint8_zeros", np.zeros((1, 1, 4, 4), np.uint8), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ]


def test_indices_match_onnxruntime(tmp_path):
    check_cases(_cases(), tmp_path / "ort")


def test_indices_match_onnx_reference(tmp_path):
    # onnx.reference pads integer inputs with NaN and fails: the int8/uint8 cases have onnxruntime only
    check_cases_ref([c for c in _cases() if not c.name.startswith(("int8", "uint8"))], tmp_path / "ref")


def test_big_pads_match_onnxruntime(tmp_path):
    """Pads beyond half a window (explicit padding in both outputs). onnx.reference's indices are
    off here (with pads and every stride 1 it counts in its own padded copy: negative indices), so
    onnxruntime alone is the reference."""
    check_cases([_mp("big_pads", TIES4, {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2]})], tmp_path / "big")


def test_indices_need_static_spatial_dims():
    c = _mp("dyn_hw", X4, {"kernel_shape": [2, 2]}, dims=[2, 3, "H", 6], dim_bounds={"H": (2, 8)})
    with pytest.raises(UnsupportedOpError, match="Indices output over the dynamic spatial dims") as e:
        ox.load(c.model, dim_bounds=c.dim_bounds)
    assert "(MaxPool, opset 17)" in str(e.value)


def test_bad_storage_order_is_malformed():
    c = _mp("so", X4, {"kernel_shape": [2, 2], "storage_order": 2}, infer=False)
    with pytest.raises(ImportError_, match="storage_order") as e:
        ox.load(c.model)
    assert "(MaxPool, opset 17)" in str(e.value)


def test_maxpool_then_maxunpool(tmp_path):
    """SegNet's pair: MaxPool's Indices feed MaxUnpool (which takes static shapes); against onnxruntime."""
    import aitgen as ag
    from onnx_cases import TensorProto, assert_close, helper, ort_run
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    g = helper.make_graph(nodes, "segnet", [vi("x", TensorProto.FLOAT, [2, 3, 6, 4])],
                          [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    _, outs = ox.load(model)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "segnet")
    for seed in (2, 3):
        feeds = {"x": np.round(rand((2, 3, 6, 4), seed=seed))}  # ties: the first maximum survives
        want = ort_run(model, feeds)["y"]
        assert_close(ag.reference.run(outs, feeds)["y"], want, "oracle")
        assert_close(m.run(feeds)["y"], want, "CPU build")
    m.close()
