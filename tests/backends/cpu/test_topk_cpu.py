"""The CPU top_k kernel against the numpy oracle, in one model: values and indices exact.

Rows longer than a vector, columns (axis not last), ties, NaNs, float16 and int32, a dynamic
batch run at two sizes.
"""
import numpy as np

import aitgen as ag
from aitgen import ops


def test_top_k_cpu(tmp_path):
    rng = np.random.default_rng(5)
    b = ag.IntVar("b", 1, 4)
    xf = ag.Tensor([b, 7, 70], "float32", name="xf")
    xi = ag.Tensor([6, 5], "int32", name="xi")
    xh = ag.Tensor([5, 6], "float16", name="xh")
    outs = {}
    for largest in (True, False):
        tag = "max" if largest else "min"
        for axis, k in ((2, 5), (1, 7), (0, 1)):
            outs[f"{tag}_f{axis}_v"], outs[f"{tag}_f{axis}_i"] = ops.top_k(xf, k, axis=axis, largest=largest)
        outs[f"{tag}_i_v"], outs[f"{tag}_i_i"] = ops.top_k(xi, 3, axis=0, largest=largest)
        outs[f"{tag}_h_v"], outs[f"{tag}_h_i"] = ops.top_k(xh, 2, axis=1, largest=largest)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for n in (1, 3):
        xfv = rng.integers(-3, 4, size=(n, 7, 70)).astype(np.float32)  # ties everywhere
        xfv[0, 3, 5] = xfv[0, 1, 5] = np.nan
        xfv[:, :, 7] = np.nan
        feeds = {"xf": xfv, "xi": rng.integers(-5, 5, size=(6, 5)).astype(np.int32),
                 "xh": rng.integers(-2, 3, size=(5, 6)).astype(np.float16)}
        feeds["xh"][2, 4] = np.nan
        got = m.run(feeds)
        ref = ag.reference.run(outs, feeds)
        for k in outs:
            assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{k} (b={n})")
    m.close()
