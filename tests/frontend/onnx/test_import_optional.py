"""OptionalHasElement / OptionalGetElement over tensors (ops_control.py): an omitted input is an
empty optional (HasElement: False), a tensor is present (True) and is its own element. Against
onnx's numpy reference and onnxruntime; results compared exactly. An optional-typed graph input
is refused by name (the IR has no optional values).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.errors import UnsupportedOpError
from aitgen.frontend import onnx as ox

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def test_optional_ops_over_tensors(tmp_path):
    x = rand((3, 2), seed=1)
    cases = [case("get_tensor", "OptionalGetElement", [In("x", x)], opset=18),
             case("has_tensor", "OptionalHasElement", [In("x", x)], opset=18)]
    check_cases_ref(cases, tmp_path / "opt", dict(rtol=0, atol=0))
    # no input: the answer is an import-time False (nothing to build)
    m = helper.make_model(helper.make_graph([helper.make_node("OptionalHasElement", [""], ["y"])], "g", [],
                                            [helper.make_tensor_value_info("y", TensorProto.BOOL, [])]),
                          opset_imports=[helper.make_opsetid("", 18)])
    _, outs = ox.load(m)
    assert outs["y"].is_constant and outs["y"].value.dtype == np.bool_ and not outs["y"].value


def test_optional_graph_input_is_refused_by_name():
    t = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    vi = helper.make_value_info("o", helper.make_optional_type_proto(t))
    m = helper.make_model(helper.make_graph([helper.make_node("OptionalHasElement", ["o"], ["y"])], "g", [vi],
                                            [helper.make_tensor_value_info("y", TensorProto.BOOL, [])]),
                          opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOpError, match="'o'.*optional"):
        ox.load(m)
