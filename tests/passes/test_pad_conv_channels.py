"""pad_conv_channels (CUDA): a float16/bfloat16 conv with an odd input channel count reads its input
and weight through zero-channel pads to a multiple of 4, so a tensor-core conv takes it. The extra
channel adds exact zeros: the oracle agrees bit for bit (check_pass, exact). Other convs, other
targets and float32 are left alone."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, Tensor
from aitgen.passes.pad_conv_channels import pad_conv_channels
from pass_equivalence import check_pass

RNG = np.random.default_rng(12)


def stem(c: int, dtype: str = "float16", groups: int = 1, out: int = 8):
    x = Tensor([IntVar("n", 1, 4), 16, 16, c], dtype=dtype, name="x")
    w = ag.constant((RNG.standard_normal((out, 7, 7, c // groups)) * 0.2).astype(np.float32), dtype=dtype, name="w")
    b = ag.constant(RNG.standard_normal(out).astype(np.float32), dtype=dtype, name="b")
    return Graph.from_outputs({"y": ops.relu(ops.conv2d(x, w, b, stride=2, padding=3, groups=groups))})


@pytest.mark.parametrize("c, dtype", [(3, "float16"), (5, "bfloat16"), (1, "float16")])
def test_odd_channels_are_padded_to_four(c, dtype):
    g = check_pass(pad_conv_channels, stem(c, dtype), exact=True, opts=compile_options("cuda"))
    conv = next(op for op in g.ops if op.kind is ag.OpKind.CONV2D)
    want = c + (-c % 4)
    assert conv.inputs[0].shape[3].value == want and conv.inputs[1].shape[3].value == want
    assert [op.kind for op in g.ops].count(ag.OpKind.PAD) == 2
    assert conv.inputs[1].producer.inputs[0].name == "w"   # the constant itself stays, for set_constants


@pytest.mark.parametrize("graph, opts", [(lambda: stem(3), lambda: compile_options("cpu")),
                                         (lambda: stem(3, "float32"), lambda: compile_options("cuda")),
                                         (lambda: stem(4), lambda: compile_options("cuda")),
                                         (lambda: stem(6), lambda: compile_options("cuda")),
                                         (lambda: stem(3, groups=3, out=9), lambda: compile_options("cuda"))])
def test_left_alone(graph, opts):
    g = check_pass(pad_conv_channels, graph(), exact=True, opts=opts())
    assert ag.OpKind.PAD not in [op.kind for op in g.ops]


@pytest.mark.cuda_compile
def test_cuda_stem_takes_the_tensor_core_conv_and_passes_the_mock(cuda_toolchain, tmp_path):
    """Built for sm_80: the stem renders CUTLASS's implicit GEMM (alignment 4), not the SIMT conv, and
    its host side -- can_implement included -- runs clean on the mock device."""
    from aitgen.runtime.model import Model
    g = stem(3)
    work = ag.compile_model(g, target="cuda", arch="sm_80", workdir=tmp_path / "m", load=False)
    sources = "".join(p.read_text() for p in (work / "obj" / "src").glob("k_*.cu"))
    assert "DefaultConv2dFprop" in sources and "one thread per output" not in sources
    with Model.load(work, mock_device=True) as m:
        m.run({"x": np.ones((2, 16, 16, 3), np.float16)})
        run = m.mock_run()
    assert not run.failures and any("cutlass" in ln.kernel for ln in run.launches)
