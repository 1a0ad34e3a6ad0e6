"""A GEMM whose source is a strided view (K of a packed QKV projection, split along the features) is
gathered into dense scratch where oneDNN would otherwise leave its brgemm kernel for its gemm-based
one (make_matmul's stage_src, backends/cpu/src/onednn_kernels.cpp): oneDNN 3.2 gives such a source
gemm:jit (bf16 on AMX: 0.34 ms against brgemm's 0.08 for 128x768x768; float32 1.608 -> 1.472 ms for
three of them). Numbers against numpy (float32 rtol/atol 1e-5, bfloat16 1.6e-2, x max|reference|),
and the strided products get the kind of implementation (gemm-based or not) the same product gets
on a dense source in the same build, on whatever ISA the machine has."""
from __future__ import annotations

import json

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from cpu_cases import TOL, Seeded, check

S = Seeded(2323)
M, K = 64, 128


def _kind(impl: str) -> str:
    return "gemm-based" if impl.startswith("gemm:") else "other"


@pytest.mark.parametrize("precision", [None, "bfloat16"])
def test_strided_source_gets_the_dense_kernel(tmp_path, precision):
    x = ag.Tensor([M, K], "float32", name="x")
    w1 = S.const((K, 3 * K), scale=0.1)
    w2 = S.const((K, K), scale=0.1)
    w3 = S.const((K, K), scale=0.1)
    w4 = S.const((K, K), scale=0.1)
    qkv = ops.gemm(x, w1, name="qkv")
    _, k, v = ops.split(qkv, 3, axis=1)
    # proj_k and proj_v read K and V at row stride 3K; proj_x runs the same product shape on a dense
    # source (proj_k's result: after it, so no horizontal fusion puts the two in one kernel)
    y_k = ops.gemm(k, w2, name="proj_k")
    y_v = ops.relu(ops.gemm(v, w3, name="proj_v"))
    y_x = ops.gemm(y_k, w4, name="proj_x")
    m = ag.compile_model({"y_k": y_k, "y_v": y_v, "y_x": y_x}, target="cpu", workdir=tmp_path, precision=precision)
    xv = S.rand((M, K))
    got = m.run({"x": xv})
    h = xv @ w1.value
    want = {"y_k": h[:, K:2 * K] @ w2.value, "y_v": np.maximum(h[:, 2 * K:] @ w3.value, 0), "y_x": (h[:, K:2 * K] @ w2.value) @ w4.value}
    check(got, {k_: v_.astype(np.float32) for k_, v_ in want.items()}, TOL[precision or "float32"])
    # a second call reuses the entries (and the gathered scratch) and gives the same bits
    again = m.run({"x": xv})
    for name in want:
        np.testing.assert_array_equal(again[name], got[name])

    report = m.kernel_report()["onednn_impls"]
    kernels = {k_["op"]: k_["func"] for k_ in json.loads((tmp_path / "report.json").read_text())["kernels"]}
    impl = {op: [v_ for key, v_ in report.items() if key.split("/")[0] == kernels[op]] for op in ("proj_k", "proj_v", "proj_x")}
    dense = {_kind(i) for i in impl["proj_x"]}
    assert len(dense) == 1, impl
    for op in ("proj_k", "proj_v"):
        assert {_kind(i) for i in impl[op]} == dense, (op, impl)
