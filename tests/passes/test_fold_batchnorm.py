"""fold_batchnorm: conv2d / conv_transpose2d / gemm + batchnorm become one op with scaled weights.

Held to 1e-5 (pass_equivalence): the fold reorders float arithmetic.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, Tensor
from aitgen.passes import fold_batchnorm
from pass_equivalence import check_pass

RNG = np.random.default_rng(0)


def _c(*shape: int, low: float = -1.0, high: float = 1.0, name: Optional[str] = None) -> Tensor:
    return ag.constant(RNG.uniform(low, high, size=shape).astype(np.float32), name=name)


def _bn(y: Tensor, n: int) -> Tensor:
    return ops.batchnorm(y, _c(n, low=0.5, high=1.5), _c(n), _c(n), _c(n, low=0.1, high=2.0), eps=1e-3)


def _kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("groups, stride", [(1, 1), (1, 2), (4, 1)])
def test_conv2d(bias, groups, stride):
    x = ag.Tensor([2, 5, 5, 4], name="x")
    o = 4 if groups == 4 else 6
    y = ops.conv2d(x, _c(o, 3, 3, 4 // groups, name="conv.weight"), _c(o) if bias else None,
                   stride=stride, padding=1, groups=groups)
    out = check_pass(fold_batchnorm, Graph.from_outputs({"y": ops.relu(_bn(y, o))}), exact=False)
    assert _kinds(out) == ["conv2d", "relu"] and len(out.ops[0].inputs) == 3


def test_conv_transpose2d():
    x = ag.Tensor([1, 4, 4, 3], name="x")
    y = ops.conv_transpose2d(x, _c(3, 3, 3, 5), stride=2, padding=1)
    out = check_pass(fold_batchnorm, Graph.from_outputs({"y": _bn(y, 5)}), exact=False)
    assert _kinds(out) == ["conv_transpose2d"]


@pytest.mark.parametrize("layout", ["rcr", "rrr", "crr", "ccr"])
@pytest.mark.parametrize("bias", [False, True])
def test_gemm_layouts(layout, bias):
    a = ag.Tensor([3, 5] if layout[0] == "r" else [5, 3], name="a")
    w = _c(*((4, 5) if layout[1] == "c" else (5, 4)))
    y = ops.gemm(a, w, _c(4) if bias else None, layout=layout)
    out = check_pass(fold_batchnorm, Graph.from_outputs({"y": _bn(y, 4)}), exact=False)
    assert _kinds(out) == ["gemm"]


def test_linear_on_a_batched_activation():
    x = ag.Tensor([2, 3, 5], name="x")
    out = check_pass(fold_batchnorm, Graph.from_outputs({"y": _bn(ops.linear(x, _c(4, 5), _c(4)), 4)}), exact=False)
    assert _kinds(out) == ["gemm"]


def test_not_folded_when_the_conv_has_another_reader_or_is_an_output():
    x = ag.Tensor([1, 4, 4, 3], name="x")
    y = ops.conv2d(x, _c(2, 1, 1, 3))
    for outputs in ({"a": _bn(y, 2), "b": ops.relu(y)}, {"a": _bn(y, 2), "conv": y}):
        out = check_pass(fold_batchnorm, Graph.from_outputs(outputs), exact=False)
        assert "batchnorm" in _kinds(out)


def test_not_folded_when_the_weight_or_a_parameter_is_not_constant():
    x, w = ag.Tensor([1, 4, 4, 3], name="x"), ag.Tensor([2, 1, 1, 3], name="w")
    mean = ag.Tensor([2], name="mean")
    g1 = Graph.from_outputs({"y": _bn(ops.conv2d(x, w), 2)})
    y = ops.conv2d(x, _c(2, 1, 1, 3))
    g2 = Graph.from_outputs({"y": ops.batchnorm(y, _c(2), _c(2), mean, _c(2, low=0.5, high=1.0))})
    for g in (g1, g2):
        assert "batchnorm" in _kinds(check_pass(fold_batchnorm, g, exact=False))


def test_shared_weight_folds_into_two_new_constants():
    x = ag.Tensor([1, 4, 4, 3], name="x")
    w = _c(2, 3, 3, 3, name="shared.weight")
    g = Graph.from_outputs({"a": _bn(ops.conv2d(x, w, padding=1), 2), "b": _bn(ops.conv2d(x, w, padding=1), 2)})
    out = check_pass(fold_batchnorm, g, exact=False)  # also proves the shared array was not written
    assert _kinds(out) == ["conv2d", "conv2d"]
    weights = [op.inputs[1] for op in out.ops]
    assert weights[0] is not weights[1] and len({t.name for t in weights}) == 2


def test_skipped_when_constant_folding_is_off():
    x = ag.Tensor([1, 4, 4, 3], name="x")
    g = Graph.from_outputs({"y": _bn(ops.conv2d(x, _c(2, 1, 1, 3)), 2)})
    out = check_pass(fold_batchnorm, g, exact=True, opts=compile_options(fold_constants=False))
    assert _kinds(out) == ["conv2d", "batchnorm"]


def test_full_resnet50_has_no_batchnorm_left():
    # Built at 224 x 224 and folded only: evaluating it in the oracle would take too long here.
    inputs, outputs = ag.models.get("resnet50", batch=1)
    g = Graph.from_outputs(outputs, inputs=list(inputs.values()))
    assert g.op_counts()["batchnorm"] == 53
    out = fold_batchnorm(g, compile_options())
    counts = out.op_counts()
    assert "batchnorm" not in counts and counts["conv2d"] == 53
    assert all(len(op.inputs) == 3 for op in out.ops if op.kind.value == "conv2d")


def test_copies_of_one_batchnorm_fold_together():
    x = ag.Tensor([1, 4, 4, 3], name="x")
    y = ops.conv2d(x, _c(2, 1, 1, 3))
    params = (_c(2, low=0.5, high=1.5), _c(2), _c(2), _c(2, low=0.5, high=1.5))
    g = Graph.from_outputs({"a": ops.relu(ops.batchnorm(y, *params)), "b": ops.tanh(ops.batchnorm(y, *params))})
    out = check_pass(fold_batchnorm, g, exact=False)
    assert sorted(_kinds(out)) == ["conv2d", "relu", "tanh"]
    other = ops.batchnorm(y, *params[:3], _c(2, low=0.5, high=1.5))  # a different batchnorm: no fold
    g = Graph.from_outputs({"a": ops.batchnorm(y, *params), "b": other})
    assert _kinds(check_pass(fold_batchnorm, g, exact=False)).count("batchnorm") == 2
