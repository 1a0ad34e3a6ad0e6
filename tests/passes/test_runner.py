"""The runner: records, verification, dumps, and PassError naming the failing pass and its predecessors."""
from __future__ import annotations

import os

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.errors import GraphError, PassError
from aitgen.ir import Graph
from aitgen.options import CompileOptions
from aitgen.passes import PIPELINE, PassRecord, optimize, remove_unused, run_passes, run_pipeline, toposort


def _graph() -> Graph:
    x = ag.Tensor([2, 3], name="x")
    return Graph.from_outputs({"y": ops.relu(x * 1.0) + ops.relu(x * 1.0)})


def explode(graph: Graph, opts: CompileOptions) -> Graph:
    raise ValueError("boom")


def dangle(graph: Graph, opts: CompileOptions) -> Graph:
    """Leaves a tensor listing a reader that is not in the graph."""
    ops.neg(graph.inputs[0])
    return graph


def forget_return(graph: Graph, opts: CompileOptions):
    graph.sort()


def test_records_every_pass():
    run = run_passes(_graph(), compile_options())
    out, records = run.graph, run.records
    assert [r.name for r in records] == [p.__name__ for p in PIPELINE]
    assert all(isinstance(r, PassRecord) and r.seconds >= 0 for r in records)
    assert records[-1].ops_after == len(out.ops) == 1  # relu + add: one fused element-wise op


def test_pass_error_names_the_pass_and_those_before_it():
    with pytest.raises(PassError) as e:
        run_pipeline(_graph(), compile_options(), [toposort, remove_unused, explode, toposort])
    msg = str(e.value)
    assert "'explode'" in msg and "[toposort, remove_unused]" in msg and "boom" in msg
    assert isinstance(e.value.__cause__, ValueError)


def test_verification_failure_is_blamed_on_the_pass_only_with_verify():
    with pytest.raises(PassError, match=r"'dangle' \(#2\) left a graph that fails verification.*\[toposort\]") as e:
        run_pipeline(_graph(), compile_options(verify=True), [toposort, dangle])
    assert isinstance(e.value.__cause__, GraphError)
    run_pipeline(_graph(), compile_options(verify=False), [toposort, dangle])


def test_a_pass_that_returns_no_graph_is_reported():
    with pytest.raises(PassError, match="'forget_return'.*returned NoneType"):
        run_pipeline(_graph(), compile_options(), [forget_return])


def test_a_broken_input_graph_is_not_blamed_on_a_pass():
    g = _graph()
    g.ops.reverse()
    with pytest.raises(PassError, match="input graph"):
        run_pipeline(g, compile_options(verify=True))


def test_dump_passes_writes_numbered_files(tmp_path):
    folder = tmp_path / "dumps"
    out = run_pipeline(_graph(), compile_options(dump_passes=str(folder)))
    want = ["00-input.txt"] + [f"{i:02d}-{p.__name__}.txt" for i, p in enumerate(PIPELINE, start=1)]
    assert sorted(os.listdir(folder)) == want
    assert (folder / want[-1]).read_text() == str(out)
    assert "mul" in (folder / "00-input.txt").read_text()


def test_optimize_leaves_the_users_tensors_alone():
    x = ag.Tensor([3], name="x")
    w = ag.constant(np.ones(3, np.float32), name="w")
    y = ops.relu(x * w)
    g = optimize({"y": y}, compile_options(verify=True))
    assert [op.kind.value for op in g.ops] == ["relu"]
    assert y.producer.kind.value == "relu" and y.producer.inputs[0].producer.kind.value == "mul"
    assert [u.kind.value for u in x.users] == ["mul"]
    feeds = {"x": np.array([-1.0, 0.0, 2.0], np.float32)}
    np.testing.assert_array_equal(ag.reference.run(g, feeds)["y"], ag.reference.run({"y": y}, feeds)["y"])
