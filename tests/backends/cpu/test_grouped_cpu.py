"""Grouped kernels (group_ops) on the CPU against the oracle of the graph as written: grouped GEMMs
(epilogues and residuals per member), grouped layernorms/rmsnorms, grouped element-wise members
(flat, broadcast, views), dynamic dims, 16-bit types. One build per test; tolerances as in
test_gemm_conv.py (float32: rtol 1e-5, atol 1e-5 x max|ref|; float16 2e-3; bfloat16 1.6e-2).
"""
import json
import os
import sys

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import OpKind

sys.path.insert(0, os.path.dirname(__file__))
from cpu_cases import TOL, Seeded, check  # noqa: E402,F401

_data = Seeded(21)
const, rand = _data.const, _data.rand


def build(outs, tmp_path):
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    unfused = ag.compile_model(outs, target="cpu", workdir=tmp_path / "u", fusion=False)
    base = json.loads((tmp_path / "u" / "report.json").read_text())["num_kernels"]
    return model, unfused, report, base


def grouped_kinds(outs) -> list[tuple[str, int]]:
    g = ag.passes.optimize(outs, compile_options("cpu"))
    return sorted((op.attrs.kind.value, len(op.attrs.members)) for op in g.ops if op.kind is OpKind.GROUPED)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_towers_norms_and_elementwise(tmp_path, dtype):
    b = ag.IntVar("b", 1, 24)
    x = ag.Tensor([b, 3, 16], dtype, name="x")
    r = ag.Tensor([b, 3, 32], dtype, name="r")
    v = ag.Tensor([b, 1, 32], dtype, name="v")      # broadcast over the middle dim: a strided member
    outs = {}
    heads = []
    for i in range(3):  # three towers: [B, 3, 16] -> 32 (relu) -> 32 + residual
        h = ops.relu(ops.linear(x, const((32, 16), dtype), const(32, dtype)))
        heads.append(ops.linear(h, const((32, 32), dtype), const(32, dtype)) + r)
    outs["n0"] = ops.layernorm(heads[0], const(32, dtype), const(32, dtype))
    outs["n1"] = ops.layernorm(heads[1], const(32, dtype), const(32, dtype), eps=1e-3)
    outs["n2"] = ops.layernorm(ops.reshape(heads[2], [b, 96]), const(96, dtype), const(96, dtype))
    outs["e0"] = ops.gelu(outs["n0"]) * v
    outs["e1"] = ops.exp(outs["n1"] * -0.5)
    outs["e2"] = ops.tanh(outs["n2"]) + 1.0
    kinds = grouped_kinds(outs)
    assert ("gemm", 3) in kinds and ("layernorm", 3) in kinds and ("fused_elementwise", 3) in kinds, kinds
    model, unfused, report, base = build(outs, tmp_path)
    assert report["num_kernels"] == 4 and base > 20  # four launches: gemms, gemms, norms, element-wise
    for n in (1, 7, 24):
        feeds = {"x": rand((n, 3, 16), dtype), "r": rand((n, 3, 32), dtype), "v": rand((n, 1, 32), dtype)}
        want = ag.reference.run(outs, feeds)
        check(model.run(feeds), want, TOL[dtype])
        check(unfused.run(feeds), want, TOL[dtype])


def test_rmsnorms_and_16_bit_elementwise(tmp_path):
    x = ag.Tensor([5, 40], "float16", name="x")
    y = ag.Tensor([7, 2, 40], "float16", name="y")
    z = ag.Tensor([9000], "float16", name="z")   # more than one work item
    outs = {"a": ops.rmsnorm(x, const(40, "float16")), "b": ops.rmsnorm(y, const(40, "float16")),
            "c": ops.sigmoid(z), "d": ops.relu(ops.cast(x, "float32")), "e": ops.cast(z, "bfloat16")}
    kinds = grouped_kinds(outs)
    assert kinds == [("fused_elementwise", 3), ("rmsnorm", 2)], kinds
    model, unfused, report, base = build(outs, tmp_path)
    assert report["num_kernels"] == 2 and base == 6  # unfused: cast and relu are two
    feeds = {"x": rand((5, 40), "float16"), "y": rand((7, 2, 40), "float16"), "z": rand(9000, "float16")}
    want = ag.reference.run(outs, feeds)
    check(model.run(feeds), want, TOL["float16"])
