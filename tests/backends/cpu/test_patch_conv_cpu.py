"""ViT's patch conv on the CPU: patchify_conv turns a conv whose windows tile its input into a copy
(the patches) and a GEMM (oneDNN's matmul) with the conv's epilogue. The build equals the oracle at
rtol/atol 1e-4 of the output's magnitude (oneDNN sums in another order than numpy's BLAS; 768-long
reductions), and its GEMM gets no oneDNN reference kernel (report.json, Model.kernel_report).
"""
from __future__ import annotations

import json
import pathlib

import pytest

import aitgen as ag
from aitgen import ops
from cpu_cases import Seeded, assert_no_reference_kernels, check

S = Seeded(1414)
TOL = 1e-4


def templates(workdir) -> list[str]:
    report = json.loads((pathlib.Path(workdir) / "report.json").read_text())
    return [pathlib.Path(k["template"]).name for k in report["kernels"]]


def patch_conv(batch, size, cin, cout, k, act=None):
    x = ag.Tensor([batch, size, size, cin], "float32", name="x")
    y = ops.conv2d(x, S.const((cout, k, k, cin)), S.const((cout,)), stride=k)
    return getattr(ops, act)(y) if act else y


@pytest.mark.parametrize("act", ["gelu", "relu", None])
def test_patch_conv_with_dynamic_batch_and_epilogue(tmp_path, act):
    y = patch_conv(ag.IntVar("batch", 1, 4), 32, 3, 24, 8, act)
    model = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path)
    assert templates(tmp_path) == ["strided_copy.cpp.j2", "gemm_onednn.cpp.j2"]  # the epilogue is in the GEMM
    for n in (1, 3, 4):
        feeds = {"x": S.rand((n, 32, 32, 3))}
        check(model.run(feeds), ag.reference.run({"y": y}, feeds), TOL)
    report = assert_no_reference_kernels(tmp_path, model)
    assert [r["primitive"] for r in report["onednn_primitives"]] == ["matmul"]


def test_vit_b16_patch_conv_full_size(tmp_path):
    # ViT-B/16's patch embedding alone: [1, 224, 224, 3] -> 768 channels, kernel 16, stride 16.
    y = patch_conv(1, 224, 3, 768, 16)
    model = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path)
    feeds = {"x": S.rand((1, 224, 224, 3))}
    check(model.run(feeds), ag.reference.run({"y": y}, feeds), TOL)
    report = assert_no_reference_kernels(tmp_path, model)
    (prim,) = report["onednn_primitives"]
    assert prim["primitive"] == "matmul" and prim["shape"] == "196x768:768x768:196x768", prim


def test_other_convs_stay_convs(tmp_path):
    x = ag.Tensor([2, 16, 16, 3], "float32", name="x")
    y = ops.relu(ops.conv2d(x, S.const((8, 3, 3, 3)), S.const((8,)), stride=2, padding=1))
    model = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path)
    assert templates(tmp_path) == ["conv_onednn.cpp.j2"]
    feeds = {"x": S.rand((2, 16, 16, 3))}
    check(model.run(feeds), ag.reference.run({"y": y}, feeds), TOL)
    report = assert_no_reference_kernels(tmp_path, model)
    assert [r["primitive"] for r in report["onednn_primitives"]] == ["convolution"]


@pytest.mark.parametrize("act", ["sigmoid", "relu"])
def test_patches_written_into_the_tokens_with_a_batch(tmp_path, act):
    # ViT's tokens with a batch: the patch GEMM writes batches of 16 rows at the tokens' strides
    # (a batched matmul, gemm.py _batched_rows) with its epilogue: a residual and a per-channel
    # scale as binary post-ops around sigmoid, or all of it in the loop (relu); no concat copy.
    b = ag.IntVar("batch", 1, 4)
    x = ag.Tensor([b, 32, 32, 3], "float32", name="x")
    res = ag.Tensor([b, 4, 4, 16], "float32", name="res")
    p = ops.conv2d(x, S.const((16, 8, 8, 3)), S.const((16,)), stride=8)
    p = getattr(ops, act)(p + res) * S.const((16,))
    cls = ops.expand(S.const((1, 1, 16)), [b, 1, 16])
    tokens = ops.concat([cls, ops.reshape(p, [b, 16, 16])], axis=1, name="tokens")
    y = ops.layernorm(tokens, S.const((16,)), S.const((16,)))
    model = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert not any(k["op"].startswith("tokens") for k in report["kernels"]), report["kernels"]
    (gemm,) = [k for k in report["kernels"] if "gemm" in k["template"]]
    for n in (1, 3):
        feeds = {"x": S.rand((n, 32, 32, 3)), "res": S.rand((n, 4, 4, 16))}
        check(model.run(feeds), ag.reference.run({"y": y}, feeds), TOL)
    report = assert_no_reference_kernels(tmp_path, model)
    shapes = [r["shape"] for r in report["onednn_primitives"] if r["kernel"] == gemm["func"]]
    assert shapes and all(s.count("x") == 6 for s in shapes), shapes  # rank 3: [batch, 16, K] x [1, K, 16]
