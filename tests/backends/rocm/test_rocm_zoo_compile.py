"""The ROCm backend on the small zoo (issue 13): kernel counts against the CUDA backend's, and, in
the rocm_compile tier, hipcc builds for gfx90a and gfx940 in float16 whose host side runs on the
mock device (backends/gpu/mock compiled for HIP), eagerly and replayed as a HIP graph.

Counts: the same fused graph lowers to the same number of calls on both GPU backends, with one
known difference: a convolution whose input channels are not a multiple of 8 (ResNet's and
MobileNet's 3-channel stem) is padded to 8 channels on CUDA (passes/pad_conv_channels: CUTLASS's
alignment-8 fp16 operands), while Composable Kernel's conv reads it with scalar loads; the padding
is one pad kernel per such conv (and its unique kernel), so ROCm has one call fewer per padded
conv and can share more kernels."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import models
from aitgen.codegen.lower import lower_graph
from aitgen.compiler import compile_options
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.memory import plan_memory
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.runtime.model import Model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cuda"))   # the small zoo's configurations
from test_cuda_zoo_compile import SMALL  # noqa: E402


def lowered(name: str, target: str, arch: str):
    _, outputs = models.get(name, **SMALL[name])
    opts = compile_options(target=target, arch=arch, precision="float16")
    graph = run_pipeline(Graph.from_outputs(outputs), opts, list(PIPELINE))
    return graph, lower_graph(graph, plan_memory(graph, opts.caps), target, arch=arch, opts=opts)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_kernel_counts_match_cuda(name):
    cuda_graph, cuda_calls = lowered(name, "cuda", "sm_80")
    for arch in ("gfx90a", "gfx940"):
        graph, calls = lowered(name, "rocm", arch)
        padded = sum(1 for op in cuda_graph.ops if op.kind is OpKind.PAD)
        assert sum(1 for op in graph.ops if op.kind is OpKind.PAD) == 0 or padded == 0
        assert len(calls) == len(cuda_calls) - padded, (name, arch)
        # unique kernels: no more than CUDA's (a CK translation unit takes every size at run time, so
        # layers that CUTLASS specialises apart share one); the same where no conv is involved
        uniq, cuda_uniq = len({c.spec.func for c in calls}), len({c.spec.func for c in cuda_calls})
        assert uniq <= cuda_uniq
        if not any(op.kind in (OpKind.CONV2D, OpKind.PAD) for op in cuda_graph.ops):
            assert uniq == cuda_uniq, (name, arch, uniq, cuda_uniq)


def mock_runs(work) -> str:
    """The build's host side on the mock device at its largest shapes, eagerly then captured and
    replayed as a HIP graph: every launch passes every check."""
    lines = []
    for graph in (False, True):
        with Model.load(work, mock_device=True, cuda_graph=graph) as m:
            feeds = {n: np.zeros(s.max_shape, s.dtype.np) for n, s in m.input_specs.items()}
            for _ in range(3 if graph else 1):
                m.run(feeds)
            run = m.mock_run()
            assert not run.failures and run.launches
            assert all(ln.from_graph for ln in run.launches) == graph
            lines.append(f"{run.summary()}; {run.operands} operands aligned as required")
    return lines[0]


# CI's rocm_compile tier: bert and resnet for both archs; the rest of the small zoo is the by-hand
# census (mock_census), as CUDA's other precisions are: each model is a few more CK units per arch.
CENSUS = [pytest.param(n, a, marks=pytest.mark.mock_census) for n in ("gpt2", "mobilenet_v2", "vit_b16")
          for a in ("gfx90a", "gfx940")]


@pytest.mark.rocm_compile
@pytest.mark.parametrize("name, arch", [(n, a) for n in ("bert_base", "resnet50") for a in ("gfx90a", "gfx940")]
                         + CENSUS)
def test_zoo_builds_for_rocm(rocm_toolchain, tmp_path, name, arch):
    _, outputs = models.get(name, **SMALL[name])
    t0 = time.perf_counter()
    work = ag.compile_model(outputs, target="rocm", arch=arch, workdir=tmp_path / name, precision="float16",
                            load=False)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    ag.compile_model(outputs, target="rocm", arch=arch, workdir=tmp_path / f"{name}_warm", precision="float16",
                     load=False)
    warm = time.perf_counter() - t0
    meta = json.loads((work / "model.json").read_text())
    report = json.loads((work / "report.json").read_text())
    assert meta["target"] == "rocm" and meta["arch"] == arch
    lib = (work / meta["library"]).read_bytes()
    assert b".hip_fatbin" in lib and f"amdgcn-amd-amdhsa--{arch}".encode() in lib
    _, calls = lowered(name, "rocm", arch)
    assert report["num_kernels"] == len(calls)
    census = mock_runs(work)
    print(f"{name} {arch}: {report['num_kernels']} calls, {report['unique_kernels']} unique kernels, "
          f"cold {cold:.1f} s (this process's cache state), warm {warm:.1f} s; {census}")
