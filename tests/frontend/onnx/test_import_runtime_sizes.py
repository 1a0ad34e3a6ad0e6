"""Size operands fed as run-time data (issue 15): AffineGrid's size, MaxUnpool's output_shape,
DFT's axis, Col2Im's image and block shapes, STFT's frame step and length, MelWeightMatrix's
scalars. One CPU build holds every case; each case runs with two or more value sets on that one
build (most give different output shapes), against onnxruntime and the oracle; bad values are
RuntimeInputErrors naming the node, and the model stays usable for the next run.

Tolerances: rtol 1e-5 / atol 1e-6 (onnx_cases.F32) where the computation is the same
arithmetic as onnxruntime's; TOL below where it is not (DFT/STFT: a dense matrix product against
onnxruntime's FFT, float32 sums of up to 16 terms of magnitude ~3).
"""
from __future__ import annotations

import numpy as np
import pytest

import value_sets  # noqa: I001 - tests/frontend/onnx
from onnx_cases import F32, In, ort_run


R = np.random.default_rng(11)


def i64(*v):
    return np.array(v, np.int64)


def S(v):
    return np.array(v, np.int64)


def f32(shape):
    return R.standard_normal(shape).astype(np.float32)


THETA2, THETA3 = f32((2, 2, 3)), f32((2, 3, 4))

# name -> (op, inputs, attrs, opset, [value sets]); each value set replaces the first set's arrays.
CASES = {
    "affine2d": ("AffineGrid", [In("t", THETA2), In("s", i64(2, 3, 5, 6))], {}, 20,
                 [{}, {"s": i64(2, 1, 1, 4)}, {"s": i64(2, 7, 3, 1)}]),
    # align_corners with a spatial size of 1 is left out: onnxruntime gives +1 there, onnx's
    # reference -1 and torch 0 (aitgen follows torch, as its constant-size path does)
    "affine2d_ac": ("AffineGrid", [In("t", THETA2), In("s", i64(2, 3, 5, 6))], {"align_corners": 1}, 20,
                    [{}, {"s": i64(2, 1, 2, 4)}]),
    "affine3d": ("AffineGrid", [In("t", THETA3), In("s", i64(2, 3, 4, 5, 6))], {}, 20,
                 [{}, {"s": i64(2, 1, 2, 1, 3)}]),
    "affine3d_ac": ("AffineGrid", [In("t", THETA3), In("s", i64(2, 3, 4, 5, 6))], {"align_corners": 1}, 20,
                    [{}, {"s": i64(2, 1, 2, 3, 2)}]),
    "unpool": ("MaxUnpool", [In("x", np.array([[[[5, 6], [7, 8]]]], np.float32)),
                             In("i", np.array([[[[5, 7], [13, 15]]]], np.int64)), In("o", i64(1, 1, 5, 5))],
               {"kernel_shape": [2, 2], "strides": [2, 2]}, 22, [{}, {"o": i64(1, 1, 4, 4)}, {"o": i64(1, 2, 4, 6)}]),
    "dft": ("DFT", [In("x", f32((2, 3, 4, 1))), None, In("a", i64(1))], {}, 20,
            [{}, {"a": i64(-2)}, {"a": i64(0)}]),
    "dft_inv": ("DFT", [In("x", f32((2, 3, 4, 2))), None, In("a", i64(2))], {"inverse": 1}, 20,
                [{}, {"a": i64(-3)}]),
    "rfft": ("DFT", [In("x", f32((1, 6, 5, 1))), None, In("a", i64(1))], {"onesided": 1}, 20,
             [{}, {"a": i64(2)}, {"a": i64(0)}]),
    "irfft": ("DFT", [In("x", f32((1, 4, 3, 2))), None, In("a", i64(1))], {"inverse": 1, "onesided": 1}, 20,
              [{}, {"a": i64(-2)}]),
    "dft_len": ("DFT", [In("x", f32((2, 5, 1))), In("n", i64(4)), In("a", i64(1))], {}, 20,
                [{}, {"n": i64(8)}, {"a": i64(0), "n": i64(3)}]),
    "dft_len_c": ("DFT", [In("x", f32((2, 5, 1))), In("n", i64(8), const=True), In("a", i64(1))], {"inverse": 1}, 20,
                  [{}, {"a": i64(0)}]),
    "rfft_len": ("DFT", [In("x", f32((3, 5, 1))), In("n", i64(6)), In("a", i64(1))], {"onesided": 1}, 20,
                 [{}, {"n": i64(3)}, {"a": i64(0), "n": i64(2)}]),
    "col2im": ("Col2Im", [In("x", f32((2, 4, 6))), In("i", i64(3, 4)), In("b", i64(2, 2))], {}, 18,
               [{}, {"i": i64(4, 3)}, {"i": i64(2, 7)}, {"i": i64(6, 4), "b": i64(1, 4)}]),
    "col2im_attrs": ("Col2Im", [In("x", f32((1, 8, 4))), In("i", i64(3, 3)), In("b", i64(2, 2))],
                     {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 0, 1]}, 18,
                     [{}, {"i": i64(4, 3)}, {"i": i64(2, 5)}]),
    "col2im_1d": ("Col2Im", [In("x", f32((1, 3, 4))), In("i", i64(6)), In("b", i64(3))], {}, 18,
                  [{}, {"i": i64(4), "b": i64(1)}]),
    "col2im_3d": ("Col2Im", [In("x", f32((1, 2, 6))), In("i", i64(2, 3, 2)), In("b", i64(1, 1, 2))], {}, 18,
                  [{}, {"i": i64(1, 1, 7)}]),
    "stft": ("STFT", [In("s", f32((1, 32, 1))), In("st", S(4)), None, In("fl", S(8))], {}, 17,
             [{}, {"st": S(3)}, {"fl": S(6), "st": S(5)}]),
    "stft_win": ("STFT", [In("s", f32((2, 20, 1))), In("st", S(3)), In("w", f32((6,)))], {}, 17, [{}, {"st": S(7)}]),
    "stft_c": ("STFT", [In("s", f32((1, 16, 2))), In("st", S(4)), None, In("fl", S(8))], {"onesided": 0}, 17,
               [{}, {"fl": S(5)}]),
    "mel": ("MelWeightMatrix", [In("b", np.array(8, np.int32)), In("d", np.array(16, np.int32)),
                                In("r", np.array(8192, np.int32)), In("lo", np.array(0.0, np.float32)),
                                In("hi", np.array(4096.0, np.float32))], {}, 17,
            [{}, {"b": np.array(5, np.int32), "d": np.array(32, np.int32)},
             {"lo": np.array(100.0, np.float32), "hi": np.array(3000.0, np.float32), "d": np.array(64, np.int32)}]),
}
TOL = {k: dict(rtol=1e-4, atol=1e-5) for k in ("dft", "dft_inv", "rfft", "irfft", "dft_len", "dft_len_c", "rfft_len",
                                               "stft", "stft_win", "stft_c")}
# onnxruntime scatters MaxUnpool's indices into output_shape's own layout, where onnx's node test
# (test_maxunpool_export_with_output_shape) and reference pad the inferred output: these cases are
# compared with onnx's reference evaluator
ONNX_REFERENCE = {"unpool"}


def expected(name, model, feeds):
    if name in ONNX_REFERENCE:
        from onnx.reference import ReferenceEvaluator
        sess = ReferenceEvaluator(model)
        return dict(zip(sess.output_names, sess.run(None, feeds)))
    return ort_run(model, feeds)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One CPU model over every case: (model, {case: (outputs, model proto, value sets)})."""
    m, table = value_sets.build(CASES, tmp_path_factory.mktemp("rts") / "m")
    yield m, table
    m.close()


def _close(got, want, what, tol):
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), err_msg=what, **tol)


@pytest.mark.parametrize("name", list(CASES))
def test_against_oracle_and_onnxruntime(built, name):
    m, table = built
    tol = TOL.get(name, F32)
    shapes = value_sets.check_value_sets(m, table, name, lambda model, feeds: expected(name, model, feeds),
                                         lambda got, want, what: _close(got, want, what, tol))
    # one build, the shapes of each run's values (DFT's axis keeps the shape: x is square there)
    assert len(shapes) == (1 if name in SAME_SHAPE else len(table[name][2])), shapes


SAME_SHAPE = {"dft", "dft_inv"}

BAD = [("affine2d", {"s": i64(3, 3, 5, 6)}, r"AffineGrid.*size 0 is 3, where the graph has 2"),
       ("affine2d", {"s": i64(2, 3, 5000, 6000)}, r"AffineGrid.*outside its bounds"),
       ("unpool", {"o": i64(1, 1, 3, 5)}, r"MaxUnpool.*size 2 .*is 3, outside its bounds \[4, "),
       ("col2im", {"i": i64(3, 5)}, r"Col2Im.*cannot (infer|reshape)"),
       ("col2im", {"b": i64(3, 2)}, r"Col2Im.*size 0 .*is 0, outside its bounds \[1, 4\]"),
       ("col2im", {"b": i64(0, 2)}, r"Col2Im.*size 0 .*is 0, outside its bounds \[1, 4\]"),
       ("col2im", {"i": i64(1, 4)}, r"Col2Im.*size 0 .*is -1, (negative|outside its bounds)"),
       ("stft", {"st": S(0)}, r"STFT.*size 0 .*is 0, outside its bounds \[1, "),
       ("stft", {"fl": S(40)}, r"STFT.*size 1 .*is 40, outside its bounds \[1, 32\]"),
       ("mel", {"hi": np.array(8000.0, np.float32)}, r"MelWeightMatrix.*size 0 .*is -4, (negative|outside its bounds)"),
       ("mel", {"b": np.array(0, np.int32)}, r"MelWeightMatrix.*size 0 .*is 0, outside its bounds \[1, "),
       ("mel", {"lo": np.array(5000.0, np.float32)}, r"MelWeightMatrix.*size 3 .*is 0, outside its bounds \[1, 1\]"),
       ("dft", {"a": i64(3)}, r"DFT.*size 0 .*is 3, outside its bounds \[0, 2\]"),
       ("dft", {"a": i64(-5)}, r"DFT.*size 0 .*is -1, (negative|outside its bounds)")]


@pytest.mark.parametrize("name,bad,msg", BAD, ids=[f"{b[0]}-{j}" for j, b in enumerate(BAD)])
def test_bad_values_are_typed_errors_naming_the_node(built, name, bad, msg):
    m, table = built
    value_sets.check_refused(m, table, name, bad, msg, usable_after=table[name][2])
