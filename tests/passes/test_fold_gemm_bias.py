"""fold_gemm_bias: gemm(a, w) + b over N becomes the GEMM's bias. Exact in float32 (the GEMM
reference adds its bias as the add did): check_pass compares bit for bit. In float16 the GEMM rounds
once instead of twice: held to check_pass's 16-bit tolerance (8 ulp)."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, Tensor
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.fold_gemm_bias import fold_gemm_bias
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph

RNG = np.random.default_rng(2)


def _c(*shape):
    return ag.constant(RNG.standard_normal(shape).astype(np.float32))


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _run(y, **extra) -> Graph:
    return check_pass(fold_gemm_bias, Graph.from_outputs({"y": y, **extra}), exact=True)


@pytest.mark.parametrize("bias_shape, left", [((6,), False), ((1, 1, 6), True), ((1, 6), False)])
def test_onnx_matmul_add(bias_shape, left):
    s = IntVar("s", 1, 8)
    x = Tensor([2, s, 4], name="x")
    g_ = ops.gemm(x, _c(4, 6))
    b = _c(*bias_shape)
    g = _run(b + g_ if left else g_ + b)
    assert kinds(g) == ["gemm"] and tuple(g.ops[0].inputs[2].shape) == (6,)


def test_float16_rounds_once():
    x = Tensor([3, 4], dtype="float16", name="x")
    w = ag.constant(RNG.standard_normal((4, 6)).astype(np.float16))
    b = ag.constant(RNG.standard_normal(6).astype(np.float16))
    g = check_pass(fold_gemm_bias, Graph.from_outputs({"y": ops.gemm(x, w) + b}), exact=False)
    assert kinds(g) == ["gemm"]


def test_runtime_bias_is_read_through_a_view():
    x, b = Tensor([3, 4], name="x"), Tensor([1, 6], name="b")
    g = _run(ops.gemm(x, _c(4, 6)) + b)
    assert kinds(g) == ["reshape", "gemm"]


@pytest.mark.parametrize("case", ["full_tensor", "has_bias", "read_twice", "per_row", "grows"])
def test_adds_that_are_not_a_bias_stay(case):
    x = Tensor([3, 4], name="x")
    g_ = ops.gemm(x, _c(4, 6))
    extra = {}
    if case == "full_tensor":
        y = g_ + Tensor([3, 6], name="r")
    elif case == "has_bias":
        y = ops.gemm(x, _c(4, 6), _c(6)) + _c(6)
    elif case == "read_twice":
        y = g_ + _c(6)
        extra["g"] = ops.relu(g_)
    elif case == "per_row":
        y = g_ + _c(3, 1)
    else:
        y = g_ + _c(2, 1, 6)
    g = _run(y, **extra)
    assert "add" in kinds(g)


def test_imported_qkv_projections_pack_into_one_gemm():
    # ONNX-style Linear (MatMul + Add) for q, k and v, then attention: one packed GEMM, as native.
    b, s, h, d = 1, 4, 2, 4
    x = Tensor([b, s, h * d], name="x")

    def proj():
        return ops.permute(ops.reshape(ops.gemm(x, _c(h * d, h * d)) + _c(h * d), [b, s, h, d]), [0, 2, 1, 3])

    q, k, v = proj(), proj(), proj()
    p = ops.softmax(ops.matmul(q, ops.transpose(k, -1, -2)) * ag.constant(np.float32(0.5)), -1)
    y = ops.reshape(ops.permute(ops.matmul(p, v), [0, 2, 1, 3]), [b, s, h * d])
    g = check_pass(lambda g, o: run_pipeline(g, o), Graph.from_outputs({"y": y}), exact=False)
    assert sorted(kinds(g)) == ["attention", "gemm", "reshape"]


def test_zoo_exact():
    for name in ZOO:
        stop = PIPELINE.index(fold_gemm_bias)
        g = run_pipeline(zoo_graph(name), compile_options(), PIPELINE[:stop])
        check_pass(fold_gemm_bias, g, exact=True)
