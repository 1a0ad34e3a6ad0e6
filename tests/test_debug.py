"""The numerical bisect finds planted errors: a wrong kernel for one op (named exactly, also when
fusion has merged that op into a bigger one), and a wrong pass (named by the pass replay); a clean
model reports no divergence, through the CLI too."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

import aitgen as ag
from aitgen import nn, ops
from aitgen.cli import main
from aitgen.codegen import lower
from aitgen.codegen.report import fused_kinds
from aitgen.codegen.spec import KernelCall
from aitgen.debug import bisect, compare, format_errors
from aitgen.ir.op import NoAttrs, Op, OpKind
from aitgen.ops.elementwise import ClampAttrs

MODEL = """
import numpy as np
import aitgen as ag
from aitgen import nn, ops

def build():
    rng = np.random.default_rng(0)
    n = ag.IntVar("n", 1, 8)
    x = ag.Tensor([n, 16], name="x")
    h = nn.Linear(16, 32)(x)
    t = ops.tanh(h)
    y = ops.relu(t * 2.0 + h)
    z = ops.gelu(nn.Linear(32, 8)(y))
    return {"z": z, "s": ops.softmax(z, -1)}
"""


def _build():
    ns: dict = {}
    exec(textwrap.dedent(MODEL), ns)  # the same model the CLI test loads from a file
    return ns["build"]()


def _then(op: Op, ctx, real, kind: OpKind, attrs, kind_lowering) -> list[KernelCall]:
    """`real`'s calls for `op`, then a `kind` kernel run in place over op's result: a wrong kernel
    planted from real ones, whatever the element-wise template's parameters look like."""
    out = op.outputs[0]
    after = Op(kind, [out], [out], attrs, name=op.name)  # never in a graph: only lowered
    return real(op, ctx) + kind_lowering(after, ctx)


def _feeds():
    return {"x": np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)}


@pytest.fixture
def registry():
    lower._load_kernels("cpu")  # the real lowerings first, so ours is not overwritten by a late import
    return lower._LOWERINGS


def test_planted_wrong_tanh_is_named_exactly(tmp_path, registry, monkeypatch):
    # A slightly wrong tanh: it saturates at +-0.5 (a clamp after the real kernel), so only the
    # larger elements are off, by up to 0.5 — far beyond rtol 1e-4.
    real = registry[("cpu", OpKind.TANH)]

    def wrong_tanh(op, ctx):
        return _then(op, ctx, real, OpKind.CLAMP, ClampAttrs(-0.5, 0.5), registry[("cpu", OpKind.CLAMP)])

    monkeypatch.setitem(registry, ("cpu", OpKind.TANH), wrong_tanh)
    res = bisect(_build(), _feeds(), target="cpu", workdir=tmp_path / "b", fusion=False)
    assert not res.ok and res.outputs_ok and res.bad_pass is None
    first = res.first
    assert first.kind == "tanh" and first.local_ok is False
    tanh_errors = [e for e in res.errors if e.kind == "tanh"]
    assert [first] == tanh_errors  # exactly that tensor, the only tanh
    before = res.errors[:res.errors.index(first)]
    assert before and all(e.ok for e in before)
    assert first.max_abs > 1e-3 and first.max_rel > 5e-3
    assert any("gemm" in f for f in first.feeding) and first.inputs
    # Everything downstream inherits the error; the ops themselves are right on their operands.
    after = res.errors[res.errors.index(first) + 1:]
    assert any(not e.ok for e in after) and all(e.local_ok is not False for e in after)
    text = format_errors(res) + "\n" + res.summary()
    assert "<== first" in text and first.tensor in res.summary() and "tanh" in res.summary()


def test_planted_error_inside_a_fused_op(tmp_path, registry, monkeypatch):
    """With fusion on, tanh may have been merged into an element-wise group or a GEMM epilogue.
    The plant is then generic: every lowering, for whichever op computes tanh, applies tanh once
    more to the result, and the bisect must name that op's result."""
    def computes_tanh(op) -> bool:
        return op.kind is OpKind.TANH or "tanh" in (fused_kinds(op.attrs) or [])

    def plant(real):
        def planted(op, ctx):
            return _then(op, ctx, real, OpKind.TANH, NoAttrs(), tanh) if computes_tanh(op) else real(op, ctx)
        return planted

    tanh = registry[("cpu", OpKind.TANH)]
    for key, fn in list(registry.items()):
        if key[0] == "cpu":
            monkeypatch.setitem(registry, key, plant(fn))
    res = bisect(_build(), _feeds(), target="cpu", workdir=tmp_path / "b", fusion=True)
    hits = [e for e in res.errors if e.kind == "tanh" or "tanh" in (e.fused or [])]
    assert len(hits) == 1, [(e.kind, e.fused) for e in res.errors]
    assert res.first is hits[0] and res.first.local_ok is False
    assert all(e.ok for e in res.errors[:res.errors.index(res.first)])


def test_clean_model_has_no_divergence_via_cli(tmp_path, capsys):
    mod = tmp_path / "m.py"
    mod.write_text(MODEL)
    rc = main(["debug", f"{mod}:build", "--target", "cpu", "--workdir", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "no divergence" in out and "DIVERGES" not in out
    # Every op result was compared, in schedule order, and named in the table.
    assert "gemm" in out and "softmax" in out


def test_a_wrong_pass_is_named(tmp_path):
    from aitgen.passes import PIPELINE

    def perturb_constants(graph, opts):
        """A broken 'optimisation': changes a weight, so the graph computes something else."""
        for t in graph.constants:
            if t.value.ndim == 2:
                t.value = t.value * np.float32(1.5)
                break
        return graph

    PIPELINE.insert(len(PIPELINE) - 1, perturb_constants)
    try:
        res = bisect(_build(), _feeds(), target="cpu", workdir=tmp_path / "b")
    finally:
        PIPELINE.remove(perturb_constants)
    assert res.first is None  # the kernels do compute the (wrong) optimised graph
    assert not res.outputs_ok and res.bad_pass == "perturb_constants" and not res.ok
    assert "perturb_constants" in res.summary()


def test_compare_tolerances_and_exact_types():
    a = np.array([1.0, 2.0, np.nan], np.float32)
    assert compare(a, a.copy(), 1e-4, 1e-5)[2]
    assert not compare(a, np.array([1.0, 2.0, 0.0], np.float32), 1e-4, 1e-5)[2]  # NaN where none was
    mabs, mrel, ok = compare(np.array([1.001], np.float32), np.array([1.0], np.float32), 1e-4, 1e-5)
    assert not ok and mabs == pytest.approx(1e-3, rel=1e-3) and mrel == pytest.approx(1e-3, rel=1e-3)
    assert compare(np.array([1.00001], np.float32), np.array([1.0], np.float32), 1e-4, 1e-5)[2]
    # atol scales with the tensor's magnitude: cancellation next to large values is rounding
    big = np.array([500.0, 3e-3], np.float32)
    assert compare(big + np.float32(4e-4), big, 1e-4, 1e-5)[2]
    assert not compare(big + np.float32(1e-2), big, 1e-4, 1e-5)[2]
    assert not compare(np.array([1, 2]), np.array([1, 3]), 1.0, 1.0)[2]  # integers: exact
    assert not compare(np.zeros(3), np.zeros(4), 1, 1)[2]


def test_compile_model_fusion_false_is_accepted(tmp_path):
    x = ag.Tensor([2, 4], name="x")
    m = ag.compile_model({"y": ops.relu(nn.Linear(4, 4)(x))}, target="cpu", workdir=tmp_path / "b", fusion=False)
    try:
        feeds = {"x": np.ones((2, 4), np.float32)}
        assert m.run(feeds)["y"].shape == (2, 4)
    finally:
        m.close()
