"""GPU tier: multi-stream scheduling (compile_model(..., streams=N)) on a real device, where kernels
of different streams do run at once. The mock device proves the ordering (every read after the write
it reads, tests/backends/cuda/mock/test_mock_streams.py); here the numbers must equal the oracle's,
run after run, eager and as CUDA graphs. Towers wide enough (2048 x 256 float32) that a kernel runs
for microseconds, so a missing wait would show as a wrong result rather than hide in launch gaps."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen.runtime.model import Model
from cuda_helpers import towers

ROWS, WIDTH = 2048, 256


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, 2])
def test_towers_on_three_streams_equal_the_oracle(gpu_arch, tmp_path, seed):
    outs = towers(seed, width=WIDTH, batch=ROWS)
    work = ag.compile_model(outs, target="cuda", arch=gpu_arch, workdir=tmp_path / "m", streams=3, load=False)
    assert "AIT_STREAMS_BEGIN(" in (work / "obj" / "src" / "model.cu").read_text()  # the towers do run apart
    rng = np.random.default_rng(seed)
    for graph in (False, True):
        with Model.load(work, cuda_graph=graph) as model:
            for rows in (ROWS, ROWS, 7, ROWS):   # a smaller batch between: graphs per shape, buffers reused
                feeds = {"x": rng.standard_normal((rows, WIDTH)).astype(np.float32)}
                want = ag.reference.run(outs, feeds)
                got = model.run(feeds)
                for name in outs:
                    scale = max(float(np.max(np.abs(want[name]))), 1.0)
                    np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4 * scale,
                                               err_msg=f"{name}, cuda_graph={graph}, rows={rows}")
