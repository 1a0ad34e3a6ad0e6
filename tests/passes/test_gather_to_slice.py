"""gather_to_slice: gathers with evenly stepping constant indices become slices (+ a reshape).
Exact: the same elements, moved; check_pass compares bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, OpKind, Tensor
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.gather_to_slice import gather_to_slice
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph


def _idx(v):
    return ag.constant(np.asarray(v, np.int64))


def _run(y, **extra) -> Graph:
    return check_pass(gather_to_slice, Graph.from_outputs({"y": y, **extra}), exact=True)


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


@pytest.mark.parametrize("index, axis, want", [
    (0, 1, ["slice", "reshape"]),            # BERT's pooler x[:, 0]: scalar index drops the axis
    (-1, 1, ["slice", "reshape"]),           # counts from the end of a static axis
    ([2], 0, ["slice"]),                     # rank-1 index keeps the axis
    ([1, 3, 5], 2, ["slice"]),               # a step of 2
    ([[0, 1], [2, 3]], 2, ["slice", "reshape"]),  # rank-2 indices split the axis
])
def test_even_indices_become_a_slice(index, axis, want):
    x = Tensor([3, 4, 6], name="x")
    g = _run(ops.gather(x, _idx(index), axis=axis))
    assert kinds(g) == want


@pytest.mark.parametrize("index", [[2, 1], [1, 1], [0, 2, 3], [6], [-7], []])
def test_other_indices_stay_a_gather(index):
    # descending, repeated, uneven, out of range (the gather's run-time error stays), empty
    x = Tensor([3, 4, 6], name="x")
    g = Graph.from_outputs({"y": ops.gather(x, _idx(index), axis=2)})
    if index in ([6], [-7]):
        out = gather_to_slice(g.copy(), compile_options())  # the oracle would raise on the feeds
    else:
        out = _run(ops.gather(x, _idx(index), axis=2))
    assert kinds(out) == ["gather"]


def test_runtime_indices_stay_a_gather():
    x, i = Tensor([3, 4], name="x"), Tensor([2], dtype="int64", name="i")
    assert kinds(_run(ops.gather(x, i, axis=1))) == ["gather"]


def test_dynamic_axis_only_below_its_lower_bound():
    s = IntVar("s", 3, 16)
    x = Tensor([2, s, 4], name="x")
    assert kinds(_run(ops.gather(x, _idx(2), axis=1))) == ["slice", "reshape"]
    # index 3 may be out of range at run time (s = 3): the gather's error must stay
    g = Graph.from_outputs({"y": ops.gather(x, _idx(3), axis=1)})
    assert kinds(gather_to_slice(g, compile_options())) == ["gather"]
    assert kinds(_run(ops.gather(x, _idx(-1), axis=1))) == ["gather"]  # depends on the run-time size


def test_mha_split_then_pooler_in_the_pipeline_has_no_gather_and_no_copy():
    # qkv[i] of a [3, S, E] tensor read by GEMMs: after the pipeline the slices are the GEMMs' reads.
    x = Tensor([5, 8], name="x")
    qkv = ops.reshape(ops.permute(ops.reshape(ops.linear(x, ag.constant(np.ones((24, 8), np.float32))),
                                              [5, 3, 8]), [1, 0, 2]), [3, 5, 8])
    parts = [ops.gather(qkv, _idx(i), axis=0) for i in range(3)]
    y = ops.gather(parts[0] + parts[1] * parts[2], _idx(0), axis=0)
    g = run_pipeline(Graph.from_outputs({"y": y}), compile_options())
    assert "gather" not in kinds(g)


def test_zoo_exact():
    for name in ZOO:
        stop = PIPELINE.index(gather_to_slice)
        g = run_pipeline(zoo_graph(name), compile_options(), PIPELINE[:stop])
        check_pass(gather_to_slice, g, exact=True)


@pytest.mark.parametrize("table, start, want", [
    (np.arange(16), 0, ["slice", "reshape"]),        # torch.export's arange(seq): position ids
    (np.arange(2, 34, 2), 1, ["slice", "reshape"]),  # any arithmetic table, any static start
    (np.arange(16)[::-1].copy(), 0, ["slice", "reshape", "gather"]),  # descending: stays a gather
])
def test_dynamic_prefix_of_a_constant_range_becomes_a_slice(table, start, want):
    """gather(x, c[s:seq]) with a symbolic seq: the dynamic import's position embedding lookup
    must become what the static import folds it to, a window of the table."""
    seq = IntVar("seq", 1, 12)
    h = Tensor([seq, 8], name="h")
    emb = ag.constant(np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32))
    ids = ops.reshape(ops.slice(ag.constant(table.astype(np.int64)), [start], [seq + start]), [1, seq])
    g = _run(ops.add(ops.gather(emb, ids, axis=0), h))
    assert [k for k in kinds(g) if k != "add"] == want
