"""sink_permutes: the importer's NCHW <-> NHWC permutes move past element-wise ops and cancel.

The pass is exact (the same element-wise math on the same values), checked by check_pass against
the oracle; the pipeline around it is held to check_pass's usual tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, OpKind, Tensor
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.sink_permutes import sink_permutes
from pass_equivalence import check_pass
from pass_graphgen import random_graphs
from pass_zoo import ZOO, zoo_graph

RNG = np.random.default_rng(5)
NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _c(*shape):
    return ag.constant(RNG.uniform(-1, 1, size=shape).astype(np.float32))


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def sink(outputs) -> Graph:
    return check_pass(sink_permutes, Graph.from_outputs(outputs), exact=True)


def _conv_nchw(x, cin, cout):
    """What the ONNX importer emits for a Conv: permute in, NHWC conv, permute out."""
    y = ops.conv2d(ops.permute(x, NHWC), _c(cout, 3, 3, cin), _c(cout), padding=1)
    return ops.permute(y, NCHW)


def test_conv_relu_residual_conv_has_no_permute_between_convs():
    x = Tensor([1, 4, 6, 6], name="x")
    a = _conv_nchw(x, 4, 4)
    h = ops.relu(a) + _c(4, 1, 1)                       # a per-channel constant in NCHW
    b = _conv_nchw(h, 4, 4)
    out = ops.relu(b + a)                               # residual: both operands permuted
    g = sink({"y": out})
    convs = [op for op in g.ops if op.kind is OpKind.CONV2D]
    assert len(convs) == 2
    # conv -> relu -> add -> conv: the second conv reads NHWC data that no permute touched.
    between = convs[1].inputs[0].producer
    assert between.kind is OpKind.ADD
    assert sum(op.kind is OpKind.PERMUTE for op in g.ops) == 2  # the input's and the output's
    g = check_pass(lambda g, o: run_pipeline(g, o), Graph.from_outputs({"y": out}), exact=False)
    assert [k for k in kinds(g) if k == "permute"] == ["permute", "permute"]


def test_operands_that_cannot_follow_stay():
    x = Tensor([1, 4, 6, 6], name="x")
    a = _conv_nchw(x, 4, 4)
    other = Tensor([1, 4, 6, 6], name="other")          # a run-time NCHW tensor: no permute to drop
    g = sink({"y": ops.relu(a) * other})
    assert [op.kind for op in g.ops].count(OpKind.MUL) == 1
    mul = next(op for op in g.ops if op.kind is OpKind.MUL)
    assert mul.inputs[1].name == "other" and tuple(mul.outputs[0].shape) == (1, 4, 6, 6)


def test_permute_of_size_one_dims_is_a_reshape():
    x = Tensor([2, 5, 1, 1], name="x")
    g = sink({"y": ops.permute(x, NHWC) * 2.0})
    assert OpKind.PERMUTE not in [op.kind for op in g.ops]


def test_zoo_exact():
    for name in ZOO:
        stop = PIPELINE.index(sink_permutes)
        g = run_pipeline(zoo_graph(name), compile_options(), PIPELINE[:stop])
        check_pass(sink_permutes, g, exact=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs(max_steps=14))
def test_random_graphs(graph):
    check_pass(sink_permutes, graph, exact=True)


def _squeeze_excite(x, c):
    """An imported SE block: conv (NHWC inside permutes), global mean in NCHW, 1x1 convs, scale."""
    a = _conv_nchw(x, c, c)
    s = ops.reduce_mean(a, axes=[2, 3], keepdims=True)                  # [N, C, 1, 1]
    s = ops.permute(ops.conv2d(ops.permute(s, NHWC), _c(c, 1, 1, c)), NCHW)
    return a * ops.sigmoid(s)


def test_squeeze_excite_pools_the_nhwc_conv_result_in_place():
    x = Tensor([1, 4, 6, 6], name="x")
    y = _squeeze_excite(x, 4)
    g = check_pass(sink_permutes, Graph.from_outputs({"y": _conv_nchw(y, 4, 4)}), exact=False)
    means = [op for op in g.ops if op.kind is OpKind.REDUCE_MEAN]
    assert len(means) == 1 and means[0].attrs.axes == (1, 2) and means[0].inputs[0].producer.kind is OpKind.CONV2D
    perms = [op for op in g.ops if op.kind is OpKind.PERMUTE]
    assert len(perms) == 2 and perms[0].inputs[0].name == "x" and g.outputs["y"].producer is perms[1]  # the model's NCHW ends
    mul = next(op for op in g.ops if op.kind is OpKind.MUL)
    assert {t.producer.kind for t in mul.inputs} == {OpKind.CONV2D, OpKind.SIGMOID}  # the scale reads NHWC too
    full = check_pass(lambda g, o: run_pipeline(g, o), Graph.from_outputs({"y": _conv_nchw(y, 4, 4)}), exact=False)
    assert [op.kind for op in full.ops].count(OpKind.PERMUTE) == 2  # the model's own NCHW input and output


@pytest.mark.parametrize("kind, axes, keepdims", [
    ("reduce_sum", [1], False), ("reduce_max", [2, 3], False), ("reduce_var", [1, 3], True),
    ("reduce_min", [3], False), ("reduce_prod", [0, 1], False), ("reduce_mean", [1, 2], False)])
def test_reductions_over_any_axes(kind, axes, keepdims):
    """The result keeps the permuted layout's dim order, with or without a permute after it."""
    x = Tensor([2, 4, 3, 5], name="x")
    a = _conv_nchw(x, 4, 4)
    y = getattr(ops, kind)(a, axes=axes, keepdims=keepdims)
    g = check_pass(sink_permutes, Graph.from_outputs({"y": y}), exact=False)
    red = next(op for op in g.ops if op.kind.value == kind)
    assert red.inputs[0].producer.kind is OpKind.CONV2D
    assert tuple(g.outputs["y"].shape) == tuple(y.shape)
