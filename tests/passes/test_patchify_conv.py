"""patchify_conv: a conv whose windows tile its input (stride == kernel, no padding, dilation 1,
groups 1) becomes reshape -> permute -> reshape -> GEMM, with the conv's bias and epilogue.

The GEMM sums the same products as the conv's oracle (im2col, then one GEMM) in another order, so
check_pass holds it to the float32 tolerance (rtol 1e-5, atol 1e-5 of the output's magnitude), not
bit for bit. Every other conv is left as it is.
"""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, Tensor
from aitgen.ir.op import OpKind
from aitgen.options import CompileOptions
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.fuse_conv_elementwise import fuse_conv_elementwise
from aitgen.passes.patchify_conv import patchify_conv
from pass_equivalence import check_pass, compare_outputs, run_oracle

RNG = np.random.default_rng(14)


def _c(*shape):
    return ag.constant((RNG.standard_normal(shape) * 0.3).astype(np.float32))


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def same_at_batches(before: Graph, after: Graph, batches=(1, 3)) -> None:
    """The oracle of both graphs agrees at each batch size (check_pass tries one, 2)."""
    for n in batches:
        shapes = {t.name: [n if not d.is_static else d.value for d in t.shape] for t in before.inputs}
        feeds = {k: RNG.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        compare_outputs(run_oracle(before, [feeds[t.name] for t in before.inputs]),
                        run_oracle(after, [feeds[t.name] for t in after.inputs]), exact=False, what=f"batch {n}")


def conv(x, out_ch, k, stride, bias=True, **kw):
    c = x.shape[3].value
    kh, kw_ = (k, k) if isinstance(k, int) else k
    return ops.conv2d(x, _c(out_ch, kh, kw_, c), _c(out_ch) if bias else None, stride=stride, **kw)


@pytest.mark.parametrize("shape, k", [((2, 32, 32, 3), 16), ((1, 24, 40, 5), 8), ((1, 12, 12, 4), (3, 4)),
                                      ((2, 8, 8, 2), (1, 8))])
def test_patch_conv_is_a_gemm(shape, k):
    stride = k if isinstance(k, tuple) else (k, k)
    x = Tensor(list(shape), name="x")
    g = check_pass(patchify_conv, Graph.from_outputs({"y": conv(x, 7, k, stride)}), exact=False)
    assert kinds(g) == ["reshape", "permute", "reshape", "reshape", "gemm"]
    gemm = g.ops[-1]
    assert gemm.attrs.trans_b and len(gemm.inputs) == 3  # patches, weight rows, bias
    assert tuple(g.outputs["y"].shape) == (shape[0], shape[1] // stride[0], shape[2] // stride[1], 7)


def test_dynamic_batch_and_no_bias():
    b = IntVar("batch", 1, 6)
    x = Tensor([b, 32, 32, 3], name="x")
    graph = Graph.from_outputs({"y": conv(x, 16, 8, 8, bias=False)})
    g = check_pass(patchify_conv, graph, exact=False)
    assert kinds(g)[-1] == "gemm" and len(g.ops[-1].inputs) == 2
    same_at_batches(graph, g, (1, 5, 6))


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_an_epilogue_the_conv_carries_moves_to_the_gemm(act):
    # fuse_conv_elementwise first: the conv holds bias + activation + residual; the GEMM takes them.
    b = IntVar("batch", 1, 4)
    x = Tensor([b, 32, 32, 3], name="x")
    res = Tensor([b, 2, 2, 8], name="res")
    y = getattr(ops, act)(conv(x, 8, 16, 16) + res)
    graph = Graph.from_outputs({"y": y})
    fused = fuse_conv_elementwise(graph.copy(), compile_options("cpu"))
    (c,) = [op for op in fused.ops if op.kind is OpKind.CONV2D]
    assert c.attrs.epilogue is not None
    g = check_pass(patchify_conv, fused, exact=False)
    (gemm,) = [op for op in g.ops if op.kind is OpKind.GEMM]
    # check_pass works on a copy: the same epilogue, reading the same tensors by name
    assert gemm.attrs.epilogue == c.attrs.epilogue
    assert [t.name for t in gemm.inputs[3:]] == [t.name for t in c.inputs[3:]] == ["res"]
    assert not any(op.kind is OpKind.CONV2D for op in g.ops)
    same_at_batches(graph, g)


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_pipeline_gives_the_gemm_the_epilogue(act):
    # In PIPELINE the rewrite comes first, so fuse_mm_elementwise hands the GEMM bias + activation.
    x = Tensor([IntVar("batch", 1, 4), 32, 32, 3], name="x")
    graph = Graph.from_outputs({"y": getattr(ops, act)(conv(x, 8, 16, 16))})
    g = check_pass(lambda gr, o: run_pipeline(gr, o, PIPELINE), graph, exact=False)
    (gemm,) = [op for op in g.ops if op.kind is OpKind.GEMM]
    assert gemm.attrs.epilogue is not None and act in str(gemm.attrs.epilogue)
    assert "conv2d" not in kinds(g) and kinds(g).count("permute") == 1, kinds(g)
    same_at_batches(graph, g)


@pytest.mark.parametrize("case", ["stride_not_kernel", "padding", "dilation", "groups", "one_by_one",
                                  "not_a_multiple", "dynamic_height"])
def test_other_convs_stay_convs(case):
    h = IntVar("h", 16, 32) if case == "dynamic_height" else (36 if case == "not_a_multiple" else 32)
    x = Tensor([1, h, 32, 4], name="x")
    kw = {}
    k, stride = 8, 8
    if case == "stride_not_kernel":
        stride = 4
    elif case == "padding":
        kw["padding"] = 1
    elif case == "dilation":
        kw["dilation"] = 2
    elif case == "groups":
        kw["groups"] = 2
    elif case == "one_by_one":
        k, stride = 1, 1
    w = _c(6, k, k, 4 // kw.get("groups", 1))
    y = ops.conv2d(x, w, _c(6), stride=stride, **kw)
    g = patchify_conv(Graph.from_outputs({"y": y}), compile_options("cpu"))
    assert kinds(g) == ["conv2d"]


def test_without_caps_nothing_changes():
    # CompileOptions() by hand has no capabilities: the pass cannot know the target has a GEMM.
    x = Tensor([1, 32, 32, 3], name="x")
    g = patchify_conv(Graph.from_outputs({"y": conv(x, 8, 16, 16)}), CompileOptions())
    assert kinds(g) == ["conv2d"]


def test_shared_weight_keeps_its_name_and_shape():
    # The weight rows are a view of the OHWI constant: set_constants still takes the OHWI array.
    x = Tensor([1, 32, 32, 3], name="x")
    w = _c(8, 16, 16, 3)
    w.name = "patch_weight"
    g = patchify_conv(Graph.from_outputs({"y": ops.conv2d(x, w, stride=16)}), compile_options("cpu"))
    (gemm,) = [op for op in g.ops if op.kind is OpKind.GEMM]
    rows = gemm.inputs[1]
    (weight,) = rows.producer.inputs
    assert rows.producer.kind is OpKind.RESHAPE and weight.is_constant and weight.name == "patch_weight"
    assert tuple(d.value for d in weight.shape) == (8, 16, 16, 3)
