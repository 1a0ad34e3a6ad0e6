"""The new dtypes (float64, int16, unsigned, float8) through the CUDA backend's own kernels,
compile-only: element-wise, casts to float8, reductions, scans and copies build with nvcc for
sm_90a. None of these kernels includes CUTLASS, so its include dir is stubbed when the pinned
wheel is absent; GEMM/conv of these dtypes are refused with UnsupportedOpError (no CUTLASS
instantiation: float8 GEMM on sm_90a is not written yet).
"""
from __future__ import annotations

import shutil
import types

import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import UnsupportedOpError
from aitgen.ir.dtype import DType

DTYPES = ["float64", "int16", "uint8", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2fnuz"]


@pytest.fixture
def no_cutlass_needed(monkeypatch):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    from aitgen.codegen import locate
    try:
        locate.cutlass()
    except Exception:  # noqa: BLE001 - the pinned wheel is absent: these kernels do not need it
        monkeypatch.setattr(locate, "cutlass", lambda: types.SimpleNamespace(include_dirs=[]))


@pytest.mark.cuda_compile  # an nvcc build of ~60 kernels: minutes on 2 cores
def test_own_kernels_of_new_dtypes_compile_for_sm90a(no_cutlass_needed, tmp_path):
    outs = {}
    for dt in DTYPES:
        x = ag.Tensor([4, 64], dtype=dt, name=f"x_{dt}")
        y = ag.Tensor([4, 64], dtype=dt, name=f"y_{dt}")
        outs.update({f"{dt}_add": ops.add(x, y), f"{dt}_max": ops.reduce_max(x, 1), f"{dt}_sum": ops.reduce_sum(x, 0),
                     f"{dt}_cumsum": ops.cumsum(x, 1), f"{dt}_cat": ops.concat([x, y], 0)})
        if DType(dt).is_float:
            outs.update({f"{dt}_mean": ops.reduce_mean(x, 1), f"{dt}_exp": ops.sigmoid(ops.exp(x)),
                         f"{dt}_fp8": ops.cast(x, "float8_e4m3fnuz")})
        else:
            outs.update({f"{dt}_and": ops.bitwise_and(x, y), f"{dt}_shl": ops.shift_left(x, y)})
    ag.compile_model(outs, target="cuda", arch="sm_90a", workdir=str(tmp_path), load=False)


def test_gemm_of_new_dtypes_is_refused_on_cuda(no_cutlass_needed, tmp_path):
    a = ag.Tensor([8, 8], dtype="float64", name="a")
    with pytest.raises(UnsupportedOpError, match="float64"):
        ag.compile_model({"y": ops.matmul(a, a)}, target="cuda", arch="sm_90a", workdir=str(tmp_path), load=False)
