"""The equivalence check can fail: deliberately broken passes are caught by the very check the real
passes pass (check_pass from pass_equivalence), on the same graphs."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import GraphError
from aitgen.ir import Graph, OpKind
from aitgen.options import CompileOptions
from aitgen.passes import fold_batchnorm, remove_no_ops
from aitgen.passes._util import new_constant
from aitgen.ops.registry import make_op1
from pass_equivalence import check_pass
from pass_zoo import zoo_graph


def swap_sub_operands(graph: Graph, opts: CompileOptions) -> Graph:
    for op in graph.ops:
        if op.kind == OpKind.SUB:
            op.inputs.reverse()
    return graph


def fold_batchnorm_dropping_the_bias(graph: Graph, opts: CompileOptions) -> Graph:
    graph = fold_batchnorm(graph, opts)
    for op in list(graph.ops):
        if op.kind == OpKind.CONV2D and len(op.inputs) == 3:
            out = make_op1(op.kind, op.inputs[:2], op.attrs, name=op.name)
            graph.replace_all_uses(op.outputs[0], out)
    return graph.sort()


def remove_no_ops_writing_into_a_constant(graph: Graph, opts: CompileOptions) -> Graph:
    """Right outputs, wrong method: scribbles on a shared array, then hides it behind a fresh copy."""
    for t in graph.constants:
        old = t.value.copy()
        arr = t.value
        if arr.flags.writeable and arr.size:
            arr.flat[0] += 1
            graph.replace_all_uses(t, new_constant(old, t.dtype, name=t.name))
            break
    return remove_no_ops(graph, opts)


def link_without_registering(graph: Graph, opts: CompileOptions) -> Graph:
    ops.neg(graph.inputs[0])  # a reader outside the graph
    return graph


def _sub_graph() -> Graph:
    x = ag.Tensor([2, 3], name="x")
    return Graph.from_outputs({"y": ops.relu(x) - ops.tanh(x)})


def _conv_bn_graph() -> Graph:
    rng = np.random.default_rng(1)
    c = lambda *s: ag.constant(rng.uniform(0.5, 1.5, size=s).astype(np.float32))  # noqa: E731
    x = ag.Tensor([1, 4, 4, 3], name="x")
    y = ops.batchnorm(ops.conv2d(x, c(2, 3, 3, 3), padding=1), c(2), c(2), c(2), c(2))
    return Graph.from_outputs({"y": y})


def test_swapped_sub_operands_are_caught():
    check_pass(remove_no_ops, _sub_graph(), exact=True)  # the same graph passes with a real pass
    with pytest.raises(AssertionError, match="differs"):
        check_pass(swap_sub_operands, _sub_graph(), exact=True)


def test_dropped_bias_is_caught_even_at_fold_tolerance():
    check_pass(fold_batchnorm, _conv_bn_graph(), exact=False)
    with pytest.raises(AssertionError):
        check_pass(fold_batchnorm_dropping_the_bias, _conv_bn_graph(), exact=False)


def test_dropped_bias_is_caught_on_the_zoo():
    check_pass(fold_batchnorm, zoo_graph("resnet50"), exact=False)
    with pytest.raises(AssertionError):
        check_pass(fold_batchnorm_dropping_the_bias, zoo_graph("resnet50"), exact=False)


def test_writing_into_a_shared_constant_is_caught():
    with pytest.raises(AssertionError, match="wrote into constant arrays"):
        check_pass(remove_no_ops_writing_into_a_constant, _conv_bn_graph(), exact=True)


def test_a_graph_left_invalid_is_caught():
    with pytest.raises(GraphError):
        check_pass(link_without_registering, _sub_graph(), exact=True)


def test_exact_means_exact():
    def nudge(graph: Graph, opts: CompileOptions) -> Graph:
        y = graph.outputs["y"]
        graph.outputs["y"] = ops.mul(y, ag.constant(np.float32(1 + 2**-20)))
        return graph.sort()
    check_pass(nudge, _sub_graph(), exact=False)  # within 1e-5 ...
    with pytest.raises(AssertionError):
        check_pass(nudge, _sub_graph(), exact=True)  # ... but not bit-exact


def test_memory_layout_is_not_mistaken_for_a_changed_result():
    # conv2d's reference returns a strided array here, and BLAS sums a strided gemm operand in
    # another order than a contiguous one: removing the x/1 in between must still count as exact.
    rng = np.random.default_rng(0)
    x = ag.Tensor([1, 3, 4, 4], name="x")
    y = ops.conv2d(x, ag.constant(rng.standard_normal((4, 1, 1, 1)).astype(np.float32)), stride=2, groups=4)
    y = y / ag.constant(np.ones((1, 2, 1, 4), np.float32))
    out = ops.linear(y, ag.constant(rng.standard_normal((1, 4)).astype(np.float32)))
    g = check_pass(remove_no_ops, Graph.from_outputs({"y": out}), exact=True)
    assert "div" not in [op.kind.value for op in g.ops]
