"""Hostile names through the int8 path: the quantize_int8 pass derives new constant names from the
weights' (`<name>_int8`, scales), and the int8 kernels render from the ops. A model whose input,
weights and output carry quotes, backslashes, newlines, comment ends and preprocessor lines builds,
gives the very bits the same model with plain names gives, and refuses a bad run by name."""
import json

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import RuntimeInputError
from aitgen.ir.tensor import constant

HOSTILE = ['x"; system("rm -rf /"); //', "w\\n*/ #include <evil>\n", "b'\x01", "y */ }; int main(){ //"]


def _mlp(names):
    rng = np.random.default_rng(0)
    xn, wn, bn, yn = names
    x = ag.Tensor([4, 16], dtype="float32", name=xn)
    w = constant(rng.standard_normal((16, 8)).astype(np.float32), name=wn)
    b = constant(rng.standard_normal(8).astype(np.float32), name=bn)
    return {yn: ops.relu(ops.gemm(x, w, b))}


def test_int8_build_with_hostile_names(tmp_path):
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(3)]
    plain = ["x", "w", "b", "y"]
    built = {}
    for tag, names in (("plain", plain), ("hostile", HOSTILE)):
        built[tag] = ag.compile_model(_mlp(names), target="cpu", workdir=tmp_path / tag, precision="int8",
                                      calibration=[{names[0]: f} for f in feeds])
    x = rng.standard_normal((4, 16)).astype(np.float32)
    want = built["plain"].run({"x": x})["y"]
    m = built["hostile"]
    got = m.run({HOSTILE[0]: x})[HOSTILE[3]]
    np.testing.assert_array_equal(got, want)   # the names change nothing of the numbers
    report = json.loads((tmp_path / "hostile" / "report.json").read_text())
    assert report["precision"]["int8"] == {"qgemm": 1}, report["precision"]   # the int8 kernel ran
    fp32 = ag.reference.run(_mlp(plain), {"x": x})["y"]
    assert np.abs(got - fp32).max() <= 0.05 * np.abs(fp32).max()
    with pytest.raises(RuntimeInputError, match="system"):   # a wrong shape, named by its input
        m.run({HOSTILE[0]: np.zeros((4, 15), np.float32)})
    np.testing.assert_array_equal(m.run({HOSTILE[0]: x})[HOSTILE[3]], want)   # still usable
    for mm in built.values():
        mm.close()


def _residual(names):
    """A downsample-like conv read only as a residual (quantize_int8._residual_only derives its
    `<name>_out_scale` constant from the result's name) beside a conv read as x."""
    rng = np.random.default_rng(2)
    xn, dn, yn = names
    x = ag.Tensor([1, 6, 6, 8], dtype="float32", name=xn)
    w1 = constant((rng.standard_normal((8, 1, 1, 8)) * 0.3).astype(np.float32), name="w1")
    w2 = constant((rng.standard_normal((8, 3, 3, 8)) * 0.3).astype(np.float32), name="w2")
    wd = constant((rng.standard_normal((8, 1, 1, 8)) * 0.3).astype(np.float32), name="wd")
    d = ops.conv2d(x, wd, name=dn)
    h = ops.relu(ops.conv2d(x, w1))
    return {yn: ops.relu(ops.add(ops.conv2d(h, w2, padding=1), d))}


def test_int8_residual_scale_with_hostile_names(tmp_path):
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((1, 6, 6, 8)).astype(np.float32)} for _ in range(3)]
    test = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    outs = {}
    for tag, names in (("plain", ["x", "d", "y"]), ("hostile", [HOSTILE[0], HOSTILE[1], HOSTILE[3]])):
        model_outs = _residual(names)
        calib = [{names[0]: f["x"]} for f in feeds]
        m = ag.compile_model(model_outs, target="cpu", workdir=tmp_path / tag, precision="int8", calibration=calib)
        prec = json.loads((tmp_path / tag / "report.json").read_text())["precision"]["by_kind"]["qconv2d"]
        assert any(k.endswith("-> i8") for k in prec), prec   # the residual-only conv stored int8
        outs[tag] = m.run({names[0]: test})[names[2]]
        m.close()
    np.testing.assert_array_equal(outs["plain"], outs["hostile"])
