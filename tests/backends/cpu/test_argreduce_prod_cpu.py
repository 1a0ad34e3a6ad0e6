"""CPU kernels of argmax / argmin, reduce_prod and cumsum / cumprod against the numpy oracle,
in one model.

Indices and integer products and scans are exact; float32 products rtol 1e-5 (the kernel
multiplies in a different order than numpy: lanes, then a combine); float scans rtol 1e-5 (the
same order as numpy; float16 rounds once at the store, as the oracle does).
"""
import numpy as np

import aitgen as ag
from aitgen import ops


def test_arg_reduce_and_prod_cpu(tmp_path):
    rng = np.random.default_rng(11)
    b = ag.IntVar("b", 1, 8)
    xf = ag.Tensor([b, 7, 130], "float32", name="xf")   # inner 130 > one 64-column block
    xi = ag.Tensor([4, 9], "int32", name="xi")
    xh = ag.Tensor([5, 6], "float16", name="xh")
    outs = {}
    for kind in ("argmax", "argmin"):
        fn = getattr(ops, kind)
        for last in (False, True):
            tag = f"{kind}_{'last' if last else 'first'}"
            for axis in (0, 1, 2):
                outs[f"{tag}_f{axis}"] = fn(xf, axis=axis, keepdims=axis != 1, select_last_index=last)
            outs[f"{tag}_i"] = fn(xi, axis=1, keepdims=False, select_last_index=last)
            outs[f"{tag}_h"] = fn(xh, axis=0, select_last_index=last)
    outs["prod_row"] = ops.reduce_prod(xf, 2)
    outs["prod_col"] = ops.reduce_prod(xf, (0, 1), keepdims=True)
    outs["prod_int"] = ops.reduce_prod(xi, 1)
    for kind in ("cumsum", "cumprod"):  # scans: inclusive/exclusive, forward/reversed, row and column axes
        fn = getattr(ops, kind)
        outs[f"{kind}_f2"] = fn(xf, 2, exclusive=True)
        outs[f"{kind}_f1"] = fn(xf, 1, reverse=True)
        outs[f"{kind}_i"] = fn(xi, 0, exclusive=True, reverse=True)
        outs[f"{kind}_h"] = fn(xh, 1)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for n in (1, 3):
        xfv = rng.integers(-3, 4, size=(n, 7, 130)).astype(np.float32)  # ties everywhere
        xfv[0, 3, 5] = np.nan
        xfv[:, :, 7] = np.nan
        feeds = {"xf": xfv, "xi": rng.integers(-50, 50, size=(4, 9)).astype(np.int32),
                 "xh": rng.integers(-2, 3, size=(5, 6)).astype(np.float16)}
        # Products of factors near 1 keep float32 in range: a 130-long row of [-3, 3] would overflow.
        feeds["xf"] = np.where(np.isnan(xfv), xfv, 1.0 + xfv / 64).astype(np.float32)
        got = m.run(feeds)
        ref = ag.reference.run(outs, feeds)
        for k in outs:
            assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
            if k in ("prod_row", "prod_col") or k.startswith("cum") and not k.endswith("_i"):
                np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, equal_nan=True, err_msg=k)
            else:
                np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
