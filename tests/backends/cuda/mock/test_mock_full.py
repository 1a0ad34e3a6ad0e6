"""Full-size bert_base (s128 b1) and resnet50 (b1), float16, sm_90a, run on the mock device: every
launch of the deployments gpu_check.sh benchmarks passes the mock's checks, eagerly and replayed as
a CUDA graph. By hand, with the mock census (minutes of nvcc per model on 2 cores, cold):
    AITGEN_RUN_MOCK_CENSUS=1 python -m pytest -q -s tests/backends/cuda/mock/test_mock_full.py
"""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import models
from aitgen.runtime.model import Model

pytestmark = pytest.mark.mock_census


@pytest.mark.parametrize("name", ["bert_base", "resnet50"])
def test_full_size_model_on_the_mock(cuda_toolchain, tmp_path, name):
    _, outputs = models.get(name)
    work = ag.compile_model(outputs, target="cuda", arch="sm_90a", precision="float16", workdir=tmp_path / name,
                            load=False)
    for graph in (False, True):
        with Model.load(work, mock_device=True, cuda_graph=graph) as m:
            feeds = {n: np.zeros(s.max_shape, s.dtype.np) for n, s in m.input_specs.items()}
            for _ in range(3 if graph else 1):
                m.run(feeds)
            run = m.mock_run()
        assert not run.failures and all(ln.from_graph for ln in run.launches) == graph
        print(f"{name} float16 sm_90a {'graph' if graph else 'eager'}: {run.summary()}; {run.operands} operands "
              f"aligned as required, {run.unpacked} below the preferred alignment")
