"""fuse_norm_elementwise: layernorm / rmsnorm / softmax take the element-wise op computing their
input as a prologue; the oracle agrees, and nothing is absorbed whose value is needed elsewhere."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, OpKind
from aitgen.options import CompileOptions
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.fuse_elementwise import fuse_elementwise
from aitgen.passes.fuse_norm_elementwise import fuse_norm_elementwise
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph

W = ag.constant(np.linspace(0.5, 1.5, 16, dtype=np.float32), name="w")
B = ag.constant(np.linspace(-1, 1, 16, dtype=np.float32), name="b")


def both(g: Graph, opts: CompileOptions) -> Graph:
    return fuse_norm_elementwise(fuse_elementwise(g, opts), opts)


def run(outputs, fn=fuse_norm_elementwise, **kw) -> Graph:
    return check_pass(fn, Graph.from_outputs(outputs), exact=False, **kw)


def prologue(g: Graph, kind: OpKind):
    (op,) = [op for op in g.ops if op.kind is kind]
    return op.attrs.prologue


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_residual_add_into_layernorm(dtype):
    n = IntVar("n", 1, 4)
    x, r = ag.Tensor([n, 3, 16], dtype, name="x"), ag.Tensor([n, 3, 16], dtype, name="r")
    w, b = (ag.constant(t.value, dtype=dtype) for t in (W, B))
    g = run({"y": ops.layernorm(x + r, w, b)})
    assert [op.kind for op in g.ops] == [OpKind.LAYERNORM]
    assert len(g.ops[0].inputs) == 4 and str(prologue(g, OpKind.LAYERNORM)) == "{s2 = add(s0, s1) -> s2}"


def test_a_group_with_broadcasts_goes_in_whole():
    x = ag.Tensor([2, 3, 16], name="x")
    pos, tok = ag.Tensor([3, 16], name="pos"), ag.Tensor([2, 3, 1], name="tok")
    g = run({"y": ops.layernorm(ops.relu(x * tok) + pos, W, B)}, fn=both)
    assert [op.kind for op in g.ops] == [OpKind.LAYERNORM]
    assert len(prologue(g, OpKind.LAYERNORM).nodes) == 3


def test_slot_zero_is_the_full_shaped_operand():
    x, pos = ag.Tensor([2, 3, 16], name="x"), ag.Tensor([3, 16], name="pos")
    g = run({"y": ops.rmsnorm(pos - x, W)})  # the full-shaped operand comes second
    op = g.ops[0]
    assert op.inputs[0].name == "x" and str(op.attrs.prologue) == "{s2 = sub(s1, s0) -> s2}"


def test_softmax_last_axis_takes_scale_and_mask():
    s, mask = ag.Tensor([2, 4, 8, 8], name="s"), ag.Tensor([2, 1, 1, 8], name="mask")
    g = run({"p": ops.softmax(s * 0.125 + mask, -1)}, fn=both)
    assert [op.kind for op in g.ops] == [OpKind.SOFTMAX]
    g = run({"p": ops.softmax(s * 0.125 + mask, 1)}, fn=both)  # not the last axis: no prologue
    assert prologue(g, OpKind.SOFTMAX) is None


def test_nothing_absorbed_that_is_read_elsewhere_or_returned():
    x, r = ag.Tensor([2, 16], name="x"), ag.Tensor([2, 16], name="r")
    h = x + r
    assert prologue(run({"y": ops.layernorm(h, W, B), "z": h * 2.0}), OpKind.LAYERNORM) is None
    assert prologue(run({"y": ops.layernorm(h, W, B), "h": h}), OpKind.LAYERNORM) is None


def test_operands_a_row_kernel_cannot_read_cheaply_stay_out():
    x = ag.Tensor([2, 3, 16], name="x")
    part = ag.Tensor([1, 16], name="part")  # over rows of (3, 16) it is neither whole nor one value
    assert prologue(run({"y": ops.layernorm(x + part, num_axes=2)}), OpKind.LAYERNORM) is None
    a, c = ag.Tensor([3, 1], name="a"), ag.Tensor([1, 16], name="c")  # no operand has the full shape
    assert prologue(run({"y": ops.layernorm(a + c, W, B)}), OpKind.LAYERNORM) is None


def test_fusion_off_is_a_no_op():
    x, r = ag.Tensor([2, 16], name="x"), ag.Tensor([2, 16], name="r")
    g = Graph.from_outputs({"y": ops.layernorm(x + r, W, B)})
    out = check_pass(fuse_norm_elementwise, g, exact=True, opts=compile_options(fusion=False))
    assert str(out) == str(g)


@pytest.mark.parametrize("model", ZOO)
def test_zoo(model):
    before = run_pipeline(zoo_graph(model), compile_options(), PIPELINE[:PIPELINE.index(fuse_norm_elementwise)])
    out = check_pass(fuse_norm_elementwise, before, exact=False)
    if model == "bert_base":  # the embedding sum (word + position + token type) goes into its layernorm
        assert any(op.kind is OpKind.LAYERNORM and op.attrs.prologue is not None for op in out.ops)
