"""ScatterElements / ScatterND with indices fed at run time, MaxUnpool and TensorScatter (all the
scatter_nd op, ops/scatter.py):
against onnx's numpy reference and onnxruntime, in ONE CPU build; and an out-of-range index,
which the oracle and the CPU kernel both refuse as a bad run-time input naming the op.

Cases: every reduction (none/add/mul/max/min), negative and duplicate indices (duplicates only
where the result is defined: a reduction, or onnx.reference's in-order rule for 'none' without
onnxruntime), int32 and int64 indices, index depths 1, 2 and 3 (a whole-element ScatterND),
float16 data. Tolerance: rtol 1e-3 / atol 1e-3 for the scatters, set by float16 (one rounding per
reduction step, computed in float32 then stored; float32 cases agree to ~1e-7); MaxUnpool and
TensorScatter move values only: rtol 1e-6 / atol 1e-6; integers exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand, used_inputs

import aitgen as ag
from aitgen.errors import RuntimeInputError
from aitgen.frontend import onnx as ox
from aitgen.ir.graph import topo_order
from aitgen.ir.op import OpKind

TOL = dict(rtol=1e-3, atol=1e-3)  # the loosest case (float16) sets it; float32 cases agree far closer
I64, I32 = np.int64, np.int32


def _elements_cases():
    cs = []
    data = rand((3, 5), seed=1)
    idx = np.array([[1, -1, 4], [0, 0, 2], [-5, 3, 3]], I64)  # negatives and duplicates within rows
    upd = rand((3, 3), seed=2)
    for red in ("add", "mul", "max", "min"):
        cs.append(case(f"se_{red}", "ScatterElements", [In("x", data), In("i", idx), In("u", upd)],
                       {"axis": 1, "reduction": red}, opset=18))
    perm = np.array([[2, 0, 1, 4, 3]], I32)  # no duplicates: every engine agrees on 'none'
    cs.append(case("se_none_i32_axis0", "ScatterElements",
                   [In("x", rand((4, 5), seed=3)), In("i", np.array([[3, 1, -4, 0, 2]], I32)), In("u", rand((1, 5), seed=4))],
                   {"axis": 0}, opset=18))
    cs.append(case("se_none_perm", "ScatterElements", [In("x", rand((2, 5), seed=5)), In("i", perm),
                                                       In("u", rand((1, 5), seed=6))], {"axis": -1}, opset=18))
    # duplicates with 'none': onnx.reference applies them in order (the later wins), as we do
    cs.append(case("se_none_dup", "ScatterElements", [In("x", data), In("i", idx), In("u", upd)], {"axis": 1},
                   opset=18, ort=False))
    cs.append(case("se_add_f16", "ScatterElements", [In("x", data.astype(np.float16)), In("i", idx),
                                                     In("u", upd.astype(np.float16))],
                   {"axis": 1, "reduction": "add"}, opset=18, ort=False))
    cs.append(case("se_int_max", "ScatterElements", [In("x", np.arange(15, dtype=I64).reshape(3, 5)), In("i", idx),
                                                     In("u", np.arange(9, dtype=I64).reshape(3, 3) * 3)],
                   {"axis": 1, "reduction": "max"}, opset=18))
    return cs


def _nd_cases():
    cs = []
    data = rand((4, 3, 2), seed=7)
    i1 = np.array([[1], [-1], [1]], I64)                       # rows of [3, 2], one duplicate
    u1 = rand((3, 3, 2), seed=8)
    for red in ("add", "mul", "max", "min"):
        cs.append(case(f"snd_{red}", "ScatterND", [In("x", data), In("i", i1), In("u", u1)], {"reduction": red}, opset=18))
    i2 = np.array([[[0, 2], [3, -1]], [[1, 0], [2, 1]]], I64)  # [2, 2, 2]: pairs -> rows of [2]
    cs.append(case("snd_none_k2", "ScatterND", [In("x", data), In("i", i2), In("u", rand((2, 2, 2), seed=9))], opset=18))
    i3 = np.array([[0, 0, 1], [3, 2, 0]], I32)                 # whole elements
    cs.append(case("snd_none_k3_i32", "ScatterND", [In("x", data), In("i", i3), In("u", rand((2,), seed=10))],
                   opset=18, ort=False))  # onnxruntime takes only int64 indices for ScatterND
    return cs


def test_runtime_scatter_matches_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_elements_cases() + _nd_cases(), tmp_path / "scatter", TOL)


def test_runtime_scatter_indices_are_data_and_are_bounds_checked(tmp_path):
    c = case("snd_bad", "ScatterND", [In("x", rand((4, 3), seed=11)), In("i", np.array([[1], [2]], I64)),
                                      In("u", rand((2, 3), seed=12))], {"reduction": "add"}, opset=18)
    _, outs = ox.load(c.model)
    # the indices stay a graph input read by the scatter_nd kernel (nothing was frozen at import)
    assert "i" in {t.name for t in used_inputs(outs).values()}
    assert OpKind.SCATTER_ND in {op.kind for op in topo_order(outs.values())[0]}
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "bad")
    good = {"x": c.feeds["x"], "u": c.feeds["u"], "i": np.array([[3], [-4]], I64)}
    want = c.feeds["x"].copy()
    want[3] += c.feeds["u"][0]
    want[0] += c.feeds["u"][1]
    np.testing.assert_allclose(m.run(good)["y"], want, rtol=1e-6, atol=1e-6)
    for bad in (np.array([[1], [4]], I64), np.array([[-5], [0]], I64)):
        feeds = {**good, "i": bad}
        with pytest.raises(RuntimeInputError, match="out of range"):
            ag.reference.run(outs, feeds)
        with pytest.raises(RuntimeInputError, match="out of range"):
            m.run(feeds)
    # a refused run leaves the model usable, and it wrote nothing: the next run is exact
    np.testing.assert_allclose(m.run(good)["y"], want, rtol=1e-6, atol=1e-6)
    m.close()


def _unpool_and_cache_cases():
    # MaxUnpool: indices as MaxPool gives them (flat over N*C*H*W), one case with a larger output_shape
    x = rand((1, 2, 2, 2), seed=13)
    ind = np.array([[[[5, 7], [13, 15]], [[16, 19], [25, 31]]]], I64)
    cs = [case("unpool", "MaxUnpool", [In("x", x), In("i", ind)], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=22),
          # A larger output_shape: onnx's reference and its node test keep the inferred [4, 4] result in
          # the leading corner (indices address the inferred shape); onnxruntime 1.32 reads the
          # indices as flat positions in the output_shape instead, and fails that node test. We
          # follow onnx, so onnxruntime is not asked here.
          case("unpool_shape", "MaxUnpool", [In("x", x), In("i", ind), In("s", np.array([1, 2, 5, 5], I64), True)],
               {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=22, ort=False)]
    # TensorScatter: a [B, H, M, D] cache written at per-batch positions, linear and circular (wraps)
    past, upd = rand((2, 3, 6, 4), seed=14), rand((2, 3, 3, 4), seed=15)
    for mode, w in (("linear", [0, 3]), ("circular", [2, 5])):
        cs.append(case(f"tscatter_{mode}", "TensorScatter", [In("p", past), In("u", upd), In("w", np.array(w, I64))],
                       {"mode": mode, "axis": 2}, opset=24))
    return cs


def test_max_unpool_and_tensor_scatter_match_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_unpool_and_cache_cases(), tmp_path / "unpool", dict(rtol=1e-6, atol=1e-6))


def test_scatter_nd_op_over_storage_dtypes(tmp_path):
    # The op directly, one reduction per dtype (bool moves bits; the others compute in their
    # compute type and round on store, as the oracle does): exact agreement.
    from aitgen import ops
    outs, feeds = {}, {}
    rng = np.random.default_rng(0)
    for dt, red in (("bool", "none"), ("uint8", "add"), ("int16", "max"), ("bfloat16", "mul"), ("float64", "min")):
        d, i, u = (ag.Tensor(s, dtype=t, name=f"{n}_{dt}") for n, s, t in
                   (("d", [4, 3], dt), ("i", [2, 1], "int64"), ("u", [2, 3], dt)))
        outs[dt] = ops.scatter_nd(d, i, u, red)
        feeds.update({f"d_{dt}": rng.integers(0, 5, (4, 3)).astype(d.dtype.np), f"u_{dt}": rng.integers(0, 5, (2, 3)).astype(d.dtype.np),
                      f"i_{dt}": np.array([[2], [-2]], I64)})  # both tuples hit row 2: the order matters
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "dtypes")
    got, ref = m.run(feeds), ag.reference.run(outs, feeds)
    for k in outs:
        assert got[k].dtype == ref[k].dtype, k
        np.testing.assert_array_equal(got[k].astype(np.float64), ref[k].astype(np.float64), err_msg=k)
    m.close()
