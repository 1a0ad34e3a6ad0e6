"""GEMMs and element-wise kernels reading strided views of their operands (fuse_memory_ops): a
class-token slice, a transposed A, a packed GEMM's split parts, permuted/sliced/broadcast
element-wise operands, dynamic dims and 16-bit types, against the oracle of the graph as written.
Tolerances as in test_gemm_conv.py (float32: rtol 1e-5, atol 1e-5 x max|ref|; float16 2e-3;
bfloat16 1.6e-2).
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

_data = Seeded(31)
const, rand = _data.const, _data.rand


def viewed(outs) -> int:
    g = ag.passes.optimize(outs, compile_options("cpu"))
    ops_ = [m for op in g.ops for m in (ag.ops.grouped.member_ops(op) if op.kind is OpKind.GROUPED else [op])]
    return sum(1 for op in ops_ if getattr(op.attrs, "operand_views", None))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gemm_rows_through_views(tmp_path, dtype):
    b = ag.IntVar("b", 1, 6)
    h = ag.Tensor([b, 9, 16], dtype, name="h")
    x = ag.Tensor([b, 16], dtype, name="x")
    hn = ops.layernorm(h)
    cls = ops.reshape(ops.slice(hn, [0], [1], axes=[1]), [b, 16])            # rows 9*16 apart
    mid = ops.reshape(ops.slice(hn, [4], [5], axes=[1]), [b, 16])            # ... from element 64
    z = ag.Tensor([2, 8], dtype, name="z")
    zt = ops.permute(ops.layernorm(z), [1, 0])                               # [8, 2]: rows of stride 1
    outs = {
        "cls": ops.tanh(ops.linear(cls, const((8, 16), dtype), const(8, dtype))),
        "mid": ops.linear(mid, const((8, 16), dtype)),
        "trans": ops.linear(zt, const((3, 2), dtype), const(3, dtype)),
        # two towers on one input: one packed GEMM, the second layers read its columns
        "t1": ops.linear(ops.linear(x, const((12, 16), dtype), const(12, dtype)), const((4, 12), dtype), const(4, dtype)),
        "t2": ops.linear(ops.linear(x, const((20, 16), dtype), const(20, dtype)), const((4, 20), dtype), const(4, dtype)),
    }
    assert viewed(outs) >= 4
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    templates = [k["template"] for k in json.loads((tmp_path / "m" / "report.json").read_text())["kernels"]]
    assert not any("strided_copy" in t for t in templates), templates
    for n in (1, 6):
        feeds = {"h": rand((n, 9, 16), dtype), "x": rand((n, 16), dtype), "z": rand((2, 8), dtype)}
        check(model.run(feeds), ag.reference.run(outs, feeds), TOL[dtype])


def test_elementwise_operands_through_views(tmp_path):
    n = ag.IntVar("n", 1, 5)
    x = ag.Tensor([n, 6, 8], name="x")
    v = ag.Tensor([n, 1, 8], name="v")
    i = ag.Tensor([n, 8, 6], "int32", name="i")
    r = ops.layernorm(x)
    outs = {
        "transposed": ops.permute(r, [0, 2, 1]) * ops.cast(i, "float32"),        # inner stride 8
        "window": ops.gelu(ops.slice(ops.layernorm(x, eps=1e-3), [1, 2], [5, 7], axes=[1, 2])),  # offset
        "broadcast": ops.expand(ops.sigmoid(v), [n, 6, 8]) - x,                   # stride 0 rows
    }
    p0, p1 = ops.split(ops.layernorm(x, eps=1e-2), [3, 5], axis=2)
    outs["parts"] = ops.maximum(ops.slice(p1, [0], [3], axes=[2]), p0)            # two windows
    assert viewed(outs) >= 4
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    templates = [k["template"] for k in json.loads((tmp_path / "m" / "report.json").read_text())["kernels"]]
    assert not any("strided_copy" in t for t in templates), templates
    for size in (1, 5):
        feeds = {"x": rand((size, 6, 8)), "v": rand((size, 1, 8)),
                 "i": _data.rng.integers(-3, 4, (size, 8, 6)).astype(np.int32)}
        check(model.run(feeds), ag.reference.run(outs, feeds), TOL["float32"])


def test_constant_prefix_views(tmp_path):
    """table[:seq] reads the weights in place (torch.export's dynamic position ids): into a norm's
    prologue, as a GEMM operand, and as an output (a prefix-sized copy), at two sizes."""
    s = ag.IntVar("s", 1, 7)
    x = ag.Tensor([2, s, 8], name="x")
    table, rows = const((8, 8), "float32"), const((8, 3), "float32")
    pos = ops.slice(table, [0], [s])
    outs = {
        "norm": ops.layernorm(x + ops.reshape(pos, [1, s, 8])),
        "gemm": ops.gemm(ops.slice(rows, [0], [s]), const((3, 4), "float32")),
        "prefix": ops.slice(const((8, 2), "float32"), [0], [s]),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert report["num_kernels"] == 3  # norm, gemm, the output's copy: no slice kernel
    for n in (1, 7):
        feeds = {"x": rand((2, n, 8))}
        check(model.run(feeds), ag.reference.run(outs, feeds), TOL["float32"])
