"""fuse_parallel_gemms: Q/K/V GEMMs reading one activation become one GEMM on packed weights whose
parts the attention reads through views. Held to 1e-5: one wider product may sum in another order."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar
from aitgen.passes import PIPELINE, dedup, fuse_memory_ops, fuse_parallel_gemms, run_pipeline
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph

RNG = np.random.default_rng(0)


def _w(*shape):
    return ag.constant(RNG.standard_normal(shape).astype(np.float32))


def _kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _heads(t, b, s, h, d):
    return ops.permute(ops.reshape(t, [b, s, h, d]), [0, 2, 1, 3])


def _attention(q, k, v, b, s, h, d):
    return ops.scaled_dot_product_attention(_heads(q, b, s, h, d), _heads(k, b, s, h, d), _heads(v, b, s, h, d))


@pytest.mark.parametrize("layout", ["rcr", "rrr"])
@pytest.mark.parametrize("biases", [(True, True, True), (False, False, False), (True, False, True)])
def test_qkv_become_one_gemm(layout, biases):
    b, s, h, d = 2, 5, 2, 4
    x = ag.Tensor([b, s, h * d], name="x")
    qkv = [ops.gemm(x, _w(h * d, h * d), _w(h * d) if bias else None, layout=layout) for bias in biases]
    g = Graph.from_outputs({"y": _attention(*qkv, b, s, h, d)})
    out = check_pass(fuse_parallel_gemms, g, exact=False)
    assert _kinds(out).count("gemm") == 1 and "split" in _kinds(out)
    gemm = next(op for op in out.ops if op.kind.value == "gemm")
    assert len(gemm.inputs) == (3 if any(biases) else 2)
    # and with fuse_memory_ops after it nothing but the GEMM and the attention is left
    out = check_pass(fuse_memory_ops, out, exact=True)
    assert _kinds(out) == ["gemm", "attention"]


def test_dynamic_dims():
    b, s, h, d = IntVar("batch", 1, 4), IntVar("seq", 1, 8), 2, 4
    x = ag.Tensor([b, s, h * d], name="x")
    qkv = [ops.linear(x, _w(h * d, h * d), _w(h * d)) for _ in range(3)]
    out = check_pass(fuse_parallel_gemms, Graph.from_outputs({"y": _attention(*qkv, b, s, h, d)}), exact=False)
    assert _kinds(out).count("gemm") == 1


def test_a_part_not_read_through_views_stays_its_own_gemm():
    # v also feeds a relu: its copy would survive, so only q and k are packed
    b, s, h, d = 1, 4, 2, 4
    x = ag.Tensor([b, s, h * d], name="x")
    q, k, v = (ops.linear(x, _w(h * d, h * d), _w(h * d)) for _ in range(3))
    g = Graph.from_outputs({"y": _attention(q, k, v, b, s, h, d), "r": ops.relu(v)})
    out = check_pass(fuse_parallel_gemms, g, exact=False)
    assert _kinds(out).count("gemm") == 2
    packed = next(op for op in out.ops if op.kind.value == "gemm" and op.outputs[0].shape[-1] == 2 * h * d)
    assert packed is not None


def test_gemms_feeding_plain_ops_are_left_alone():
    # a split copy of the whole result would cost more memory traffic than the launches it saves
    x = ag.Tensor([4, 8], name="x")
    g = Graph.from_outputs({"a": ops.relu(ops.linear(x, _w(8, 8))), "b": ops.tanh(ops.linear(x, _w(8, 8)))})
    out = check_pass(fuse_parallel_gemms, g, exact=True)
    assert _kinds(out).count("gemm") == 2


def test_different_activations_or_non_constant_weights_do_not_pack():
    b, s, h, d = 1, 3, 1, 4
    x, y = ag.Tensor([b, s, d], name="x"), ag.Tensor([b, s, d], name="y")
    w = ag.Tensor([d, d], name="w")  # a weight given at run time
    q, k, v = ops.linear(x, _w(d, d)), ops.linear(y, _w(d, d)), ops.linear(x, w)
    out = check_pass(fuse_parallel_gemms, Graph.from_outputs({"o": _attention(q, k, v, b, s, h, d)}), exact=True)
    assert _kinds(out).count("gemm") == 3


def test_fusion_off_changes_nothing():
    b, s, h, d = 1, 3, 1, 4
    x = ag.Tensor([b, s, d], name="x")
    g = Graph.from_outputs({"o": _attention(*(ops.linear(x, _w(d, d)) for _ in range(3)), b, s, h, d)})
    assert str(fuse_parallel_gemms(g.copy(), compile_options(fusion=False))) == str(g)


@pytest.mark.parametrize("model", ZOO)
def test_zoo(model):
    g = run_pipeline(zoo_graph(model), compile_options(), PIPELINE[:PIPELINE.index(dedup) + 1])
    before = _kinds(g).count("gemm")
    out = check_pass(fuse_parallel_gemms, g, exact=False)
    layers = _kinds(out).count("attention")
    assert _kinds(out).count("gemm") == before - 2 * layers
