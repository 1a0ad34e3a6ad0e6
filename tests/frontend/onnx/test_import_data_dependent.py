"""Data-dependent shapes (issue 15, item 2): shapes, axes, K, repeats and conditions fed as
run-time tensors. One CPU build holds every case; each case runs with two or three value sets
that give different output shapes on that one build, against the oracle and onnxruntime.

Tolerances: float32 outputs rtol 1e-5 / atol 1e-6 (onnx_cases.F32; reductions and cumulative
sums differ from onnxruntime only in summation order); integer and bool outputs exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

import value_sets  # noqa: I001 - tests/frontend/onnx
from onnx_cases import In, assert_close, node_model, ort_run

import aitgen as ag
from aitgen.errors import UnsupportedOpError
from aitgen.frontend import onnx as ox

R = np.random.default_rng(7)
X234 = R.standard_normal((2, 3, 4)).astype(np.float32)


def i64(*v):
    return np.array(v, np.int64)


# name -> (op, inputs (the value sets vary the run-time ones), attrs, opset, [value sets]); each
# value set maps input name -> array and replaces the first set's arrays.
CASES = {
    "reshape": ("Reshape", [In("x", X234), In("s", i64(4, -1))], {}, 17,
                [{}, {"s": i64(0, 12)}, {"s": i64(24, 1)}]),
    "expand": ("Expand", [In("x", np.arange(3, dtype=np.float32).reshape(3, 1)), In("s", i64(2, 1, 6))], {}, 17,
               [{}, {"s": i64(1, 3, 1)}]),
    "tile": ("Tile", [In("x", X234[0]), In("r", i64(2, 1))], {}, 17, [{}, {"r": i64(1, 3)}]),
    "fill": ("ConstantOfShape", [In("s", i64(2, 5))], {}, 17, [{}, {"s": i64(7, 1)}]),
    "range_f": ("Range", [In("a", np.array(1, np.float32)), In("b", np.array(5, np.float32)), In("c", np.array(0.5, np.float32))], {}, 17,
                [{}, {"c": np.array(-1.0, np.float32), "b": np.array(-2.5, np.float32)}]),
    "range_i": ("Range", [In("a", np.array(10, np.int32)), In("b", np.array(6, np.int32)), In("c", np.array(-3, np.int32))], {}, 17,
                [{}, {"b": np.array(16, np.int32), "c": np.array(2, np.int32)}]),
    "topk": ("TopK", [In("x", X234), In("k", i64(2))], {"axis": 1}, 17, [{}, {"k": i64(3)}, {"k": i64(0)}]),
    "nonzero": ("NonZero", [In("x", (X234 > 0.3))], {}, 17, [{}, {"x": X234 > 5}]),
    "compress": ("Compress", [In("x", X234), In("c", np.array([True, False, True]))], {"axis": 1}, 17,
                 [{}, {"c": np.array([False, False, False])}]),
    "rsum": ("ReduceSum", [In("x", X234), In("a", i64(1))], {"keepdims": 0}, 17,
             [{}, {"a": i64(-1)}, {"a": i64(0)}]),
    "rmax": ("ReduceMax", [In("x", X234), In("a", i64(0, 2))], {"keepdims": 1}, 18, [{}, {"a": i64(1, 0)}]),
    "cumsum": ("CumSum", [In("x", X234), In("a", i64(1))], {"reverse": 1}, 17, [{}, {"a": i64(-1)}]),
    "unsqueeze": ("Unsqueeze", [In("x", X234), In("a", i64(0, -1))], {}, 17, [{}, {"a": i64(2, 1)}]),
    "onehot": ("OneHot", [In("i", i64(0, 2, -1)), In("d", np.array([4.0], np.float32)),
                          In("v", np.array([0, 5], np.float32))], {"axis": 0}, 17, [{}, {"d": np.array([7.0], np.float32)}]),
    "split": ("Split", [In("x", X234), In("s", i64(1, 2, 0))], {"axis": 1}, 18, [{}, {"s": i64(0, 0, 3)}]),
    "slice": ("Slice", [In("x", X234), In("b", i64(0, -1)), In("e", i64(2, -4)), In("a", i64(1, 2)),
                        In("st", i64(1, -2))], {}, 17, [{}, {"b": i64(-9, 9), "e": i64(9, -9), "st": i64(2, -1)}]),
    "pad": ("Pad", [In("x", X234), In("p", i64(0, 1, -1, 0, 2, 1)), In("v", np.array(2.5, np.float32))], {}, 17,
            [{}, {"p": i64(1, 0, 0, 0, -2, 3)}]),
    "pad_reflect": ("Pad", [In("x", X234), In("p", i64(0, 2, 1, 0, 1, 3))], {"mode": "reflect"}, 17,
                    [{}, {"p": i64(1, 0, 0, 1, 2, 0)}]),
    "nms": ("NonMaxSuppression", [In("bx", np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3], [0, 2.2, 1, 3.2]]],
                                                 np.float32)),
                                  In("sc", np.array([[[0.9, 0.8, 0.7, 0.95]]], np.float32)), In("m", i64(3)),
                                  In("iou", np.array([0.5], np.float32)), In("st", np.array([0.0], np.float32))],
            {}, 11, [{}, {"m": i64(1)}, {"st": np.array([0.99], np.float32)}]),
    "unique": ("Unique", [In("x", np.array([[1, 3], [1, 3], [0, 9], [1, 3]], np.int64))], {"axis": 0, "sorted": 0}, 11,
               [{}, {"x": np.array([[2, 2], [1, 1], [0, 0], [5, 5]], np.int64)}]),
    "unique_flat": ("Unique", [In("x", np.array([2.0, 1.0, 2.0, -3.0, 1.0], np.float32))], {}, 11,
                    [{}, {"x": np.array([4.0, 4.0, 4.0, 4.0, 4.0], np.float32)}]),
    "hann": ("HannWindow", [In("n", np.array(5, np.int64))], {"periodic": 0}, 17, [{}, {"n": np.array(8, np.int64)}]),
    "revseq": ("ReverseSequence", [In("x", X234[0]), In("l", i64(2, 1, 3))], {"batch_axis": 0, "time_axis": 1}, 17,
               [{}, {"l": i64(4, 0, 2)}]),
    "ccp": ("CenterCropPad", [In("x", X234), In("s", i64(5, 2))], {"axes": [1, 2]}, 18, [{}, {"s": i64(1, 7)}]),
    "squeeze": ("Squeeze", [In("x", X234[:1, :, :1]), In("a", i64(0, 2))], {}, 17, [{}, {"a": i64(-1, 0)}]),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One CPU model over every case: (model, {case: (outputs, model proto, value sets)})."""
    m, table = value_sets.build(CASES, tmp_path_factory.mktemp("dd") / "m",
                                n_out=lambda op: {"TopK": 2, "Split": 3, "Unique": 4}.get(op, 1))
    yield m, table
    m.close()


@pytest.mark.parametrize("name", list(CASES))
def test_against_oracle_and_onnxruntime(built, name):
    m, table = built
    shapes = value_sets.check_value_sets(m, table, name, ort_run, assert_close)
    # the value sets give different shapes on one build: the dims are bound per run (a scan along
    # another axis, squeezing the same 1s named otherwise, or reversing other lengths keeps the shape)
    assert len(shapes) == (1 if name in ("cumsum", "squeeze", "revseq") else len(table[name][2])), shapes


BAD = [("reshape", {"s": i64(5, -1)}, r"Reshape.*cannot (infer|reshape)"),
       ("expand", {"s": i64(2, 2, 6)}, r"Expand.*cannot expand"),
       ("topk", {"k": i64(4)}, r"TopK.*exceeds 3"),
       ("rsum", {"a": i64(3)}, r"ReduceSum.*axis 3 is out of range for rank 3"),
       ("squeeze", {"a": i64(1, 0)}, r"Squeeze.*cannot squeeze"),
       ("split", {"s": i64(1, 1, 0)}, r"Split.*add up to 2, not the axis size 3"),
       ("slice", {"st": i64(1, 0)}, r"Slice.*step 0 on axis 2"),
       ("pad", {"p": i64(0, -3, 0, 0, -1, 0)}, r"Pad.*leave axis 1 of size 3 negative"),
       ("range_i", {"c": np.array(0, np.int32)}, r"Range.*delta is 0"),
       ("fill", {"s": i64(2000, 2000)}, r"ConstantOfShape.*outside its bounds")]


@pytest.mark.parametrize("name,bad,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_values_are_typed_errors_naming_the_node(built, name, bad, msg):
    m, table = built
    value_sets.check_refused(m, table, name, bad, msg, usable_after=table[name][2][:1])


def test_outputs_have_the_actual_shape_not_the_bound(tmp_path):
    x = ag.Tensor([ag.IntVar("n", 1, 100)], dtype="float32", name="x")
    y = ag.ops.nonzero(x, name="nz")
    assert y.shape[1].upper == 100 and y.shape[1].produced
    with ag.compile_model({"y": y}, target="cpu", workdir=str(tmp_path / "nz")) as m:
        for v in (np.array([0, 1, 0, 2], np.float32), np.zeros(7, np.float32), np.ones(100, np.float32)):
            out = m.run({"x": v})["y"]
            np.testing.assert_array_equal(out, np.array(np.nonzero(v)))
            assert out.shape == (1, int((v != 0).sum()))


def test_cuda_refuses_sizes_bound_during_the_run():
    from aitgen.codegen.lower import lower_graph
    from aitgen.compiler import compile_options
    from aitgen.ir.graph import Graph
    from aitgen.memory import plan_memory
    from aitgen.passes import PIPELINE, run_pipeline
    x = ag.Tensor([6], dtype="float32", name="x")
    y = ag.ops.relu(ag.ops.nonzero(x, name="nz_op"))
    opts = compile_options(target="cuda", arch="sm_80")
    graph = run_pipeline(Graph.from_outputs({"y": y}), opts, list(PIPELINE))
    with pytest.raises(UnsupportedOpError, match=r"nonzero 'nz_op' binds sizes during the run.*cuda"):
        lower_graph(graph, plan_memory(graph, opts.caps), "cuda", arch="sm_80", opts=opts)


def test_still_unsupported_inputs_are_typed_refusals():
    # Resize of a dim only the run knows: the taps need its length: a typed refusal naming node, op
    # and opset (run-time scales of static dims are taken: test_import_resize_runtime.py)
    x = In("x", X234.reshape(1, 2, 3, 4), dims=["N", 2, 3, 4])
    model = node_model("Resize", [x, None, In("sc", np.array([2, 1, 2, 2], np.float32))], {}, opset=19)
    with pytest.raises(UnsupportedOpError, match=r"node '.*' \(Resize, opset 19\).*must be static"):
        ox.load(model)


def test_a_size_bound_for_an_unused_output_still_has_a_slot(tmp_path):
    # Split's middle part is dropped: its size is still written by the binding kernel
    model = node_model("Split", [In("x", X234), In("s", i64(1, 1, 1))], {"axis": 1}, opset=18, n_out=3)
    _, outs = ox.load(model)
    with ag.compile_model({"a": outs["y0"], "c": outs["y2"]}, target="cpu", workdir=str(tmp_path / "m")) as m:
        got = m.run({"x": X234, "s": i64(2, 0, 1)})
    np.testing.assert_array_equal(got["a"], X234[:, :2])
    np.testing.assert_array_equal(got["c"], X234[:, 2:])
