"""ONNX Loop and Scan (ops_loop.py: unrolled at import time) against onnx's numpy reference
(onnx.reference) and onnxruntime, through the oracle and ONE CPU build for all cases.

Covers: Scan with two states and two scan inputs, a reversed input, an input scanned along
axis 1, an output stacked along axis 1 and a reversed output; a Scan body that reads an outer-scope
weight fed at run time (an Elman RNN written as Scan); opset-8 Scan (batch axis); Loop with a
constant trip count, iteration-number indexing and scan outputs; Loop whose condition the body
computes at run time (carried values held after it turns false); Loop with a trip count or
condition fed at run time (unrolled to a bound, scan outputs cut to the iterations that ran, a run
past the bound refused); typed refusals. Tolerance:
rtol 1e-5 / atol 1e-6 (float32 both sides, the same op order).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, TensorProto, case, check_cases_ref, helper, numpy_helper, rand

from aitgen.frontend import onnx as ox
from aitgen.frontend.onnx import loop_host, ops_loop

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _graph(nodes, ins, outs, inits=()):
    return helper.make_graph(nodes, "body", ins, outs, list(inits))


def _scan_body():
    # s1' = s1 + a_t; s2' = s2 * 0.5 + b_t; outputs s1' and (s1' - b_t)
    nodes = [helper.make_node("Add", ["s1", "a"], ["s1o"]),
             helper.make_node("Mul", ["s2", "half"], ["h"]), helper.make_node("Add", ["h", "b"], ["s2o"]),
             helper.make_node("Sub", ["s1o", "b"], ["d"]), helper.make_node("Identity", ["s1o"], ["e"])]
    return _graph(nodes, [vi("s1", F, [3]), vi("s2", F, [3]), vi("a", F, [3]), vi("b", F, [3])],
                  [vi("s1o", F, [3]), vi("s2o", F, [3]), vi("e", F, [3]), vi("d", F, [3])],
                  [numpy_helper.from_array(np.array(0.5, np.float32), "half")])


def _elman_body():
    # h' = tanh(h @ W + x_t): W comes from the enclosing graph (a run-time input there)
    nodes = [helper.make_node("MatMul", ["h", "W"], ["hw"]), helper.make_node("Add", ["hw", "x"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["ho"]), helper.make_node("Identity", ["ho"], ["y"])]
    return _graph(nodes, [vi("h", F, [2, 4]), vi("x", F, [2, 4])], [vi("ho", F, [2, 4]), vi("y", F, [2, 4])])


def _loop_body():
    # acc' = acc + table[i]; scan output acc' * i
    nodes = [helper.make_node("Gather", ["table", "i"], ["row"], axis=0),
             helper.make_node("Add", ["acc", "row"], ["acc_o"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", ["acc_o", "fi"], ["s"]),
             helper.make_node("Identity", ["c"], ["c_o"])]
    return _graph(nodes, [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("acc", F, [2])],
                  [vi("c_o", TensorProto.BOOL, []), vi("acc_o", F, [2]), vi("s", F, [2])])


def _doubling_body():
    # x' = x * 2; keep going while sum(x') < limit (limit from the enclosing graph, run-time)
    nodes = [helper.make_node("Mul", ["x", "two"], ["xo"]), helper.make_node("ReduceSum", ["xo"], ["sm"], keepdims=0),
             helper.make_node("Less", ["sm", "limit"], ["c_o"])]
    return _graph(nodes, [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("x", F, [3])],
                  [vi("c_o", TensorProto.BOOL, []), vi("xo", F, [3])],
                  [numpy_helper.from_array(np.array(2.0, np.float32), "two")])


def _scan8_body():
    nodes = [helper.make_node("Add", ["s", "x"], ["so"]), helper.make_node("Identity", ["so"], ["y"])]
    return _graph(nodes, [vi("s", F, [2]), vi("x", F, [2])], [vi("so", F, [2]), vi("y", F, [2])])


def _with_outer(c, name, value):
    """Add a graph input that a body reads from the enclosing scope."""
    c.model.graph.input.append(vi(name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
    c.feeds[name] = value
    return c


def _cases():
    table = rand((5, 2), seed=3)
    return [
        case("scan_axes_directions", "Scan",
             [In("s1", rand((3,), seed=1)), In("s2", rand((3,), seed=2)), In("a", rand((4, 3), seed=4)),
              In("b", rand((3, 4), seed=5))],
             {"body": _scan_body(), "num_scan_inputs": 2, "scan_input_axes": [0, 1], "scan_input_directions": [0, 1],
              "scan_output_axes": [0, 1], "scan_output_directions": [1, 0]}, opset=16, n_out=4,
             ref=False),  # onnx.reference's Scan knows no directions: onnxruntime is the reference
        _with_outer(case("scan_elman_outer_weight", "Scan",
                         [In("h0", rand((2, 4), seed=6)), In("xs", rand((5, 2, 4), seed=7))],
                         {"body": _elman_body(), "num_scan_inputs": 1}, opset=16, n_out=2, infer=False),
                    "W", rand((4, 4), -0.5, 0.5, seed=8)),
        case("scan8_batch", "Scan", [None, In("s0", rand((2, 2), seed=9)), In("xs", rand((2, 3, 2), seed=10))],
             {"body": _scan8_body(), "num_scan_inputs": 1, "directions": [1]}, opset=8, n_out=2,
             ref=False),  # onnx.reference has no opset-8 Scan
        _with_outer(case("loop_const_trips_scan_out", "Loop",
                         [In("M", np.array(5, np.int64), True), In("cond", np.array(True), True),
                          In("acc0", rand((2,), seed=11))], {"body": _loop_body()}, opset=16, n_out=2, infer=False),
                    "table", table),
        _with_outer(case("loop_runtime_condition", "Loop",
                         [In("M", np.array(10, np.int64), True), None,
                          In("x0", np.array([0.5, 1.0, 0.25], np.float32))],
                         {"body": _doubling_body()}, opset=16, n_out=1, infer=False,
                         ref=False),  # onnx.reference runs no iteration when cond is omitted: ORT is the reference
                    "limit", np.array(20.0, np.float32)),
    ]


def test_loop_and_scan_match_numpy_reference_and_onnxruntime(tmp_path):
    cases = _cases()
    check_cases_ref(cases, tmp_path / "loop")
    # the run-time condition at another limit: a different number of iterations takes effect
    c = cases[-1]
    c.feeds["limit"] = np.array(3.0, np.float32)
    check_cases_ref([c], tmp_path / "loop2")


def test_runtime_condition_holds_values_where_the_loop_stopped():
    import aitgen as ag
    c = _cases()[-1]
    _, outs = ox.load(c.model)
    for limit, want in ((20.0, [8.0, 16.0, 4.0]), (3.0, [1.0, 2.0, 0.5]), (0.5, [1.0, 2.0, 0.5])):
        got = ag.reference.run(outs, {"x0": c.feeds["x0"], "limit": np.array(limit, np.float32)})
        np.testing.assert_array_equal(list(got.values())[0], np.array(want, np.float32))


def _loop_model(m_const: bool, trips: int, scan_out: bool = True, runtime_cond: bool = False):
    ins = [In("M", np.array(trips, np.int64), m_const), In("cond", np.array(True), not runtime_cond),
           In("acc0", rand((2,), seed=1))]
    c = case("l", "Loop", ins, {"body": _loop_body()}, opset=16, n_out=2, infer=False)
    return _with_outer(c, "table", rand((max(trips, 1), 2))).model


def test_runtime_trip_count_and_condition_with_scan_outputs(tmp_path):
    # M fed at run time: one LOOP op whose scan output has the length of the iterations that ran.
    # One build serves M = 3, 5, 1 and 0 (an empty scan output, which onnx.reference cannot run:
    # checked here by its definition); M = 6 gathers row 5 of the 5-row table, which the body's
    # Gather refuses.
    import aitgen as ag
    from aitgen.errors import RuntimeInputError
    rt_m = case("loop_runtime_m", "Loop", [In("M", np.array(3, np.int64)), In("cond", np.array(True), True),
                                           In("acc0", rand((2,), seed=1))],
                {"body": _loop_body()}, opset=16, n_out=2, infer=False,
                sizes=[{"M": np.array(5, np.int64)}, {"M": np.array(1, np.int64)}])
    rt_c = case("loop_runtime_cond_scan", "Loop", [In("M", np.array(4, np.int64), True), In("cond", np.array(True)),
                                                   In("acc0", rand((2,), seed=2))],
                {"body": _loop_body()}, opset=16, n_out=2, infer=False)
    cases = [_with_outer(rt_m, "table", rand((5, 2), seed=3)), _with_outer(rt_c, "table", rand((5, 2), seed=4))]
    check_cases_ref(cases, tmp_path / "rt")
    # cond false on entry: no iteration (onnx.reference cannot run it), by the definition
    _, outs_c = ox.load(cases[1].model)
    got = ag.reference.run(outs_c, {**cases[1].feeds, "cond": np.array(False)})
    np.testing.assert_array_equal(got["y0"], cases[1].feeds["acc0"])
    assert got["y1"].shape == (0, 2)
    _, outs = ox.load(cases[0].model)
    # one LOOP op (frontend/onnx/loop_host.py): the scan output holds up to SCAN_MAX_TRIPS slices
    assert [str(d) for d in outs["y1"].shape][1:] == ["2"] and outs["y1"].shape[0].ub == loop_host.SCAN_MAX_TRIPS
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = dict(cases[0].feeds)
    want = m.run(feeds)
    zero = m.run({**feeds, "M": np.array(0, np.int64)})
    np.testing.assert_array_equal(zero["y0"], feeds["acc0"])
    assert zero["y1"].shape == (0, 2)
    with pytest.raises(RuntimeInputError, match="Loop_0: iteration 5: .*index 5"):  # the body's Gather of row 5
        m.run({**feeds, "M": np.array(6, np.int64)})
    got = m.run(feeds)  # a refused run leaves the model usable
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    m.close()


def test_runtime_trip_count_past_the_old_unrolled_bound_runs():
    # A run-time M above the RUNTIME_TRIPS the unrolled form allowed: one LOOP op runs any count.
    import aitgen as ag
    c = _with_outer(case("l", "Loop", [In("M", np.array(3, np.int64)), None, In("x0", np.ones(3, np.float32))],
                         {"body": _doubling_body()}, opset=16, infer=False), "limit", np.array(1e30, np.float32))
    _, outs = ox.load(c.model)
    n = ops_loop.RUNTIME_TRIPS + 1
    x0 = np.ones(3, np.float32)
    got = ag.reference.run(outs, {"M": np.array(n, np.int64), "x0": x0, "limit": np.array(1e30, np.float32)})
    np.testing.assert_array_equal(list(got.values())[0], x0 * 2.0 ** n)
    # the condition stops it: the sum 3 * 2**k reaches 1e30 first at k = 99
    got = ag.reference.run(outs, {"M": np.array(1000, np.int64), "x0": x0, "limit": np.array(1e30, np.float32)})
    np.testing.assert_array_equal(list(got.values())[0], x0 * 2.0 ** 99)


def test_static_trip_count_past_the_unrolling_cap_is_one_loop():
    import aitgen as ag
    m = _loop_model(True, ops_loop.MAX_ITERATIONS + 1)
    _, outs = ox.load(m)
    loops = [op for op in ag.Graph.from_outputs(outs).ops if op.kind.value == "loop"]
    assert len(loops) == 1 and loops[0].attrs.max_trips == ops_loop.MAX_ITERATIONS + 1
    assert [str(d) for d in outs["y1"].shape] == [str(ops_loop.MAX_ITERATIONS + 1), "2"]
