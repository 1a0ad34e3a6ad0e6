"""constant_folding: constant subgraphs become constants, bit-exact, within the options' limits."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar
from aitgen.passes import constant_folding
from pass_equivalence import check_pass


def _kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _const_expr() -> ag.Tensor:
    c = ag.constant(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), name="c")
    return ops.reshape(ops.permute(ops.exp(c) * ag.constant(np.float32(0.5)), [1, 0]), [3, 4])


def test_a_whole_constant_subgraph_folds_into_one_constant():
    x = ag.Tensor([3, 4], name="x")
    out = check_pass(constant_folding, Graph.from_outputs({"y": x + _const_expr()}), exact=True)
    assert _kinds(out) == ["add"]
    (folded,) = out.constants
    assert not folded.value.flags.writeable  # shared arrays must never be written into


def test_float16_folds_bit_exactly():
    x = ag.Tensor([4], dtype="float16", name="x")
    c = ag.constant(np.array([0.1, 1.7, -3.3, 6.5], np.float16))
    y = x * ops.tanh(ops.exp(c) / ag.constant(np.float16(3.0)))
    out = check_pass(constant_folding, Graph.from_outputs({"y": y}), exact=True)
    assert _kinds(out) == ["mul"]


def test_nothing_folds_when_disabled():
    x = ag.Tensor([3, 4], name="x")
    g = Graph.from_outputs({"y": x + _const_expr()})
    before = len(g.ops)
    out = check_pass(constant_folding, g, exact=True, opts=compile_options(fold_constants=False))
    assert len(out.ops) == before


def test_outputs_larger_than_the_limit_stay_computations():
    x = ag.Tensor([64, 64], name="x")
    big = ops.expand(ops.exp(ag.constant(np.float32(1.0))), [64, 64])  # 16 KiB
    g = Graph.from_outputs({"y": x * big})
    out = check_pass(constant_folding, g, exact=True, opts=compile_options(constant_fold_max_bytes=1024))
    assert _kinds(out) == ["expand", "mul"]  # exp (4 bytes) folded, expand (16 KiB) kept
    out = check_pass(constant_folding, g, exact=True)
    assert _kinds(out) == ["mul"]


def test_graph_outputs_keep_their_op():
    c = ag.constant(np.array([1.0, 2.0], np.float32))
    out = check_pass(constant_folding, Graph.from_outputs({"a": ops.exp(ops.neg(c))}), exact=True)
    assert _kinds(out) == ["exp"] and out.ops[0].inputs[0].is_constant


def test_symbolic_shapes_are_not_folded():
    batch = IntVar("batch", 1, 8)
    x = ag.Tensor([batch, 4], name="x")
    g = Graph.from_outputs({"y": x + ops.expand(ag.constant(np.ones((1, 4), np.float32)), [batch, 4])})
    out = check_pass(constant_folding, g, exact=True)
    assert _kinds(out) == ["expand", "add"]


@pytest.mark.parametrize("shared", [False, True])
def test_folded_values_shared_with_other_readers(shared):
    # A folded tensor read both inside the folded subgraph and by a live op becomes one constant.
    x = ag.Tensor([3, 4], name="x")
    e = ops.exp(ag.constant(np.ones((3, 4), np.float32)))
    y = x * e + ops.tanh(e) if shared else x * ops.tanh(e)
    out = check_pass(constant_folding, Graph.from_outputs({"y": y}), exact=True)
    assert len(out.constants) == (2 if shared else 1)
