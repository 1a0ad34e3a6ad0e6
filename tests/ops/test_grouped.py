"""GROUPED ops (aitgen/ops/grouped.py): several independent ops of one kind as one op. Inference and
the oracle against independent numpy per member (float32: rtol 1e-5, atol 1e-5; the members'
values are O(1)), and the typed errors of a malformed group.
"""
import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.errors import DTypeError, ShapeError
from aitgen.ir import IntVar, OpKind, Tensor
from aitgen.ops.fused import Expr, ExprNode, FusedElementwiseAttrs
from aitgen.ops.gemm import GemmAttrs
from aitgen.ops.grouped import GroupedAttrs, GroupMember, grouped, member_ops
from aitgen.ops.norm import LayerNormAttrs

RNG = np.random.default_rng(11)


def _c(*shape):
    return ag.constant(RNG.standard_normal(shape).astype(np.float32))


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)


def test_grouped_gemms_equal_each_member_in_numpy():
    b = IntVar("b", 1, 8)
    x, z = Tensor([b, 6], name="x"), Tensor([b, 3, 4], name="z")
    w1, bias1, w2 = _c(5, 6), _c(5), _c(4, 7)
    (y1,), (y2,) = grouped(OpKind.GEMM, [([x, w1, bias1], GemmAttrs(False, True)), ([z, w2], GemmAttrs())])
    assert [str(d) for d in y1.shape] == ["b", "5"] and [str(d) for d in y2.shape] == ["b", "3", "7"]
    op = y1.producer
    assert op is y2.producer and op.kind is OpKind.GROUPED and len(op.inputs) == 5
    xv, zv = RNG.standard_normal((4, 6)), RNG.standard_normal((4, 3, 4))
    got = ag.reference.run({"a": y1, "b": y2}, {"x": xv.astype(np.float32), "z": zv.astype(np.float32)})
    _close(got["a"], xv @ w1.value.T.astype(np.float64) + bias1.value)
    _close(got["b"], zv @ w2.value.astype(np.float64))


def test_grouped_layernorms_and_elementwise_members():
    x, r = Tensor([3, 8], name="x"), Tensor([5, 2, 6], name="r")
    w, bias = _c(8), _c(8)
    (n1,), (n2,) = grouped(OpKind.LAYERNORM, [([x, w, bias], LayerNormAttrs(eps=1e-5)),
                                              ([r], LayerNormAttrs(num_axes=2, eps=1e-3))])
    e = Expr(2, (ExprNode(OpKind.MUL, None, (0, 1), ag.DType.float32),
                 ExprNode(OpKind.TANH, None, (2,), ag.DType.float32)), (2, 3))
    e1 = Expr(1, (ExprNode(OpKind.NEG, None, (0,), ag.DType.float32),), (1,))
    (p, t), (q,) = grouped(OpKind.FUSED_ELEMENTWISE, [([n1, _c(8)], FusedElementwiseAttrs(e)),
                                                      ([n2], FusedElementwiseAttrs(e1))])
    xv, rv = RNG.standard_normal((3, 8)), RNG.standard_normal((5, 2, 6))
    got = ag.reference.run({"n1": n1, "n2": n2, "p": p, "t": t, "q": q},
                           {"x": xv.astype(np.float32), "r": rv.astype(np.float32)})

    def ln(a, axes, eps):
        m = a.mean(axis=axes, keepdims=True)
        return (a - m) / np.sqrt(((a - m) ** 2).mean(axis=axes, keepdims=True) + eps)

    want1 = ln(xv, (1,), 1e-5) * w.value + bias.value
    _close(got["n1"], want1)
    _close(got["n2"], ln(rv, (1, 2), 1e-3))
    scale = t.producer.inputs[1].value
    _close(got["p"], want1 * scale)
    _close(got["t"], np.tanh(want1 * scale))
    _close(got["q"], -ln(rv, (1, 2), 1e-3))


def test_member_ops_are_the_members():
    x, y = Tensor([2, 4], name="x"), Tensor([2, 4], name="y")
    (a,), (b,) = grouped(OpKind.LAYERNORM, [([x], LayerNormAttrs()), ([y], LayerNormAttrs(eps=0.5))], name="g")
    m0, m1 = member_ops(a.producer)
    assert (m0.kind, m0.inputs, m0.outputs, m0.name) == (OpKind.LAYERNORM, [x], [a], "g.0")
    assert m1.inputs == [y] and m1.outputs == [b] and m1.attrs.eps == 0.5
    assert a.producer.attrs.members.kinds() == [OpKind.LAYERNORM, OpKind.LAYERNORM]


def test_errors_name_the_member():
    x = Tensor([3, 6], name="x")
    with pytest.raises(ShapeError, match="member 1"):  # K differs
        grouped(OpKind.GEMM, [([x, _c(6, 2)], GemmAttrs()), ([x, _c(5, 2)], GemmAttrs())])
    with pytest.raises(DTypeError, match="member 0"):
        grouped(OpKind.GEMM, [([Tensor([3, 6], "int32", name="i"), _c(6, 2)], GemmAttrs())])
    attrs = GroupedAttrs(OpKind.LAYERNORM, (GroupMember(LayerNormAttrs(), 1), GroupMember(LayerNormAttrs(), 1)))
    with pytest.raises(ShapeError, match="2 operands in all"):
        ag.ops.registry.make_op(OpKind.GROUPED, [x], attrs)
    nested = GroupedAttrs(OpKind.GROUPED, (GroupMember(attrs, 2, 2),))
    with pytest.raises(ShapeError, match="cannot be groups"):
        ag.ops.registry.make_op(OpKind.GROUPED, [x, x], nested)
    wrong = GroupedAttrs(OpKind.LAYERNORM, (GroupMember(LayerNormAttrs(), 1, 2),))
    with pytest.raises(ShapeError, match="group says 2"):
        ag.ops.registry.make_op(OpKind.GROUPED, [x], wrong)


def test_sixteen_bit_members_round_like_the_ops_alone():
    # group_ops (through the whole pipeline) on two 16-bit branches: the same bits as the ops alone.
    x = Tensor([4, 8], "float16", name="x")
    y = Tensor([4, 8], "bfloat16", name="y")
    alone = {"a": ops.relu(x) * 3.0, "b": ops.sigmoid(y)}
    g = ag.passes.optimize(alone, compile_options("cpu"))
    assert [op.kind for op in g.ops] == [OpKind.GROUPED]
    feeds = {"x": RNG.standard_normal((4, 8)).astype(np.float16),
             "y": RNG.standard_normal((4, 8)).astype(ag.DType.bfloat16.np)}
    got = ag.reference.evaluate(g, feeds)
    want = ag.reference.run(alone, feeds)
    for k, t in g.outputs.items():
        assert got[id(t)].dtype == want[k].dtype and np.array_equal(got[id(t)], want[k])
