"""plan_memory: a concat's computed parts written in place, as slices of its output's buffer.

Exact plan numbers on hand-built graphs, check_plan on each (and on forged records), and the
simulated run through the arena of test_memory_planning (every tensor stored at its planned
offset, compared bit for bit with every tensor in its own buffer).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aitgen
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.errors import MemoryPlanError
from aitgen.ir import Graph, IntImm, IntVar, Tensor
from aitgen.memory import check_plan, plan_memory
from aitgen.passes import run_pipeline
from test_memory_planning import T, _const, assert_simulation_matches, plan_of


def test_both_parts_are_written_in_place():
    x, z = Tensor([1, 4, 16], name="x"), Tensor([1, 16], name="z")
    a = ops.gemm(x, _const(16, 16), name="a")                            # [1, 4, 16]: 256 B
    b = ops.reshape(ops.gemm(z, _const(16, 32), name="b"), [1, 2, 16], name="bv")  # a view: 128 B
    y = ops.concat([a, b], axis=1, name="y")                              # [1, 6, 16]: 384 B
    out = ops.gemm(y, _const(16, 2), name="out")
    g, p = plan_of({"out": out}, [x, z])
    assert p.concat_in_place == {T(g, "y"): {0: 0, 1: 256}}
    base = p.offsets[T(g, "y")]
    assert p.offsets[T(g, "a")] == base and p.offsets[T(g, "b")] == p.offsets[T(g, "bv")] == base + 256
    # One buffer: y's 384 B, from a's write on; the naive sum still counts every intermediate.
    assert (p.lower_bound_bytes, p.arena_bytes, p.naive_bytes) == (384, 384, 256 + 128 + 384)
    assert_simulation_matches(g, p)


def test_what_cannot_be_in_place_is_copied():
    x = Tensor([1, 3, 16], name="x")
    a = ops.relu(ops.gemm(x, _const(16, 16), name="g"), name="a")  # in place over g, then a slice
    tok = aitgen.constant(np.ones((1, 1, 16), np.float32))          # a constant: copied
    c = ops.concat([tok, a, x], axis=1, name="c")                   # x, a graph input: copied
    g, p = plan_of({"c2": ops.gemm(c, _const(16, 4), name="c2"), "a": a}, [x])
    assert p.concat_in_place == {}  # a is a graph output (its own buffer), the rest are user buffers
    g, p = plan_of({"c2": ops.gemm(c, _const(16, 4), name="c2")}, [x])
    assert p.concat_in_place == {T(g, "c"): {1: 64}}
    assert [n for n, _, _ in p.in_place] == []  # a keeps its slice; the relu does not run over g
    assert_simulation_matches(g, p)


def untargeted(outputs, inputs):
    """The plan without a target: no producer is known to write at strides."""
    g = Graph.from_outputs(outputs, inputs=inputs)
    p = plan_memory(g)
    check_plan(g, p)
    return g, p


def test_only_contiguous_aligned_static_slices():
    x = Tensor([2, 3, 16], name="x")
    a = ops.gemm(x, _const(16, 16), name="a")
    y = ops.concat([a, a * 2.0], axis=1, name="y")     # batch 2 before the axis: strided slices
    g, p = untargeted({"o": ops.gemm(y, _const(16, 2), name="o")}, [x])
    assert p.concat_in_place == {} and p.strided_writes == {}
    x1 = Tensor([1, 3, 5], name="x1")
    a = ops.gemm(x1, _const(5, 5), name="a")           # 60 B: the next slice would start unaligned
    y = ops.concat([a, ops.relu(a, name="r"), a * 3.0], axis=1, name="y")
    g, p = plan_of({"o": ops.gemm(y, _const(5, 2), name="o")}, [x1])
    assert p.concat_in_place == {T(g, "y"): {0: 0}}
    assert_simulation_matches(g, p)
    n = IntVar("n", 1, 4)
    xd = Tensor([1, n, 16], name="xd")
    a = ops.gemm(xd, _const(16, 16), name="a")         # a run-time size: the next offset is unknown
    y = ops.concat([a, a * 2.0], axis=1, name="y")
    g, p = plan_of({"o": ops.gemm(y, _const(16, 2), name="o")}, [xd])
    assert p.concat_in_place == {}


def test_nested_concats_and_a_part_read_later():
    x = Tensor([1, 16], name="x")
    a = ops.gemm(x, _const(16, 16), name="a")
    b = ops.gemm(x, _const(16, 16), name="b")
    inner = ops.concat([a, b], axis=1, name="inner")            # [1, 32]
    c = ops.gemm(x, _const(16, 16), name="c")
    outer = ops.concat([c, inner], axis=1, name="outer")        # [1, 48]
    late = ops.gemm(a, _const(16, 4), name="late")              # a is read after the concats
    g, p = plan_of({"o": ops.gemm(outer, _const(48, 4), name="o") + late}, [x])
    assert p.concat_in_place == {T(g, "inner"): {0: 0, 1: 64}, T(g, "outer"): {0: 0, 1: 64}}
    base = p.offsets[T(g, "outer")]
    assert [p.offsets[T(g, n)] - base for n in ("c", "inner", "a", "b")] == [0, 64, 64, 128]
    assert_simulation_matches(g, p)


def test_inner_axis_parts_are_written_at_strides():
    # [2, 3, C1] + [2, 3, C2] along the channels: each part's rows sit at the output's row stride.
    x = Tensor([2, 3, 16], name="x")
    a = ops.gemm(x, _const(16, 16), name="a")          # a GEMM writes rows at a stride (ldc)
    e = ops.tanh(x, name="e")                           # element-wise: any strides
    n = ops.layernorm(x, name="n")                      # a norm writes dense rows only: copied
    r = ops.gemm(x, _const(16, 16), name="r")           # read again below: copied
    y = ops.concat([a, e, n, r], axis=2, name="y")      # [2, 3, 64]
    out = ops.gemm(y, _const(64, 2), name="o") + ops.gemm(r, _const(16, 2), name="o2")
    g, p = plan_of({"o": out}, [x])
    assert p.concat_in_place == {T(g, "y"): {0: 0, 1: 64}}  # 16 floats per part: 64-byte steps
    strides = [int(d.value) for d in p.strided_writes[T(g, "a")]]
    assert strides == [3 * 64, 64, 1] and set(p.strided_writes) == {T(g, "a"), T(g, "e")}
    assert p.offsets[T(g, "e")] == p.offsets[T(g, "y")] + 64
    assert_simulation_matches(g, p)
    # Without a target nothing is known to write at strides: every part is copied.
    g, p = untargeted({"o": out}, [x])
    assert p.concat_in_place == {} and p.strided_writes == {}


def test_forged_records_are_rejected():
    x = Tensor([1, 4, 16], name="x")
    a = ops.gemm(x, _const(16, 16), name="a")
    b = ops.gemm(x, _const(16, 16), name="b")
    y = ops.concat([a, b], axis=1, name="y")
    g, p = plan_of({"o": ops.gemm(y, _const(16, 2), name="o")}, [x])
    ya, yb = T(g, "y"), T(g, "b")
    with pytest.raises(MemoryPlanError, match="not a contiguous aligned slice"):
        check_plan(g, dataclasses.replace(p, concat_in_place={ya: {0: 0, 1: 128}}))
    with pytest.raises(MemoryPlanError, match="not at its slice"):
        moved = {**p.offsets, yb: p.offsets[yb] - 64}
        check_plan(g, dataclasses.replace(p, offsets=moved))
    with pytest.raises(MemoryPlanError, match="overlap"):  # no record: the parts clash with y
        check_plan(g, dataclasses.replace(p, concat_in_place={}))
    with pytest.raises(MemoryPlanError, match="no concat part"):
        check_plan(g, dataclasses.replace(p, strided_writes={T(g, "o"): (IntImm(1), IntImm(1))}))
    x2 = Tensor([2, 3, 16], name="x2")
    y2 = ops.concat([ops.tanh(x2, name="t"), ops.exp(x2, name="u")], axis=2, name="y2")
    g, p = plan_of({"o": ops.gemm(y2, _const(32, 2), name="o")}, [x2])
    assert set(p.strided_writes) == {T(g, "t"), T(g, "u")}
    with pytest.raises(MemoryPlanError, match="alone at the output's strides"):
        check_plan(g, dataclasses.replace(p, strided_writes={T(g, "t"): p.strided_writes[T(g, "t")]}))


def test_vit_tokens_with_a_batch_are_written_at_strides():
    inputs, outputs = aitgen.models.get("vit_b16", batch=2, image_size=32, patch=8, layers=1, hidden=32,
                                        heads=2, mlp=64)
    opts = compile_options()
    g = run_pipeline(Graph.from_outputs(outputs, inputs=list(inputs.values())), opts)
    p = plan_memory(g, opts.caps)
    check_plan(g, p)
    (concat,) = [op for op in g.ops if op.kind.value == "concat"]
    patches = concat.inputs[1]
    conv = patches.producer.inputs[0]  # a reshape of the patch conv's [2, 4, 4, 32] (a GEMM: patchify_conv)
    assert conv.producer.kind.value == "gemm"
    assert p.concat_in_place == {concat.outputs[0]: {1: 32 * 4}}
    assert [str(d) for d in p.strided_writes[patches]] == ["544", "32", "1"]     # 17 tokens of 32
    assert [str(d) for d in p.strided_writes[conv]] == ["544", "128", "32", "1"]
    assert_simulation_matches(g, p)


def test_vit_class_token_copies_only_the_token():
    inputs, outputs = aitgen.models.get("vit_b16", image_size=32, patch=8, layers=1, hidden=32, heads=2, mlp=64)
    opts = compile_options()
    g = run_pipeline(Graph.from_outputs(outputs, inputs=list(inputs.values())), opts)
    p = plan_memory(g, opts.caps)
    check_plan(g, p)
    (concat,) = [op for op in g.ops if op.kind.value == "concat"]
    assert p.concat_in_place == {concat.outputs[0]: {1: 32 * 4}}  # the patches, after one token
    assert concat.inputs[0].is_constant
    assert_simulation_matches(g, p)
