"""match_gelu: GELU written out op by op (ONNX below opset 20) becomes one GELU op. Not a pure
rewrite (erf(x * 0.70710677) vs erf(x / sqrt(2)), product order): held to check_pass's rtol 1e-5."""
from __future__ import annotations

import math

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, Tensor
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.match_gelu import match_gelu
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph


def _k(v):
    return ag.constant(np.float32(v))


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _run(y, **extra) -> Graph:
    return check_pass(match_gelu, Graph.from_outputs({"y": y, **extra}), exact=False)


X = Tensor([4, 8], name="x")
ERF = {
    "torch_onnx": lambda x: x * (ops.erf(x / _k(math.sqrt(2))) + _k(1.0)) * _k(0.5),
    "hf_style": lambda x: _k(0.5) * x * (_k(1.0) + ops.erf(x * _k(1 / math.sqrt(2)))),
    "half_first": lambda x: (x * _k(0.5)) * (_k(1.0) + ops.erf(x / _k(1.4142135))),
}
TANH = {
    "torch_onnx": lambda x: _k(0.5) * (x * (_k(1.0) + ops.tanh(_k(math.sqrt(2 / math.pi)) * (x + _k(0.044715) * (x * (x * x)))))),
    "pow3": lambda x: x * _k(0.5) * (ops.tanh((x + ops.pow(x, 3.0) * _k(0.044715)) * _k(math.sqrt(2 / math.pi))) + _k(1.0)),
}


@pytest.mark.parametrize("form", sorted(ERF))
def test_erf_forms(form):
    g = _run(ERF[form](X))
    assert kinds(g) == ["gelu"] and g.ops[0].attrs.approximate == "none"


@pytest.mark.parametrize("form", sorted(TANH))
def test_tanh_forms(form):
    g = _run(TANH[form](X))
    assert kinds(g) == ["gelu"] and g.ops[0].attrs.approximate == "tanh"


@pytest.mark.parametrize("case", ["wrong_half", "wrong_scale", "other_x", "inner_read_elsewhere", "tensor_half",
                                  "wrong_cubic"])
def test_look_alikes_stay(case):
    x, z = X, Tensor([4, 8], name="z")
    extra = {}
    if case == "wrong_half":
        y = x * (ops.erf(x / _k(math.sqrt(2))) + _k(1.0)) * _k(0.25)
    elif case == "wrong_scale":
        y = x * (ops.erf(x / _k(1.5)) + _k(1.0)) * _k(0.5)
    elif case == "other_x":
        y = z * (ops.erf(x / _k(math.sqrt(2))) + _k(1.0)) * _k(0.5)
    elif case == "inner_read_elsewhere":
        e = ops.erf(x / _k(math.sqrt(2)))
        y = x * (e + _k(1.0)) * _k(0.5)
        extra["e"] = e
    elif case == "tensor_half":
        y = x * (ops.erf(x / _k(math.sqrt(2))) + _k(1.0)) * ag.constant(np.full((4, 8), 0.5, np.float32))
    else:
        y = _k(0.5) * x * (_k(1.0) + ops.tanh(_k(math.sqrt(2 / math.pi)) * (x + _k(0.044715) * (x * x))))
    g = _run(y, **extra)
    assert "gelu" not in kinds(g)


def test_gemm_takes_the_gelu_as_its_epilogue_after_the_pipeline():
    w = ag.constant(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
    y = ERF["torch_onnx"](ops.gemm(X, w))
    g = check_pass(lambda g, o: run_pipeline(g, o), Graph.from_outputs({"y": y}), exact=False)
    assert kinds(g) == ["gemm"] and "gelu" in str(g.ops[0].attrs.epilogue)


def test_zoo_unchanged():
    for name in ZOO:
        stop = PIPELINE.index(match_gelu)
        g = run_pipeline(zoo_graph(name), compile_options(), PIPELINE[:stop])
        before = kinds(g)
        assert kinds(check_pass(match_gelu, g, exact=True)) == before
