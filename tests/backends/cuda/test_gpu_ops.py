"""GPU tier: every op kind with a CUDA lowering, in float32, float16 and bfloat16, built for the
present GPU and compared with the oracle (op_catalogue.py holds the cases). One build per
(dtype, fusion) holds every case, so the tier costs six builds, not hundreds.

Tolerances, as max |got - want| <= rtol * |want| + atol * max(1, max |want|):
  float32   1e-4 / 1e-4   float32 compute throughout; accumulation order differs from numpy
  float16   1e-2 / 1e-2   the oracle rounds each op's result to float16 (ulp 2^-10), the kernels
                          compute in float32 and round once: at most a couple of ulps apart
  bfloat16  4e-2 / 4e-2   likewise with bfloat16's ulp 2^-7
Integer and bool results (comparisons, argmax, casts to int, bitwise ops) must be equal.

The default tier checks, without a GPU, that the catalogue covers every kind with a CUDA lowering.
"""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen.codegen.lower import supported_kinds
from op_catalogue import CASES, build_all, case_kinds

DTYPES = ["float32", "float16", "bfloat16"]
TOL = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (4e-2, 4e-2)}
BY_NAME = {c.name: c for c in CASES}


def test_catalogue_covers_every_cuda_lowering():
    covered = set().union(*(case_kinds(c) for c in CASES))
    missing = supported_kinds("cuda") - covered - {ag.OpKind.RESHAPE}
    assert not missing, f"op kinds with a CUDA lowering but no GPU test case: {sorted(k.value for k in missing)}"


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(np.float32), want.astype(np.float32)
    finite = np.isfinite(w)
    scale = max(float(np.max(np.abs(w[finite]), initial=0.0)), 1.0)
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale, equal_nan=True, err_msg=what)


@pytest.fixture(scope="module")
def results(tmp_path_factory, gpu_arch):
    """(dtype, fusion) -> (case -> output names, got, want), built and run once each."""
    done = {}

    def get(dtype: str, fusion: bool):
        key = (dtype, fusion)
        if key not in done:
            try:
                done[key] = _build_and_run(tmp_path_factory, gpu_arch, dtype, fusion)
            except pytest.skip.Exception as e:  # prebuild mode (conftest.py): built once, every case skips
                done[key] = e
            except Exception as e:  # kept: the other cases of this build fail at once, not rebuild
                done[key] = e
        if isinstance(done[key], pytest.skip.Exception):
            pytest.skip(str(done[key]))
        if isinstance(done[key], Exception):
            raise AssertionError(f"the {dtype} build (fusion={fusion}) of every case failed: "
                                 f"{type(done[key]).__name__}: {done[key]}") from done[key]
        return done[key]
    return get


def _build_and_run(tmp_path_factory, gpu_arch: str, dtype: str, fusion: bool):
    outs, feeds, owners = build_all(dtype, fusion, supported_kinds("cuda"))
    work = tmp_path_factory.mktemp(f"ops_{dtype}_{int(fusion)}")
    model = ag.compile_model(outs, target="cuda", arch=gpu_arch, workdir=work, fusion=fusion)
    try:
        got = model.run(feeds)
    finally:
        model.close()   # a run that raises must still release the device memory
    return owners, got, ag.reference.run(outs, feeds)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(BY_NAME))
def test_op_matches_oracle(results, case, dtype):
    c = BY_NAME[case]
    if not c.per_float_dtype and dtype != "float32":
        pytest.skip("integer/bool math: checked once, in the float32 build")
    owners, got, want = results(dtype, c.fusion)
    if case not in owners:
        missing = case_kinds(c) - supported_kinds("cuda")
        pytest.skip(f"needs kinds with no CUDA lowering: {sorted(k.value for k in missing)}")
    for name in owners[case]:
        assert_matches(got[name], want[name], dtype, name)
