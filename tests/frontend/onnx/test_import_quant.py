"""Quantization converters (ops_quant.py over aitgen/ops/quant.py), sub-byte Cast and BitCast
against onnx's numpy reference (onnx.reference) and onnxruntime, in ONE CPU build.

QuantizeLinear: exact ties of x / scale (round half to even), values past the range (saturation),
per-tensor, per-axis and blocked scales (a block that does not divide the axis), int8/uint8/int16,
int4/uint4 and float8 with saturate on and off, float16 x. DequantizeLinear: the same layouts, int32
x, float16 scale. DynamicQuantizeLinear: mixed signs, all positive, all zero. MatMulInteger and
QLinearMatMul: per-row / per-column zero points and scales, a batch. ConvInteger and QLinearConv:
a window of 360 products of 255 x 255 (past float32's exact range as one sum: the converter splits
it), padding, strides, per-channel weight scales, a bias. Cast: float32 to the sub-byte types over
ties, NaN, infinities and out-of-range values. BitCast: float32/int32, float64/int64.

Tolerance: integer outputs exactly; float outputs rtol 1e-6, atol 0 (dequantization is one
subtraction and one multiplication in float32, as the reference computes it). onnxruntime is not
asked where its kernel does not follow the spec or does not exist (Case.ort=False, said per case).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.codegen.kernels.cpu.gemm import cpu_flags
from aitgen.errors import UnsupportedOpError
from aitgen.frontend import onnx as ox

# onnxruntime's uint8 x int8 integer GEMM on a CPU without VNNI (AVX2's vpmaddubsw) adds pairs of
# products in int16 with saturation, so it is off where a pair overflows; with AVX512-VNNI or
# AVX-VNNI it is exact. Its answer is compared only where it is exact (onnx.reference always is).
ORT_U8S8_EXACT = bool({"avx512_vnni", "avx_vnni"} & cpu_flags())

TOL = dict(rtol=1e-6, atol=0.0)
F32 = np.float32


def _x_with_ties(shape, scale, seed):
    """Values whose x / scale hits k + 0.5 exactly (ties), plus random ones past the int8 range."""
    rng = np.random.default_rng(seed)
    k = rng.integers(-300, 300, shape).astype(F32)
    x = (k + F32(0.5)) * F32(scale)
    x.flat[::3] = rng.uniform(-400, 400, x.size)[::3].astype(F32)
    return x


def _quantize_cases():
    x = _x_with_ties((2, 3, 7), 0.5, 1)
    s_axis = np.array([0.5, 0.25, 2.0], F32)
    s_block = np.array([0.5, 1.0, 2.0, 0.25, 4.0, 1.0] * 2, F32).reshape(2, 3, 2)  # blocks of 4 over 7
    cs = [
        case("q_u8", "QuantizeLinear", [In("x", x), In("s", np.array(0.5, F32)), In("z", np.array(128, np.uint8))],
             opset=21),
        case("q_i8_axis", "QuantizeLinear", [In("x", x), In("s", s_axis), In("z", np.array([0, -3, 5], np.int8))],
             {"axis": 1}, opset=21),
        case("q_i16", "QuantizeLinear", [In("x", x * F32(200)), In("s", np.array(0.5, F32)),
                                         In("z", np.array(-7, np.int16))], opset=21),
        case("q_default_u8", "QuantizeLinear", [In("x", x), In("s", np.array(2.0, F32))], opset=21),
        case("q_f16", "QuantizeLinear", [In("x", x.astype(np.float16)), In("s", np.array(0.5, np.float16)),
                                         In("z", np.array(3, np.int8))], opset=21),
        case("q_e4m3_sat", "QuantizeLinear", [In("x", x * F32(10)), In("s", np.array(0.5, F32)),
                                              In("z", np.zeros(1, ml_dtypes.float8_e4m3fn), True)], opset=21,
             ort=False),  # onnxruntime's Python API hands float8 back as raw uint8
        case("q_e4m3_nosat", "QuantizeLinear", [In("x", x * F32(10)), In("s", np.array(0.5, F32)),
                                                In("z", np.zeros(1, ml_dtypes.float8_e4m3fn), True)],
             {"saturate": 0}, opset=21, ort=False),
    ]
    # Blocked int4/uint4 (onnxruntime's CPU kernel refuses blocked QuantizeLinear: not asked)
    for dt in (ml_dtypes.int4, ml_dtypes.uint4):
        z = np.array([1, 0, 2, 3, 0, 1, 4, 2, 0, 0, 1, 5]).reshape(2, 3, 2).astype(dt)
        cs.append(case(f"q_blocked_{dt.__name__}", "QuantizeLinear",
                       [In("x", _x_with_ties((2, 3, 7), 0.25, 2) / F32(40)),
                        In("s", s_block / F32(8)), In("z", z)],
                       {"axis": 2, "block_size": 4}, opset=21, ort=False))
    return cs


def _dequantize_cases():
    rng = np.random.default_rng(3)
    q = rng.integers(0, 256, (2, 3, 5)).astype(np.uint8)
    q4 = rng.integers(-8, 8, (4, 5)).astype(ml_dtypes.int4)
    return [
        case("dq_u8_axis", "DequantizeLinear", [In("x", q), In("s", np.array([0.5, 0.1, 3.0], F32)),
                                                In("z", np.array([128, 0, 255], np.uint8))], {"axis": 1}, opset=21),
        case("dq_i32", "DequantizeLinear", [In("x", rng.integers(-2**20, 2**20, (6,)).astype(np.int32)),
                                            In("s", np.array(0.125, F32))], opset=21),
        case("dq_f16_scale", "DequantizeLinear", [In("x", q.astype(np.int8)), In("s", np.array(0.3, np.float16)),
                                                  In("z", np.array(-5, np.int8))], opset=21),
        case("dq_int4_blocked", "DequantizeLinear",
             [In("x", q4), In("s", np.array([[0.5, 2.0], [1.0, 0.25], [3.0, 1.0], [0.5, 0.5]], F32)),
              In("z", np.array([[1, -2], [0, 3], [-8, 7], [2, 2]]).astype(ml_dtypes.int4))],
             {"axis": 1, "block_size": 3}, opset=21, ort=False),  # blocked: no onnxruntime CPU kernel
        case("dq_e5m2", "DequantizeLinear", [In("x", rand((7,), -100, 100, seed=4).astype(ml_dtypes.float8_e5m2)),
                                             In("s", np.array(2.0, F32))], opset=21,
             ort=False),  # onnxruntime's Python API takes no ml_dtypes feeds
    ]


def _dynamic_cases():
    cs = [case(f"dyn_{n}", "DynamicQuantizeLinear", [In("x", v)], opset=11, n_out=3) for n, v in [
        ("mixed", rand((3, 5), -3, 2, seed=5)), ("positive", rand((4,), 1, 4, seed=6))]]
    # all zeros: onnx's reference takes a range of 1 (scale 1/255), onnxruntime a scale of 1; the
    # reference decides
    return cs + [case("dyn_zeros", "DynamicQuantizeLinear", [In("x", np.zeros((2, 2), F32))], opset=11, n_out=3,
                      ort=False)]


def _matmul_cases():
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (2, 4, 6)).astype(np.uint8)
    b = rng.integers(-128, 128, (6, 5)).astype(np.int8)
    a8 = rng.integers(-128, 128, (4, 6)).astype(np.int8)
    return [
        # per-column b_zero_point (onnx's reference and onnxruntime take no per-row a_zero_point)
        case("mmi_cols", "MatMulInteger", [In("a", a[0]), In("b", b), In("az", np.array(60, np.uint8)),
                                           In("bz", np.array([0, -1, 2, 127, -128], np.int8))], opset=10,
             ort=ORT_U8S8_EXACT),
        case("mmi_batch", "MatMulInteger", [In("a", a), In("b", b), In("az", np.array(255, np.uint8))], opset=10,
             ort=ORT_U8S8_EXACT),
        case("qlmm_u8", "QLinearMatMul", [In("a", a[1]), In("as", np.array(0.02, F32)), In("az", np.array(120, np.uint8)),
                                          In("b", (b.astype(np.int16) + 128).astype(np.uint8)),
                                          In("bs", np.array(0.01, F32)), In("bz", np.array(130, np.uint8)),
                                          In("ys", np.array(0.05, F32)), In("yz", np.array(100, np.uint8))], opset=21),
        case("qlmm_i8_batch", "QLinearMatMul", [In("a", a8), In("as", np.array(0.03, F32)), In("az", np.array(-3, np.int8)),
                                                In("b", b), In("bs", np.array(0.02, F32)), In("bz", np.array(4, np.int8)),
                                                In("ys", np.array(0.01, F32)), In("yz", np.array(-10, np.int8))], opset=21),
    ]


def _conv_cases():
    rng = np.random.default_rng(8)
    # 40 channels x 3x3 = 360 products per output, each up to 255 * 255: the sum passes 2^24
    x = np.where(rng.random((1, 40, 6, 6)) < 0.8, 255, rng.integers(0, 256, (1, 40, 6, 6))).astype(np.uint8)
    w = np.where(rng.random((3, 40, 3, 3)) < 0.8, 255, rng.integers(0, 256, (3, 40, 3, 3))).astype(np.uint8)
    xs = rng.integers(0, 256, (1, 4, 7, 7)).astype(np.uint8)
    ws = rng.integers(-127, 128, (6, 2, 3, 3)).astype(np.int8)
    return [
        case("convi_big_window", "ConvInteger", [In("x", x), In("w", w)], opset=10),
        case("convi_zp_pad", "ConvInteger", [In("x", xs), In("w", (ws.astype(np.int16) + 128).astype(np.uint8)),
                                             In("xz", np.array(17, np.uint8)), In("wz", np.array(128, np.uint8))],
             {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 2}, opset=10),
        case("qlconv_per_channel", "QLinearConv",
             [In("x", xs), In("xs", np.array(0.02, F32)), In("xz", np.array(100, np.uint8)), In("w", ws),
              In("ws", rng.uniform(0.001, 0.01, 6).astype(F32)), In("wz", np.zeros(6, np.int8)),
              In("ys", np.array(0.03, F32)), In("yz", np.array(110, np.uint8)),
              In("b", rng.integers(-5000, 5000, 6).astype(np.int32))],
             {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 2}, opset=10, ort=ORT_U8S8_EXACT),
    ]


def _cast_bitcast_cases():
    v = np.concatenate([np.arange(-10, 11, dtype=F32) / F32(2), np.array([np.nan, np.inf, -np.inf, 1e9, 0.25,
                                                                          0.75, 2.5, 5.0, -0.0], F32)])
    cs = []
    # onnxruntime 1.32 saturates float -> int4/int2 where onnx's reference (ml_dtypes) gives 0 out
    # of range: the reference decides, onnxruntime is not asked
    for to in (TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2, TensorProto.FLOAT4E2M1):
        cs.append(case(f"cast_{TensorProto.DataType.Name(to)}", "Cast", [In("x", v)], {"to": to}, opset=25, ort=False))
    b = np.array([1.0, -2.5, np.inf, np.nan, 3e-39], F32)
    cs += [case("bitcast_f32_i32", "BitCast", [In("x", b)], {"to": TensorProto.INT32}, opset=26, ort=False),
           case("bitcast_i64_f64", "BitCast", [In("x", np.array([1, -1, 2**62], np.int64))],
                {"to": TensorProto.DOUBLE}, opset=26, ort=False)]  # BitCast: no onnxruntime 1.32 kernel
    return cs


def test_quantization_matches_numpy_reference_and_onnxruntime(tmp_path):
    cases = _quantize_cases() + _dequantize_cases() + _dynamic_cases() + _matmul_cases() + _conv_cases()
    check_cases_ref(cases + _cast_bitcast_cases(), tmp_path / "quant", TOL)


def test_quantize_ops_are_named_for_folding():
    """Issue 14 folds Q/DQ pairs by these names: the composites must keep them."""
    c = case("q", "QuantizeLinear", [In("x", rand((2, 3))), In("s", np.array(0.5, F32)),
                                     In("z", np.array(3, np.int8))], opset=21)
    _, outs = ox.load(c.model)
    from aitgen.ir.graph import topo_order
    names = [op.name for op in topo_order(outs.values())[0]]
    assert names and all(n.startswith("quantize_linear:") for n in names), names
    assert any(n.endswith("/round") for n in names) and any(n.endswith("/saturate") for n in names)


@pytest.mark.parametrize("name,make,match", [
    ("convi_window", lambda: case("c", "ConvInteger", [In("x", np.zeros((1, 1, 20, 20), np.uint8)),
                                                       In("w", np.zeros((1, 1, 17, 17), np.uint8))], opset=10),
     "exceeds"),
    ("mmi_int32", lambda: case("m", "MatMulInteger", [In("a", np.zeros((2, 2), np.int32)),
                                                      In("b", np.zeros((2, 2), np.int32))], opset=10, infer=False),
     "8- and 16-bit"),
    ("bitcast_f16", lambda: case("b", "BitCast", [In("x", np.zeros(2, np.float16))], {"to": TensorProto.INT16},
                                 opset=26), "float16 is not supported"),
])
def test_typed_refusals(name, make, match):
    c = make()
    with pytest.raises(UnsupportedOpError, match=match) as e:
        ox.load(c.model)
    assert f"({c.model.graph.node[0].op_type}, opset " in str(e.value)
