"""A concat whose computed parts the memory plan placed in its output: their producers (a GEMM, a
conv, an element-wise group, an attention, an inner concat) write the slices, and the concat's
kernel copies only the rest. Against the oracle (float32: rtol 1e-5, atol 1e-5 x max|ref|).
"""
import json

import numpy as np

import aitgen as ag
from aitgen import ops

_rng = np.random.default_rng(4)


def const(shape, scale=0.3):
    return ag.constant((_rng.standard_normal(shape) * scale).astype(np.float32))


def check(got, want):
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * scale, err_msg=k)


def test_producers_write_their_slices(tmp_path):
    img = ag.Tensor([1, 8, 8, 3], name="img")
    x = ag.Tensor([1, 5, 16], name="x")
    patches = ops.reshape(ops.conv2d(img, const((16, 4, 4, 3)), const(16), stride=4), [1, 4, 16])  # a conv
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
