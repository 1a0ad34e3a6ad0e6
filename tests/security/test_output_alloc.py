"""Outputs are allocated at the size a run gives, not at the bounds': a legal but huge bound costs
nothing on a small run; errors quote long user names whole."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import RuntimeInputError


def test_huge_bound_small_run_allocates_exactly(tmp_path):
    b = ag.IntVar("b", 1, 2**40)  # 2**40 x 64 float32 outputs would be 256 TiB
    x = ag.Tensor([b, 64], "float32", name="x")
    y = ops.relu(x) * 3.0
    with ag.compile_model({"y": y, "s": ops.reduce_sum(x, [1])}, target="cpu", workdir=tmp_path / "m") as m:
        feeds = {"x": np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)}
        assert m.output_shapes([(3, 64)]) == [(3, 64), (3,)]
        got, want = m.run(feeds), ag.reference.run({"y": y, "s": ops.reduce_sum(x, [1])}, feeds)
        for k in want:
            assert got[k].shape == want[k].shape
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
        with pytest.raises(RuntimeInputError, match="outside its bounds"):
            m.output_shapes([(0, 64)])


def test_bound_error_quotes_a_long_name_whole(tmp_path):
    name = "input_" + "n" * 1500
    x = ag.Tensor([ag.IntVar("batch_" + "v" * 1500, 1, 4), 2], "float32", name=name)
    with ag.compile_model({"y": ops.relu(x)}, target="cpu", workdir=tmp_path / "m") as m:
        with pytest.raises(RuntimeInputError) as e:
            m.run({name: np.ones((5, 2), np.float32)})
        assert name in str(e.value) and "v" * 1500 in str(e.value)
