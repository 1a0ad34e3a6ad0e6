"""A concat whose computed parts the memory plan placed in its output: their producers (a GEMM, a
conv, an element-wise group, an attention, an inner concat) write the slices, contiguous or at the
output's strides, and the concat's kernel copies only the rest. Against the oracle (float32: rtol
1e-5, atol 1e-5 x max|ref|; float16 2e-3).
"""
import json

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops

_rng = np.random.default_rng(4)


def const(shape, dtype="float32", scale=0.3):
    return ag.constant((_rng.standard_normal(shape) * scale).astype(ag.DType[dtype].np))


def rand(shape, dtype="float32"):
    return _rng.standard_normal(shape).astype(ag.DType[dtype].np)


def check(got, want, tol=1e-5):
    for k in want:
        g, w = got[k].astype(np.float32), want[k].astype(np.float32)
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=k)


def test_producers_write_their_slices(tmp_path):
    img = ag.Tensor([1, 8, 8, 3], name="img")
    x = ag.Tensor([1, 5, 16], name="x")
    # a conv (padded: a patchify conv, stride == kernel, would be a GEMM, patchify_conv)
    patches = ops.reshape(ops.conv2d(img, const((16, 3, 3, 3)), const(16), stride=4, padding=1), [1, 4, 16])
    proj = ops.linear(x, const((16, 16)), const(16))                                              # a GEMM
    act = ops.gelu(x) * 2.0                                                                        # element-wise
    q = ops.reshape(x, [1, 5, 2, 8])
    att = ops.reshape(ops.scaled_dot_product_attention(ops.permute(q, [0, 2, 1, 3]), ops.permute(q, [0, 2, 1, 3]),
                                                       ops.permute(q, [0, 2, 1, 3])), [1, 10, 8])
    att = ops.reshape(att, [1, 5, 16])
    inner = ops.concat([proj, act], axis=1)                                                        # nested
    tokens = ops.concat([const((1, 1, 16)), patches, inner, att], axis=1)                          # [1, 20, 16]
    outs = {"y": ops.layernorm(tokens + const((1, 20, 16)))}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    copies = [k for k in report["kernels"] if "strided_copy" in k["template"]]
    assert len(copies) == 1, copies  # the class token only
    feeds = {"img": _rng.standard_normal((1, 8, 8, 3)).astype(np.float32),
             "x": _rng.standard_normal((1, 5, 16)).astype(np.float32)}
    check(model.run(feeds), ag.reference.run(outs, feeds))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_channel_concat_parts_written_at_strides(tmp_path, dtype):
    # A channel concat (NHWC): the parts interleave, pixel by pixel. A conv (bias + relu, its
    # oneDNN result staged and copied into place), GEMMs (post-ops; an epilogue loop that oneDNN's
    # post-ops cannot express; an empty reduction), a member of a grouped element-wise op and a
    # broadcast copy each write their channels of the output, so the concat launches nothing.
    # float16 also takes oneDNN's float32 scratch on the way (32 channels: 64-byte aligned slices).
    ch = 16 if dtype == "float32" else 32
    n, k = ag.IntVar("n", 1, 3), ag.IntVar("k", 0, 4)
    img = ag.Tensor([n, 5, 5, ch], dtype, name="img")
    z, wz = ag.Tensor([n, 5, 5, k], dtype, name="z"), ag.Tensor([k, ch], dtype, name="wz")
    row = ag.Tensor([n, 5, 5, 1], dtype, name="row")
    c = lambda *s: const(s, dtype)  # noqa: E731
    parts = [
        ops.relu(ops.conv2d(img, c(ch, 3, 3, ch), c(ch), padding=1)),       # conv + epilogue
        ops.linear(img, c(ch, ch), c(ch)),                                  # GEMM, bias
        ops.sigmoid(ops.linear(img, c(ch, ch))) * row,                      # GEMM, epilogue loop
        ops.gemm(z, wz, c(ch), layout="rrr"),                               # k = 0: the bias alone
        ops.tanh(img) * 2.0,                                                # grouped with `side`
        ops.expand(c(1, 1, 1, ch), [n, 5, 5, ch]),                          # a broadcast copy
    ]
    side = ops.exp(ops.reshape(img, [n, 25 * ch]))
    y = ops.concat(parts, axis=3)                                           # [n, 5, 5, 6 * ch]
    outs = {"y": ops.conv2d(y, c(4, 1, 1, 6 * ch)), "side": side}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert not any(k["op"].startswith("concat") for k in report["kernels"]), report["kernels"]
    tol = 1e-5 if dtype == "float32" else 2e-3
    for size, kk in ((1, 0), (3, 4)):
        feeds = {"img": rand((size, 5, 5, ch), dtype), "z": rand((size, 5, 5, kk), dtype),
                 "wz": rand((kk, ch), dtype), "row": rand((size, 5, 5, 1), dtype)}
        check(model.run(feeds), ag.reference.run(outs, feeds), tol)


def test_vit_tokens_with_a_batch(tmp_path):
    # [B, 1, H] class tokens + [B, 16, H] patches: inner-axis slices once B > 1. The patch embedding
    # (a GEMM after patchify_conv) writes its patches at the tokens' strides (its [B, 4, 4, H] result
    # seen as [B, 16, H]: batches of 16 rows), the class token's broadcast copy writes its rows: the
    # concat launches nothing.
    batch = ag.IntVar("batch", 1, 4)
    inputs, outputs = ag.models.get("vit_b16", batch=batch, image_size=32, patch=8, layers=1, hidden=32,
                                    heads=2, mlp=64, num_classes=10)
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / "m")
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert not any(k["op"].startswith("tokens") for k in report["kernels"]), report["kernels"]
    for b in (1, 3):
        feeds = {"x": rand((b, 32, 32, 3))}
        check(model.run(feeds), ag.reference.run(outputs, feeds))
