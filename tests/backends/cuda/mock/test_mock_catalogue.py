"""The alignment census of issue 12: every operand of every launch of the op catalogue (the gpu
tier's cases, tests/backends/cuda/op_catalogue.py), float32/float16/bfloat16, sm_80 and sm_90a,
run on the mock device at the cases' shapes. Every pointer must lie in a live allocation and meet
the alignment its kernel requires; the census line counts the operands and those below the
alignment their kernel prefers (element-wise packs). By hand (nvcc builds of the whole catalogue):
    AITGEN_RUN_MOCK_CENSUS=1 python -m pytest -q -s -n 2 tests/backends/cuda/mock/test_mock_catalogue.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import aitgen as ag
from aitgen.codegen.lower import supported_kinds
from aitgen.runtime.model import Model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from op_catalogue import build_all  # noqa: E402

pytestmark = pytest.mark.mock_census


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("fusion", [False, True], ids=["ops", "fused"])
def test_catalogue_on_the_mock(cuda_toolchain, tmp_path, dtype, arch, fusion):
    # The catalogue's cases are of two kinds, as the gpu tier builds them: one kernel per op
    # (fusion off) and fusion patterns (fusion on).
    outs, feeds, owners = build_all(dtype, fusion, supported_kinds("cuda"))
    assert owners, f"no catalogue case for fusion={fusion}"
    work = ag.compile_model(outs, target="cuda", arch=arch, workdir=tmp_path / "ops", load=False, fusion=fusion)
    with Model.load(work, mock_device=True) as m:
        m.run(feeds)   # MockDeviceError names the first failing launch
        run = m.mock_run()
    assert not run.failures
    print(f"catalogue {'fused' if fusion else 'ops'} {dtype} {arch} ({len(owners)} cases): {run.summary()}; "
          f"{run.operands} operands aligned as required, "
          f"{run.unpacked} below the alignment their kernel prefers")
