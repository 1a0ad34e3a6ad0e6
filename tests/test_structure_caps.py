"""Issue 11, items 1, 2, 3 and 5: what the structure promises, checked on the running code.

- Passes know no backend: aitgen.passes loads no module of aitgen.codegen or aitgen.profiler, and
  a pass reads what the backend renders from opts.caps alone (the compiler asks the backend once).
- A CPU compile imports no CUDA lowering and no profiler: a backend's lowerings load only for it.
- The memory plan is a value: nothing with a type travels in graph.annotations.
Imports are checked in child processes, where nothing else has loaded them yet.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

import aitgen as ag
from aitgen import ops
from aitgen.capabilities import Capabilities
from aitgen.codegen.lower import capabilities
from aitgen.compiler import compile_options
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.memory import MemoryPlan, plan_memory
from aitgen.options import CompileOptions
from aitgen.passes import run_passes, run_pipeline
from aitgen.passes.group_ops import group_ops

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _modules_after(code: str) -> list[str]:
    """sys.modules under aitgen.codegen / aitgen.profiler after `code` runs in a fresh interpreter."""
    probe = code + ("\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules "
                    "if m.startswith(('aitgen.codegen', 'aitgen.profiler')))))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_passes_and_memory_planning_load_no_codegen_or_profiler():
    # Without the aitgen/__init__ facade (which loads the compiler for the public API): a module
    # object stands in for the package so that its submodules import alone. Importing is not
    # enough: the pipeline and the plan run too, so an import inside a function would show.
    loaded = _modules_after(
        "import sys, types\n"
        f"pkg = types.ModuleType('aitgen'); pkg.__path__ = [{str(ROOT / 'aitgen')!r}]; sys.modules['aitgen'] = pkg\n"
        "import aitgen.passes\n"
        "from aitgen import ops\n"
        "from aitgen.capabilities import Capabilities\n"
        "from aitgen.ir import Graph, OpKind, Tensor\n"
        "from aitgen.memory import check_plan, plan_memory\n"
        "from aitgen.options import CompileOptions\n"
        "every = frozenset(OpKind)\n"
        "caps = Capabilities('cpu', kinds=every, epilogue=every, operand_views=every, strided_output=every,\n"
        "                    grouped=every)\n"
        "x, w1, w2 = Tensor([4, 8], name='x'), Tensor([8, 8], name='w1'), Tensor([8, 8], name='w2')\n"
        "y = ops.concat([ops.layernorm(ops.gemm(x, w1)), ops.layernorm(ops.gemm(x * 2.0, w2))], axis=1)\n"
        "g = aitgen.passes.run_pipeline(Graph.from_outputs({'y': ops.permute(ops.relu(y), [1, 0])}),\n"
        "                               CompileOptions(target='cpu', caps=caps))\n"
        "assert any(op.kind is OpKind.GROUPED for op in g.ops)\n"
        "check_plan(g, plan_memory(g, caps))")
    assert loaded == []
    # And through the package as users import it (aitgen/__init__ loads nothing eagerly).
    assert _modules_after("import aitgen.passes") == []


def test_cpu_compile_imports_no_cuda_lowering_and_no_profiler(tmp_path):
    loaded = _modules_after(
        "import numpy as np, aitgen as ag\n"
        "from aitgen import ops\n"
        "x = ag.Tensor([4, 8], name='x')\n"
        f"m = ag.compile_model({{'y': ops.relu(x) * 2.0}}, target='cpu', workdir={str(tmp_path / 'm')!r})\n"
        "assert (m.run({'x': np.ones((4, 8), np.float32)})['y'] == 2.0).all()\n"
        "m.close()")
    assert "aitgen.codegen.kernels.cpu.elementwise" in loaded  # the probe saw the CPU lowerings load
    assert not [m for m in loaded if m.startswith(("aitgen.codegen.kernels.cuda", "aitgen.codegen.kernels.gpu",
                                                   "aitgen.codegen.kernels.rocm", "aitgen.profiler"))]


def test_capabilities_are_the_registered_lowerings():
    cpu, cuda = capabilities("cpu"), capabilities("cuda")
    assert cpu.target == "cpu" and cuda.target == "cuda"
    assert cpu.grouped == {OpKind.GEMM, OpKind.LAYERNORM, OpKind.RMSNORM, OpKind.FUSED_ELEMENTWISE}
    assert cuda.grouped == {OpKind.GEMM}
    # QGEMM: the int8 GEMM quantize_int8 makes of a GEMM keeps the view it read A through
    assert cpu.operand_views == {OpKind.GEMM, OpKind.QGEMM, OpKind.FUSED_ELEMENTWISE} and not cuda.operand_views
    assert {OpKind.PERMUTE, OpKind.CONV2D, OpKind.GEMM} <= cpu.strided_output and not cuda.strided_output
    assert {OpKind.GEMM, OpKind.BMM, OpKind.CONV2D} <= cpu.epilogue & cuda.epilogue
    assert OpKind.TOPK in cpu.kinds and OpKind.TOPK not in cuda.kinds
    assert compile_options("cuda").caps == cuda


def _two_towers() -> dict:
    """Two independent GEMM + layernorm towers: group_ops makes one GEMM and one layernorm group
    of them where the backend renders those groups (weights are inputs: nothing packs them)."""
    x = ag.Tensor([4, 8], name="x")
    w1, w2 = ag.Tensor([8, 8], name="w1"), ag.Tensor([8, 8], name="w2")
    return {"a": ops.layernorm(ops.gemm(x, w1)), "b": ops.layernorm(ops.gemm(x * 2.0, w2))}


def test_passes_read_only_the_capabilities_in_the_options():
    outs = _two_towers()
    grouped = run_pipeline(Graph.from_outputs(outs), compile_options("cpu"))
    assert any(op.kind is OpKind.GROUPED for op in grouped.ops)
    # The same target with a capability set that renders no groups: the pass forms none.
    plain = CompileOptions(target="cpu", caps=dataclasses.replace(capabilities("cpu"), grouped=frozenset()))
    ungrouped = run_pipeline(Graph.from_outputs(outs), plain)
    assert not any(op.kind is OpKind.GROUPED for op in ungrouped.ops)


def test_options_without_capabilities_are_refused_by_name():
    g = Graph.from_outputs(_two_towers())
    with pytest.raises(ValueError, match="caps is not set.*compile_options"):
        group_ops(g, CompileOptions(target="cpu"))
    assert group_ops(g, CompileOptions(target="cpu", fusion=False)) is g  # nothing to ask without fusion
    with pytest.raises(ValueError, match="target 'cpu'.*'cuda'"):
        CompileOptions(target="cuda", caps=capabilities("cpu"))
    assert CompileOptions(target="rocm", caps=Capabilities("rocm")).caps.grouped == frozenset()


def test_the_plan_is_a_value_and_annotations_hold_no_typed_objects():
    opts = compile_options("cpu")
    run = run_passes(Graph.from_outputs(_two_towers()), opts)
    plan = plan_memory(run.graph, opts.caps)
    assert isinstance(plan, MemoryPlan) and plan.arena_bytes > 0
    assert [r.name for r in run.records][-1] == "name_graph" and run.input_cost["ops"] == 5
    for key, value in run.graph.annotations.items():
        # Plain data only (names, flags): a typed result has a home of its own.
        assert isinstance(value, (bool, dict)), key
        if isinstance(value, dict):
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()), key
