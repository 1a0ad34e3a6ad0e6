"""ONNX NN and reduction converters against onnxruntime: the oracle, then ONE CPU build for all.

What the node-test conformance run does not exercise is here: constant weights (transposed at
import), dynamic batch dims through convs and pools, pads beyond half a window, Gemm's
alpha/beta/transposes with a constant B, legacy (opset < 13) softmax coercion, Resize with constant
scales/sizes, GQA attention with a past cache, rotary embeddings, losses with class weights and
ignore_index.
Tolerances: onnx_cases.py (float32 rtol 1e-5 / atol 1e-6; integers exact), except Resize cubic and
LRN / LpPool (pow), compared by the CPU check at the same tolerance as well.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases, ints, rand

from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox
from aitgen.ir.op import OpKind

I64 = np.int64
X4 = rand((2, 3, 7, 6), seed=1)
W = rand((4, 3, 3, 3), -1, 1, seed=2)
B = rand((4,), seed=3)


def _cases():
    n = ["N", 3, 7, 6]  # a dynamic batch
    cs = [
        case("conv_const_dyn", "Conv", [In("x", X4, dims=n), In("w", W, True), In("b", B, True)],
             {"pads": [1, 0, 2, 1], "strides": [2, 1]}, dim_bounds={"N": (1, 4)},
             sizes=[{"x": rand((3, 3, 7, 6), seed=9)}]),
        case("conv_same_lower", "Conv", [In("x", X4), In("w", W, True)], {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
        case("conv_depthwise", "Conv", [In("x", X4), In("w", rand((6, 1, 3, 3), seed=4), True)],
             {"group": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        case("conv1d", "Conv", [In("x", rand((2, 3, 9))), In("w", rand((5, 3, 3), seed=5), True)],
             {"pads": [2, 1], "dilations": [2]}),
        case("convT_out_shape", "ConvTranspose", [In("x", X4), In("w", rand((3, 2, 3, 3), seed=6), True)],
             {"strides": [2, 2], "output_shape": [15, 14]}),
        case("convT_group_pad", "ConvTranspose", [In("x", rand((1, 4, 5, 5))), In("w", rand((4, 1, 2, 2), seed=7), True),
                                                  In("b", rand((2,), seed=8), True)],
             {"group": 2, "strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 1]}),
        case("maxpool_dyn_ceil", "MaxPool", [In("x", X4, dims=n)], {"kernel_shape": [3, 2], "strides": [2, 2],
                                                                   "ceil_mode": 1, "pads": [1, 0, 1, 1]},
             dim_bounds={"N": (1, 4)}),
        case("maxpool_big_pads", "MaxPool", [In("x", X4)], {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2]}),
        case("avgpool_big_pads", "AveragePool", [In("x", X4)], {"kernel_shape": [3, 3], "pads": [2, 1, 2, 2]}),
        case("avgpool_incl", "AveragePool", [In("x", X4)], {"kernel_shape": [2, 3], "pads": [1, 1, 1, 1],
                                                           "count_include_pad": 1, "strides": [2, 1]}),
        case("lppool", "LpPool", [In("x", X4)], {"kernel_shape": [2, 2], "p": 3}),
        case("global_max", "GlobalMaxPool", [In("x", X4)]),
        case("global_avg_3d", "GlobalAveragePool", [In("x", rand((2, 3, 5)))]),
        case("gemm_all", "Gemm", [In("a", rand((5, 4))), In("b", rand((6, 5), seed=2), True), In("c", rand((4, 1), seed=3))],
             {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
        case("gemm_bias", "Gemm", [In("a", rand((3, 4))), In("b", rand((4, 5), seed=2)), In("c", rand((5,), seed=3), True)]),
        case("matmul_3d_2d", "MatMul", [In("a", rand((2, 3, 4))), In("b", rand((4, 5), seed=2), True)]),
        case("matmul_bcast", "MatMul", [In("a", rand((2, 1, 3, 4))), In("b", rand((5, 4, 2), seed=2))]),
        case("matmul_vec", "MatMul", [In("a", rand((4,))), In("b", rand((2, 4, 3), seed=2))]),
        case("einsum_bmm", "Einsum", [In("a", rand((2, 3, 4))), In("b", rand((2, 4, 5), seed=2))],
             {"equation": "bij,bjk->bik"}),
        case("einsum_ell", "Einsum", [In("a", rand((2, 3, 4))), In("b", rand((4, 5), seed=2))],
             {"equation": "...j,jk->...k"}, opset=13),
        case("einsum_sum", "Einsum", [In("a", rand((2, 3, 4)))], {"equation": "ijk->ki"}),
        case("softmax11", "Softmax", [In("x", X4)], {"axis": 1}, opset=11),
        case("logsoftmax11", "LogSoftmax", [In("x", X4)], {"axis": 2}, opset=11),
        case("hardmax", "Hardmax", [In("x", ints((3, 5), 0, 3).astype(np.float32))], {"axis": -1}),
        case("layernorm_bcast", "LayerNormalization", [In("x", X4), In("s", rand((1, 6), seed=2), True),
                                                       In("b", rand((6,), seed=3), True)], {"axis": -2}, n_out=3),
        case("batchnorm", "BatchNormalization", [In("x", X4), In("s", rand((3,), seed=2), True), In("b", B[:3], True),
                                                 In("m", rand((3,), seed=4), True), In("v", rand((3,), 0.5, 2, seed=5), True)],
             {"epsilon": 1e-3}),
        case("instancenorm", "InstanceNormalization", [In("x", X4), In("s", rand((3,), seed=2)), In("b", B[:3])]),
        case("groupnorm18", "GroupNormalization", [In("x", rand((2, 4, 3, 3))), In("s", rand((2,), seed=2), True),
                                                   In("b", rand((2,), seed=3), True)], {"num_groups": 2}, opset=18),
        case("lrn", "LRN", [In("x", X4)], {"size": 3, "alpha": 1e-2, "beta": 0.5, "bias": 2.0}),
        case("lpnorm", "LpNormalization", [In("x", X4)], {"axis": 1, "p": 1}),
        case("mvn", "MeanVarianceNormalization", [In("x", X4)], {"axes": [0, 2]}),
        case("resize_nearest", "Resize", [In("x", X4), In("roi", np.zeros(0, np.float32), True),
                                          In("sc", np.array([1, 1, 1.5, 0.5], np.float32), True)],
             {"mode": "nearest", "nearest_mode": "round_prefer_ceil", "coordinate_transformation_mode": "asymmetric"}),
        case("resize_linear_sizes", "Resize", [In("x", X4), None, None, In("sz", np.array([2, 3, 10, 4], I64), True)],
             {"mode": "linear"}, opset=13),
        case("resize_cubic_aa", "Resize", [In("x", X4), None, In("sc", np.array([1, 1, 0.5, 0.6], np.float32), True)],
             {"mode": "cubic", "antialias": 1}, opset=18),
        case("resize_int_nearest", "Resize", [In("x", ints((1, 2, 3, 3), dtype=np.int32)), None,
                                              In("sc", np.array([1, 1, 2, 2], np.float32), True)], opset=13),
        case("argmax_last", "ArgMax", [In("x", ints((3, 4, 5), 0, 3).astype(np.float32))],
             {"axis": 1, "keepdims": 0, "select_last_index": 1}),
        case("argmin_int", "ArgMin", [In("x", ints((3, 4), dtype=np.int32))], {"axis": -1}),
        # ties (values from a few integers) must come out lower index first, as onnxruntime orders them
        case("topk_dyn", "TopK", [In("x", ints((3, 4, 6), 0, 3).astype(np.float32), dims=["n", 4, 6]),
                                  In("k", np.array([3], I64), True)], {"axis": -1}, opset=11, n_out=2,
             dim_bounds={"n": (1, 5)}, sizes=[{"x": ints((5, 4, 6), 0, 3, seed=2).astype(np.float32)}]),
        case("topk_smallest", "TopK", [In("x", ints((5, 4), dtype=np.int32)), In("k", np.array([2], I64), True)],
             {"axis": 0, "largest": 0}, opset=11, n_out=2),
        case("topk_v1", "TopK", [In("x", rand((2, 7)))], {"k": 4}, opset=9, n_out=2),
        case("reduce_sum13", "ReduceSum", [In("x", X4), In("a", np.array([1, -1], I64), True)], {"keepdims": 0}, opset=13),
        case("reduce_l2_11", "ReduceL2", [In("x", X4)], {"axes": [2, 3]}, opset=11),
        case("reduce_lse", "ReduceLogSumExp", [In("x", X4 * 20), In("a", np.array([1], I64), True)], opset=18),
        case("reduce_prod", "ReduceProd", [In("x", rand((3, 4), 0.5, 1.5)), In("a", np.array([0], I64), True)], opset=18),
        case("reduce_max_bool", "ReduceMax", [In("x", ints((3, 4), 0, 2).astype(bool)), In("a", np.array([1], I64), True)],
             opset=20),
        case("reduce_min_noop", "ReduceMin", [In("x", X4), In("a", np.zeros(0, I64), True)],
             {"noop_with_empty_axes": 1}, opset=18),
        case("attention_gqa_past", "Attention",
             [In("q", rand((2, 4, 3, 8))), In("k", rand((2, 2, 3, 8), seed=2)), In("v", rand((2, 2, 3, 8), seed=3)),
              In("m", ints((3, 5), 0, 2).astype(bool)), In("pk", rand((2, 2, 2, 8), seed=4)), In("pv", rand((2, 2, 2, 8), seed=5))],
             {"is_causal": 1, "softcap": 2.0}, opset=23, n_out=3),
        case("attention_3d", "Attention",
             [In("q", rand((2, 3, 8))), In("k", rand((2, 5, 8), seed=2)), In("v", rand((2, 5, 4), seed=3))],
             {"q_num_heads": 2, "kv_num_heads": 2, "scale": 0.3}, opset=23),
        case("rotary_interleaved", "RotaryEmbedding",
             [In("x", rand((2, 3, 4, 8))), In("c", rand((6, 3), seed=2)), In("s", rand((6, 3), seed=3)),
              In("p", np.array([[0, 1, 2, 3], [5, 4, 3, 2]], I64))],
             {"interleaved": 1, "rotary_embedding_dim": 6}, opset=23),
        case("nll_weight_ignore", "NegativeLogLikelihoodLoss",
             [In("x", rand((3, 4, 2))), In("t", np.array([[0, 3], [1, 1], [2, 0]], I64)), In("w", rand((4,), 0.5, 1, seed=2), True)],
             {"ignore_index": 1}, opset=13),
        case("sce_none", "SoftmaxCrossEntropyLoss", [In("x", rand((3, 5))), In("t", np.array([4, 0, 2], I64))],
             {"reduction": "none"}, opset=13, n_out=2),
    ]
    return cs


def test_nn_converters_match_onnxruntime(tmp_path):
    check_cases(_cases(), tmp_path / "nn")


def test_conv_weights_are_transposed_at_import():
    c = case("conv", "Conv", [In("x", X4), In("w", W, True)])
    _, outs = ox.load(c.model)
    conv = outs["y"].producer.inputs[0].producer
    assert conv.kind is OpKind.CONV2D and conv.inputs[1].is_constant
    np.testing.assert_array_equal(conv.inputs[1].value, W.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("op,inputs,attrs,err,match", [
    ("Conv", [In("x", rand((1, 1, 3, 3, 3, 3))), In("w", rand((1, 1, 2, 2, 2, 2)), True)], {}, UnsupportedOpError,
     "4-D spatial"),
    ("Resize", [In("x", X4, dims=["N", 3, 7, 6]), None, In("sc", np.array([2, 1, 2, 2], np.float32))], {},
     UnsupportedOpError, "resized dims must be static"),
    ("AveragePool", [In("x", X4)], {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "ceil_mode": 1},
     UnsupportedOpError, "ceil_mode"),
    ("Einsum", [In("a", rand((3, 3)), dims=["N", 3])], {"equation": "ii->i"}, UnsupportedOpError,
     "static, equal sizes"),
    ("LRN", [In("x", X4)], {}, ImportError_, "size"),
])
def test_typed_errors(op, inputs, attrs, err, match):
    c = case(op, op, inputs, attrs, opset=13)
    with pytest.raises(err, match=match):
        ox.load(c.model)


def test_einsum_diagonals_match_onnxruntime(tmp_path):
    """A letter repeated in one operand takes the diagonal first: 'ii->i', the trace 'ii', a
    batched diagonal, a diagonal then a contraction, a letter three times. Tolerance: F32 (rtol
    1e-5, atol 1e-6), onnxruntime as the peer."""
    cs = [case(f"ein_{k}", "Einsum", ins, {"equation": eq}, opset=13) for k, (eq, ins) in enumerate([
        ("ii->i", [In("a", rand((4, 4), seed=1))]),
        ("ii", [In("a", rand((4, 4), seed=2))]),
        ("...ii->...i", [In("a", rand((2, 3, 3), seed=3))]),
        ("iij,jk->ik", [In("a", rand((3, 3, 5), seed=4)), In("b", rand((5, 2), seed=5))]),
        ("iji->j", [In("a", rand((3, 4, 3), seed=6))]),
        ("iii->i", [In("a", rand((3, 3, 3), seed=7))]),
    ])]
    check_cases(cs, tmp_path / "einsum_diag")
