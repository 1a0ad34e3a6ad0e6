"""Hostile ONNX node names on the run-time-size converters (Resize, Loop, If): the names of the
sizes the run binds come from node names; they must reach generated C++ escaped, and errors name them."""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, rand

import aitgen as ag
from aitgen.errors import RuntimeInputError
from aitgen.frontend import onnx as ox

HOSTILE = 'r"; system("touch /tmp/pwned"); //\n*/ #include <x>'


def test_hostile_node_name_on_runtime_resize(tmp_path):
    c = case("hostile", "Resize", [In("x", rand((1, 1, 4, 4), seed=1)), None, In("s", np.array([1, 1, 2, 0.5], np.float32))],
             {"mode": "linear"}, opset=19)
    c.model.graph.node[0].name = HOSTILE
    _, outs = ox.load(c.model)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    ref = ag.reference.run(outs, c.feeds)["y"]
    np.testing.assert_allclose(m.run(c.feeds)["y"], ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeInputError):
        m.run({**c.feeds, "s": np.array([1, 1, 1000, 1], np.float32)})
    np.testing.assert_allclose(m.run(c.feeds)["y"], ref, rtol=1e-6, atol=1e-6)
    m.close()
