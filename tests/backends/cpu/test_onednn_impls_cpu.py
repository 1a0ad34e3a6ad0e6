"""Which oneDNN implementation each GEMM/conv primitive got, and the check that none is oneDNN's
reference kernel (runtime/kernel_report.py, backends/cpu/src/onednn_kernels.cpp).

Every CPU build records the implementation of each primitive its kernels create (report.json's
onednn_impls / reference_kernels after compile_model's run at the smallest shapes, and
Model.kernel_report for the shapes run since); the zoo tests (test_zoo_cpu.py, the ONNX and
torch.export import tests) assert through cpu_cases.assert_no_reference_kernels that none is a
reference one. Here: the records agree with what ONEDNN_VERBOSE prints in a fresh process, the
names are classified right, and a reference kernel is reported and warned about naming the op
(faked: no shape the tests build reaches one on the machines they run on).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import warnings

import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import ReferenceKernelWarning
from aitgen.runtime import kernel_report
from cpu_cases import Seeded, assert_no_reference_kernels

S = Seeded(1415)
ROOT = pathlib.Path(__file__).resolve().parents[3]


def projection():
    x = ag.Tensor([4, 16], "float32", name="x")
    return ops.gemm(x, S.const((16, 8)), S.const((8,)), name="proj")


_RUN = """
import sys, numpy as np, aitgen as ag
m = ag.Model.load(sys.argv[1])
m.run({n: np.ones(s.max_shape, s.dtype.np) for n, s in m.input_specs.items()})
"""


def test_report_agrees_with_onednn_verbose(tmp_path, monkeypatch):
    # Ground truth from oneDNN itself: every primitive executed in a fresh process, as its verbose
    # mode names it, is in the report, and none is a reference kernel. Without AVX-512 the float32
    # linear layers would run oneDNN's packed sgemm, which prints no verbose lines: the switch keeps
    # them primitives here (test_packed_sgemm.py checks the packed ones' report names).
    monkeypatch.setenv("AITGEN_PACKED_SGEMM", "0")
    inputs, outputs = ag.models.get("vit_b16", image_size=32, patch=8, layers=1, hidden=32, heads=2, mlp=64,
                                    num_classes=10)
    ag.compile_model(outputs, target="cpu", workdir=tmp_path, load=False)
    report = assert_no_reference_kernels(tmp_path)
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    execs = [line.split(",") for line in out.splitlines() if line.startswith("onednn_verbose,exec,cpu,")]
    seen = {(f[3], f[4]) for f in execs if f[3] != "reorder"}  # (primitive, implementation)
    assert seen, out[-2000:]
    assert seen <= {(r["primitive"], r["impl"]) for r in report["onednn_primitives"]}
    assert not any(kernel_report.is_reference(impl) for _, impl in seen), seen


@pytest.mark.parametrize("impl, ref", [("ref:any", True), ("gemm:ref", True), ("conv:any+ref:any", True),
                                       ("ref_int8:any", True), ("brgconv:avx512_core", False),
                                       ("brg:avx512_core", False), ("x64:gemm:jit", False), ("gemm:jit:f32", False),
                                       ("conv:any+jit:avx512_core", False), ("jit:uni", False)])
def test_reference_implementation_names(impl, ref):
    assert kernel_report.is_reference(impl) is ref


def test_parse_skips_a_line_cut_short():
    text = "k_1\tmatmul\tbrg:avx512_core\t4x8:8x2:4x2\t3\nk_2/1\tmatmul\tref:any\t1x2:2x2:1x2\t1\nk_3\tconv"
    recs = kernel_report.parse(text, {"k_2": ["group"]})
    assert [(r.kernel, r.reference, r.ops, r.shapes) for r in recs] == [
        ("k_1", False, (), 3), ("k_2/1", True, ("group (member 1)",), 1)]


def test_a_reference_kernel_is_reported_and_warned(tmp_path, monkeypatch):
    # The library's records plus one reference record for its GEMM kernel: compile_model's check
    # writes it to report.json and warns naming the op; a later Model warns again (once).
    real = kernel_report.ImplWatch.records

    def with_ref(self):
        recs = real(self)
        return recs + [kernel_report.ImplRecord(r.kernel, r.primitive, "ref:any", r.shape, 1, r.ops) for r in recs]

    monkeypatch.setattr(kernel_report.ImplWatch, "records", with_ref)
    y = projection()
    with pytest.warns(ReferenceKernelWarning, match=r"'ref:any' for the matmul .*\(op proj;"):
        ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, load=False)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(r["primitive"], r["impl"], r["ops"]) for r in report["reference_kernels"]] == [
        ("matmul", "ref:any", ["proj"])]
    assert " | " in next(iter(report["onednn_impls"].values()))  # both implementations of the one kernel
    model = ag.Model.load(tmp_path)
    feeds = {"x": S.rand((4, 16))}
    with pytest.warns(ReferenceKernelWarning):
        model.run(feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.run(feeds)  # warned once per Model
    assert len(model.kernel_report()["reference_kernels"]) == 1


def test_no_check_without_check_kernels(tmp_path):
    ag.compile_model({"y": projection()}, target="cpu", workdir=tmp_path, load=False,
                     check_kernels=False)
    report = json.loads((tmp_path / "report.json").read_text())
    assert "onednn_impls" not in report and "kernel_check" not in report
