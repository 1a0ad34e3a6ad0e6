"""DFT and STFT (ops_signal.py: one GEMM with a constant DFT matrix) against onnx's numpy reference
(numpy.fft underneath) and onnxruntime, in ONE CPU build.

Covers: real and complex input, dft_length padding and truncating, onesided, inverse, the inverse
of a onesided spectrum (irfft) of even and odd length, the opset-17 axis attribute and the
opset-20 axis input, an inner axis of a 4-D input; STFT with a constant window, a run-time window,
no window, a complex signal, a dynamic batch; MelWeightMatrix (an import-time constant) in float32
and float16. Tolerance: rtol 1e-4 / atol 1e-4 (a float32 GEMM
sums n products where an FFT sums log n; inputs are in [-3, 3], lengths <= 40).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox

TOL = dict(rtol=1e-4, atol=1e-4)
I64 = np.int64


def _dft(name, x, attrs, length=None, axis=None, opset=20, **kw):  # kw: case()'s
    ins = [In("x", x), In("len", np.array(length, I64), True) if length is not None else None]
    if opset >= 20 and axis is not None:
        ins.append(In("axis", np.array(axis, I64), True))
    if ins[-1] is None:
        ins.pop()
    return case(name, "DFT", ins, attrs, opset=opset, **kw)


def _mel(name, bins, dft_len, rate, lo, hi, attrs, **kw):
    """An import-time value: the case checks the oracle's constant against the references."""
    vals = [np.array(bins, I64), np.array(dft_len, I64), np.array(rate, I64), np.array(lo, np.float32),
            np.array(hi, np.float32)]
    return case(name, "MelWeightMatrix", [In(f"i{k}", v, True) for k, v in enumerate(vals)], attrs, opset=17, **kw)


def _cases():
    real, cplx = rand((2, 12, 1), seed=1), rand((2, 12, 2), seed=2)
    x4 = rand((2, 5, 7, 2), seed=3)
    spec = rand((2, 7, 3, 2), seed=4)  # a onesided spectrum along axis 1
    sig, sig_c = rand((2, 40, 1), seed=5), rand((1, 30, 2), seed=6)
    win = np.hanning(10).astype(np.float32)
    return [
        _dft("dft_real", real, {}),
        _dft("dft_complex_pad", cplx, {}, length=16),
        _dft("dft_real_cut_onesided", real, {"onesided": 1}, length=9),
        _dft("dft_inverse", cplx, {"inverse": 1}),
        _dft("dft_irfft_even", spec, {"inverse": 1, "onesided": 1}, axis=1),
        _dft("dft_irfft_odd", spec, {"inverse": 1, "onesided": 1}, length=13, axis=1),
        _dft("dft_axis_inner", x4, {}, axis=2),
        _dft("dft17_axis_attr", x4, {"axis": 1, "inverse": 1}, opset=17),
        case("stft_const_window", "STFT", [In("s", sig, dims=["B", 40, 1]), In("step", np.array(4, I64), True),
                                           In("w", win, True)],
             dim_bounds={"B": (1, 3)}, sizes=[{"s": rand((3, 40, 1), seed=7)}]),
        case("stft_runtime_window", "STFT", [In("s", sig), In("step", np.array(3, I64), True), In("w", win)]),
        case("stft_frame_length", "STFT", [In("s", sig), In("step", np.array(5, I64), True), None,
                                           In("fl", np.array(8, I64), True)]),
        _mel("mel_f32", 10, 64, 16000, 20.0, 7000.0, {}),
        _mel("mel_f16_narrow", 4, 32, 8000, 300.0, 1200.0, {"output_datatype": 10}, ort=False),  # no f16 kernel there
        case("stft_complex_twosided", "STFT", [In("s", sig_c), In("step", np.array(7, I64), True), None,
                                               In("fl", np.array(9, I64), True)], {"onesided": 0}),
    ]


def test_dft_and_stft_match_numpy_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_cases(), tmp_path / "signal", TOL)


def test_dft_is_one_gemm():
    from aitgen.ir.graph import topo_order
    from aitgen.ir.op import OpKind
    _, outs = ox.load(_cases()[0].model)
    kinds = [op.kind for op in topo_order(outs.values())[0]]
    assert kinds.count(OpKind.GEMM) == 1


@pytest.mark.parametrize("name,make,err,match", [
    ("last_axis", lambda: _dft("d", rand((1, 4, 2)), {}, axis=-1, infer=False), ImportError_, "last"),
    ("onesided_complex", lambda: _dft("d", rand((1, 4, 2)), {"onesided": 1}, infer=False), ImportError_, "real input"),
    ("bad_complex_dim", lambda: _dft("d", rand((1, 4, 3)), {}, infer=False), ImportError_, "1 \\(real\\) or 2"),
    # a run-time dft_length works over static dims (test_import_runtime_sizes.py), not over dynamic ones
    ("runtime_length", lambda: case("d", "DFT", [In("x", rand((1, 4, 1)), dims=["N", 4, 1]), In("len", np.array(4, I64))],
                                    opset=20, infer=False), UnsupportedOpError, "needs static input dims"),
    ("too_big", lambda: _dft("d", rand((1, 4, 1)), {}, length=1 << 22, infer=False), UnsupportedOpError, "no FFT kernel"),
    ("mel_edge", lambda: _mel("m", 4, 8, 100, 10.0, 400.0, {}), ImportError_, "spectrogram bins"),
    ("stft_frame", lambda: case("s", "STFT", [In("s", rand((1, 8, 1))), In("st", np.array(1, I64), True), None,
                                              In("fl", np.array(9, I64), True)], infer=False), ImportError_, "frame_length"),
])
def test_typed_errors(name, make, err, match):
    c = make()
    op = c.model.graph.node[0].op_type
    with pytest.raises(err, match=match) as e:
        ox.load(c.model)
    assert f"({op}, opset " in str(e.value)
