"""The first step of scripts/gpu_check.sh: one case of each kernel family (element-wise, cast, GEMM,
batched GEMM, conv, pooling, norms, softmax, reductions, scan, copies, gather, attention) in one
float16 build for the GPU present, against the oracle, so a first contact with a GPU gives figures
within a minute or names the family that breaks, before the full tier spends its time box.

Without a GPU the same build runs on the mock device (`-m cuda_compile`, and gpu_check.sh's dry
run): every launch of it checked, nothing executed.
"""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen.codegen.lower import supported_kinds
from aitgen.runtime.model import Model
from op_catalogue import CASES, kinds_in
from test_gpu_ops import assert_matches

SMOKE = ("u_gelu", "b_add", "cast", "gemm", "bmm", "conv", "pool", "norm", "softmax", "reduce", "scan",
         "memory", "gather", "attention")


def smoke_graph(dtype: str = "float16") -> tuple[dict, dict, dict]:
    outs, feeds, owners = {}, {}, {}
    for case in CASES:
        if case.name not in SMOKE:
            continue
        o, f = case.build(case.name, dtype, np.random.default_rng(0))
        if not kinds_in(o, False) <= supported_kinds("cuda"):
            continue
        outs.update(o)
        feeds.update(f)
        owners[case.name] = list(o)
    return outs, feeds, owners


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, gpu_arch):
    outs, feeds, owners = smoke_graph()
    # Eager, not a CUDA graph: with CUDA_LAUNCH_BLOCKING=1 (gpu_check.sh's smoke step) a kernel that
    # faults is then named by its own launch check, rather than by the graph's launch.
    model = ag.compile_model(outs, target="cuda", arch=gpu_arch, workdir=tmp_path_factory.mktemp("smoke"),
                             fusion=False, cuda_graph=False)
    try:
        got = model.run(feeds)
    finally:
        model.close()
    return owners, got, ag.reference.run(outs, feeds)


@pytest.mark.gpu
@pytest.mark.parametrize("case", SMOKE)
def test_smoke_family_matches_oracle(smoke, case):
    owners, got, want = smoke
    if case not in owners:
        pytest.skip(f"{case}: a kind without a CUDA lowering")
    for name in owners[case]:
        assert_matches(got[name], want[name], "float16", f"{case}: {name}")


@pytest.mark.cuda_compile
@pytest.mark.parametrize("arch", ["sm_90a"])   # the lent GPU's arch; sm_80's families are the zoo's
def test_smoke_build_on_the_mock(cuda_toolchain, tmp_path, arch):
    outs, feeds, owners = smoke_graph()
    assert set(owners) == set(SMOKE)
    work = ag.compile_model(outs, target="cuda", arch=arch, workdir=tmp_path / "smoke", fusion=False, load=False)
    with Model.load(work, mock_device=True) as m:
        m.run(feeds)
        run = m.mock_run()
    assert not run.failures and len(run.launches) >= len(SMOKE)
    print(f"smoke {arch}: {run.summary()}; {run.operands} operands, {run.unpacked} below the preferred alignment")
