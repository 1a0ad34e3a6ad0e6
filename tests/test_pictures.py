"""Pictures of a build: graph.json after every compile, `aitgen inspect DIR` writes graph.html (well
formed, one box per op that launches, one colour per kernel, fused groups boxed with what they
absorbed) and memory.png, and prints kernels and bytes before and after each pass."""
from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import aitgen as ag
from aitgen import nn, ops
from aitgen.cli import main
from aitgen.codegen.report import fused_kinds
from aitgen.compiler import compile_options
from aitgen.ir.graph import Graph
from aitgen.passes import run_passes
from aitgen import viz

SVG = "{http://www.w3.org/2000/svg}"


def _model():
    n = ag.IntVar("n", 1, 4)
    x = ag.Tensor([n, 8, 8, 3], name="x")
    c = ops.relu(nn.Conv2d(3, 8, 3, padding=1)(x))
    r = ops.relu(nn.Conv2d(8, 8, 3, padding=1)(c) + c)           # residual block
    h = nn.Linear(8, 16)(ops.reshape(ops.global_avg_pool(r), [n, 8]))
    y = ops.tanh(h) * 0.5 + ops.sigmoid(h)                         # an element-wise group
    return {"y": ops.gelu(nn.Linear(16, 4)(y))}


@pytest.fixture(scope="module", params=[True, False], ids=["fused", "unfused"])
def build(request, tmp_path_factory):
    work = tmp_path_factory.mktemp("pictures") / "b"
    ag.compile_model(_model(), target="cpu", workdir=work, fusion=request.param).close()
    return work


def test_graph_json_describes_ops_kernels_and_memory(build):
    desc = json.loads((build / "graph.json").read_text())
    report = json.loads((build / "report.json").read_text())
    assert [op["step"] for op in desc["ops"]] == list(range(len(desc["ops"])))
    for op in desc["ops"]:
        assert op["kind"] and op["name"] and all(t["shape"] and t["dtype"] for t in op["outputs"])
        assert op["view"] is (op["kind"] == "reshape")  # views launch nothing unless they must copy
    calls = [k["index"] for op in desc["ops"] for k in op["kernels"]] + [k["index"] for k in desc["extra_calls"]]
    assert sorted(calls) == list(range(report["num_kernels"]))  # every call belongs somewhere, once
    assert [k["func"] for op in desc["ops"] for k in op["kernels"]] == \
        [k["func"] for k in report["kernels"]][:len(calls) - len(desc["extra_calls"])]
    mem = desc["memory"]
    assert mem["arena_bytes"] == report["activation_bytes"] and mem["tensors"]
    for t in mem["tensors"]:
        assert 0 <= t["offset"] and t["offset"] + t["size"] <= mem["arena_bytes"]
        assert 0 <= t["first"] <= t["last"] < desc["num_steps"]


def test_inspect_dir_writes_html_png_and_prints_the_pass_table(build, capsys):
    assert main(["inspect", str(build)]) == 0
    out = capsys.readouterr().out
    report = json.loads((build / "report.json").read_text())
    desc = json.loads((build / "graph.json").read_text())

    # The per-pass table: the input row, then every pass with kernels and bytes after it.
    assert "kernels" in out and "act. bytes" in out and "(input)" in out
    for p in report["passes"]:
        row = next(line for line in out.splitlines() if line.startswith(p["name"] + " "))
        assert str(p["kernels"]) in row.split() and f"{p['activation_bytes']:,d}" in row
    assert report["pipeline_input"]["kernels"] >= report["passes"][-1]["kernels"]

    html = (build / "graph.html").read_text()
    root = ET.fromstring(html)  # well-formed XHTML; no scripts, nothing fetched
    assert not root.findall(".//{http://www.w3.org/1999/xhtml}script") and "http://" not in html.replace(
        "http://www.w3.org/", "")
    svg = root.find(f".//{SVG}svg")
    kernels = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "kernel"]
    launching = [op for op in desc["ops"] if op["kernels"]]
    assert len(kernels) == len(launching)  # one box per op that launches
    assert [g.get("data-op") for g in kernels] == [op["name"] for op in launching]
    fills = {g.find(f"{SVG}rect").get("fill") for g in kernels}
    assert len(fills) == len({op["kernels"][0]["func"] for op in launching})  # one colour per kernel
    for g, op in zip(kernels, launching):
        title = g.find(f"{SVG}title").text
        assert op["kind"] in title and op["outputs"][0]["name"] in title and op["kernels"][0]["func"] in title
        labels = " ".join(t.text for t in g.iter(f"{SVG}text"))
        assert op["kind"] in labels and ", ".join(op["outputs"][0]["shape"]) in labels
    groups = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "fused-group"]
    assert len(groups) == sum(1 for op in desc["ops"] if op["fused"])

    from PIL import Image
    with Image.open(build / "memory.png") as im:
        assert im.format == "PNG" and im.size[0] >= 800 and im.size[1] >= 400


def test_fused_groups_are_boxed_with_what_they_absorbed(tmp_path):
    """Drawn from a graph.json by hand: whatever fusion passes produce, an op whose attrs carry
    an expression is a framed group listing the kinds it absorbed."""
    t = lambda name, shape: {"name": name, "shape": shape, "dtype": "float32", "role": "intermediate"}  # noqa: E731
    k = lambda i, f: {"index": i, "func": f, "template": "cpu/templates/x.j2", "label": ""}  # noqa: E731
    desc = {"name": "m", "num_steps": 3, "inputs": [t("x", ["4", "8"])], "constants": [],
            "outputs": {"y": "y"}, "extra_calls": [], "memory": None, "ops": [
                {"step": 0, "name": "g", "kind": "gemm", "view": False, "inputs": ["x"],
                 "outputs": [t("a", ["4", "8"])], "attrs": "", "fused": ["add", "gelu"], "kernels": [k(0, "k_gemm")]},
                {"step": 1, "name": "f", "kind": "fused_elementwise", "view": False, "inputs": ["a", "x"],
                 "outputs": [t("b", ["4", "8"])], "attrs": "", "fused": ["tanh", "mul", "add", "sigmoid"],
                 "kernels": [k(1, "k_fused")]},
                {"step": 2, "name": "r", "kind": "reshape", "view": True, "inputs": ["b"], "outputs": [t("y", ["32"])],
                 "attrs": "", "fused": None, "kernels": []}]}
    counts = viz.write_graph_html(desc, tmp_path / "g.html")
    assert counts == {"kernel_boxes": 2, "fused_groups": 2, "views": 1, "edges": 5}
    root = ET.parse(tmp_path / "g.html").getroot()
    groups = [g for g in root.iter(f"{SVG}g") if g.get("class") == "fused-group"]
    pills = [[t.text for t in g.iter(f"{SVG}text") if t.get("class") == "pill"] for g in groups]
    assert pills == [["add", "gelu"], ["tanh", "mul", "add", "sigmoid"]]
    viz.write_memory_png(desc, tmp_path / "m.png")  # no memory plan: an empty timeline, not a crash
    assert (tmp_path / "m.png").stat().st_size > 1000


def test_fused_kinds_reads_any_expression_in_attrs():
    @dataclasses.dataclass(frozen=True)
    class Expr:
        k: tuple
        def kinds(self):
            return list(self.k)

    @dataclasses.dataclass(frozen=True)
    class Epilogue:
        expr: Expr

    @dataclasses.dataclass(frozen=True)
    class A:
        layout: str = "rrr"
        epilogue: object = None

    assert fused_kinds(A()) is None
    assert fused_kinds(A(epilogue=Epilogue(Expr(("add", "relu"))))) == ["add", "relu"]
    assert fused_kinds(A(epilogue=Expr(("tanh",)))) == ["tanh"]
    assert fused_kinds(None) is None


def test_pass_records_count_kernels_and_bytes():
    x = ag.Tensor([4, 8], name="x")
    w = ag.constant(np.ones(8, np.float32), name="w")
    run = run_passes(Graph.from_outputs({"y": ops.relu(x * w + 0.0).reshape([32])}), compile_options())
    first, *_, last = run.records
    start = run.input_cost
    assert start == {"ops": 4, "kernels": 3, "activation_bytes": 3 * 4 * 8 * 4}  # the reshape is a view
    assert last.kernels == 1 and last.activation_bytes == 4 * 8 * 4  # relu's result feeds the reshape
    table = viz.pass_table([dataclasses.asdict(r) for r in run.records], start)
    assert "(input)" in table and "-2" in table


def test_inspect_module_still_prints_graph_and_table(tmp_path, capsys):
    mod = tmp_path / "m.py"
    mod.write_text("import aitgen as ag\nfrom aitgen import ops\n"
                   "def build():\n    x = ag.Tensor([2, 3], name='x')\n    return {'y': ops.exp(ops.relu(x))}\n")
    assert main(["inspect", f"{mod}:build"]) == 0
    out = capsys.readouterr().out
    assert "graph model(" in out and "# (input)" in out and "# name_graph" in out


def test_inspect_dir_without_a_build_says_so(tmp_path):
    with pytest.raises(SystemExit, match="graph.json"):
        main(["inspect", str(tmp_path)])
