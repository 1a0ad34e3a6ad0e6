"""match_norms: layer norm and RMS norm written out op by op (ONNX below opset 17) become one op.
Not a pure rewrite: the norm kernel's reference sums in its own order; held to check_pass's
rtol 1e-5 (atol 1e-5 of the output's magnitude)."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, Tensor
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.match_norms import match_norms
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph

RNG = np.random.default_rng(11)
E = 16


def _c(*shape):
    return ag.constant(RNG.uniform(0.5, 1.5, size=shape).astype(np.float32))


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _run(y, **extra) -> Graph:
    return check_pass(match_norms, Graph.from_outputs({"y": y, **extra}), exact=False)


def _onnx_layernorm(x, w=None, b=None, eps=1e-5, axes=(-1,), square="pow", inv="div"):
    m = ops.reduce_mean(x, axes=list(axes), keepdims=True)
    d = x - m
    sq = ops.pow(d, 2.0) if square == "pow" else d * d
    v = ops.reduce_mean(sq, axes=list(axes), keepdims=True)
    e = v + ag.constant(np.float32(eps))
    if inv == "div":
        n = d / ops.sqrt(e)
    elif inv == "rsqrt":
        n = ops.rsqrt(e) * d
    else:
        n = d * ops.reciprocal(ops.sqrt(e))
    if w is not None:
        n = n * w
    if b is not None:
        n = b + n
    return n


@pytest.mark.parametrize("square, inv", [("pow", "div"), ("mul", "rsqrt"), ("pow", "reciprocal")])
def test_layernorm_spellings(square, inv):
    x = Tensor([2, 5, E], name="x")
    g = _run(_onnx_layernorm(x, _c(E), _c(E), square=square, inv=inv))
    assert kinds(g) == ["layernorm"]
    assert len(g.ops[0].inputs) == 3 and g.ops[0].attrs.eps == pytest.approx(1e-5)


def test_broadcast_affine_two_axes_and_dynamic_rows():
    s = IntVar("s", 1, 8)
    x = Tensor([2, s, 4, 4], name="x")
    w = ag.constant(RNG.uniform(size=(1, 1, 4, 4)).astype(np.float32))
    g = _run(_onnx_layernorm(x, w, _c(1), axes=(2, 3)))  # a scalar bias broadcast over the features
    (ln,) = g.ops if kinds(g) == ["layernorm"] else [None]
    assert ln is not None and ln.attrs.num_axes == 2 and tuple(ln.inputs[1].shape) == (4, 4)


def test_without_affine_and_with_bias_only():
    x = Tensor([3, E], name="x")
    assert kinds(_run(_onnx_layernorm(x))) == ["layernorm"]
    assert kinds(_run(_onnx_layernorm(x, b=_c(E)))) == ["layernorm"]


def test_rmsnorm():
    x = Tensor([2, 3, E], name="x")
    v = ops.reduce_mean(x * x, axes=[-1], keepdims=True)
    y = x * ops.rsqrt(v + ag.constant(np.float32(1e-6))) * _c(E)
    g = _run(y)
    assert kinds(g) == ["rmsnorm"] and len(g.ops[0].inputs) == 2


@pytest.mark.parametrize("x_is_output", [False, True])
def test_rmsnorm_of_a_residual_stream_read_elsewhere(x_is_output):
    """LLaMA/T5 as exported: h = a + b feeds the norm's square and scale and the next residual add
    (and may be a graph output); the norm is matched, h is computed once and read by both."""
    a, b, r = Tensor([2, 3, E], name="a"), Tensor([2, 3, E], name="b"), Tensor([2, 3, E], name="r")
    h = a + b
    v = ops.reduce_mean(ops.pow(h, 2.0), axes=[-1], keepdims=True)
    n = h * ops.reciprocal(ops.sqrt(v + ag.constant(np.float32(1e-6))))
    y = _c(E) * n
    g = _run(y, z=h + r, **({"h": h} if x_is_output else {}))
    assert sorted(kinds(g)) == ["add", "add", "rmsnorm"]
    (norm,) = [op for op in g.ops if op.kind.value == "rmsnorm"]
    assert norm.inputs[0].producer.kind.value == "add" and len(norm.inputs) == 2


@pytest.mark.parametrize("case", ["mean_over_middle", "mean_axes_differ", "d_read_elsewhere", "tensor_eps",
                                  "cube", "per_row_weight"])
def test_look_alikes_stay(case):
    x = Tensor([2, 5, E], name="x")
    extra = {}
    if case == "mean_over_middle":
        y = _onnx_layernorm(x, axes=(1,))
    elif case == "mean_axes_differ":  # not a layer norm of x, but an RMS norm of d (exact too)
        m = ops.reduce_mean(x, axes=[1, 2], keepdims=True)
        d = x - m
        y = d / ops.sqrt(ops.reduce_mean(d * d, axes=[2], keepdims=True) + ag.constant(np.float32(1e-5)))
        assert kinds(_run(y)) == ["reduce_mean", "sub", "rmsnorm"]
        return
    elif case == "d_read_elsewhere":  # d = x - mean is computed anyway: an RMS norm of d (exact too)
        d = x - ops.reduce_mean(x, axes=[-1], keepdims=True)
        y = d / ops.sqrt(ops.reduce_mean(d * d, axes=[-1], keepdims=True) + ag.constant(np.float32(1e-5)))
        assert kinds(_run(y, d=d)) == ["reduce_mean", "sub", "rmsnorm"]
        return
    elif case == "tensor_eps":
        d = x - ops.reduce_mean(x, axes=[-1], keepdims=True)
        y = d / ops.sqrt(ops.reduce_mean(d * d, axes=[-1], keepdims=True) + ag.constant(RNG.uniform(1e-5, 1e-3, size=(2, 5, 1)).astype(np.float32)))
    elif case == "cube":
        d = x - ops.reduce_mean(x, axes=[-1], keepdims=True)
        y = d / ops.sqrt(ops.reduce_mean(ops.pow(d, 3.0), axes=[-1], keepdims=True) + ag.constant(np.float32(1.0)))
    else:  # a weight that varies per row: the norm is still matched, the multiply stays
        y = _onnx_layernorm(x, w=ag.constant(RNG.uniform(size=(2, 5, 1)).astype(np.float32)))
        g = _run(y)
        assert kinds(g) == ["layernorm", "mul"] and len(g.ops[0].inputs) == 1
        return
    g = _run(y, **extra)
    assert "layernorm" not in kinds(g) and "rmsnorm" not in kinds(g)


def test_residual_add_is_taken_in_by_the_norm_after_the_pipeline():
    x, r = Tensor([2, 5, E], name="x"), Tensor([2, 5, E], name="r")
    y = _onnx_layernorm(x + r, _c(E), _c(E))
    g = check_pass(lambda g, o: run_pipeline(g, o), Graph.from_outputs({"y": y}), exact=False)
    assert kinds(g) == ["layernorm"]


def test_zoo_unchanged():
    for name in ZOO:
        stop = PIPELINE.index(match_norms)
        g = run_pipeline(zoo_graph(name), compile_options(), PIPELINE[:stop])
        before = kinds(g)
        assert kinds(check_pass(match_norms, g, exact=True)) == before
