"""ONNX shape and data-movement ops: import, oracle and one CPU build against onnxruntime; opset
differences; dynamic dims through Shape chains folded at import time.

Tolerances: see onnx_cases.py (float32 rtol 1e-5 / atol 1e-6; integers and bools exact).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import (
    Case,
    In,
    TensorProto,
    assert_close,
    case,
    check_cases,
    helper,
    ints,
    numpy_helper,
    onnx,
    ort_run,
    rand,
    used_inputs,
)

import aitgen as ag
from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox
from aitgen.ir.graph import topo_order
from aitgen.ir.op import OpKind

X = rand((2, 3, 4, 5))
I64 = np.int64


def c64(v):
    return np.asarray(v, I64)


def _cases():
    x3 = rand((4, 6, 5), seed=1)
    cs = [
        case("reshape", "Reshape", [In("x", X), In("s", c64([0, -1, 5]), True)]),
        case("flatten0", "Flatten", [In("x", X)], {"axis": 0}),
        case("flatten2", "Flatten", [In("x", X)], {"axis": 2}),
        case("flatten_neg", "Flatten", [In("x", X)], {"axis": -1}),
        case("squeeze11", "Squeeze", [In("x", rand((3, 1, 4, 1)))], {"axes": [1, -1]}, opset=11),
        case("squeeze13", "Squeeze", [In("x", rand((3, 1, 4, 1))), In("a", c64([-1]), True)], opset=13),
        case("squeeze_all", "Squeeze", [In("x", rand((3, 1, 4, 1)))], opset=13),
        case("unsqueeze11", "Unsqueeze", [In("x", x3)], {"axes": [0, 4]}, opset=11),
        case("unsqueeze13", "Unsqueeze", [In("x", x3), In("a", c64([1, -1]), True)], opset=13),
        case("transpose", "Transpose", [In("x", X)], {"perm": [0, 2, 3, 1]}),
        case("transpose_default", "Transpose", [In("x", x3)]),
        case("concat", "Concat", [In("a", x3), In("b", rand((4, 6, 2), seed=2)), In("c", rand((4, 6, 1), seed=3), True)],
             {"axis": -1}),
        case("split11", "Split", [In("x", x3)], {"axis": 1, "split": [1, 2, 3]}, opset=11, n_out=3),
        case("split13", "Split", [In("x", x3), In("s", c64([2, 4]), True)], {"axis": 1}, opset=13, n_out=2),
        case("split_equal", "Split", [In("x", x3)], {"axis": 1}, opset=13, n_out=3),
        case("split18_uneven", "Split", [In("x", rand((7, 3)))], {"num_outputs": 3}, opset=18, n_out=3),
        case("slice9", "Slice", [In("x", x3)], {"starts": [1, -4], "ends": [3, 1000], "axes": [0, 1]}, opset=9),
        case("slice13", "Slice", [In("x", x3), In("st", c64([-1, 1]), True), In("en", c64([-1000, 5]), True),
                                  In("ax", c64([0, 2]), True), In("sp", c64([-2, 2]), True)], opset=13),
        case("slice_default", "Slice", [In("x", x3), In("st", c64([2]), True), In("en", c64([5]), True)], opset=13),
        case("gather", "Gather", [In("x", x3), In("i", c64([[0, 5], [-1, 2]]), True)], {"axis": 1}),
        case("gather_rt", "Gather", [In("x", x3), In("i", c64([3, 0, -2]))], {"axis": 0}),
        case("gather_scalar", "Gather", [In("x", x3), In("i", c64(2), True)], {"axis": 2}),
        case("gather_elements", "GatherElements", [In("x", x3), In("i", ints((4, 2, 5), -6, 6))], {"axis": 1}),
        case("gather_nd", "GatherND", [In("x", x3), In("i", ints((3, 2), 0, 4))]),
        case("gather_nd_b1", "GatherND", [In("x", x3), In("i", ints((4, 2, 1), -6, 6, seed=3))], {"batch_dims": 1}),
        case("expand", "Expand", [In("x", rand((3, 1))), In("s", c64([2, 1, 4]), True)]),
        case("tile", "Tile", [In("x", rand((2, 3))), In("r", c64([3, 2]), True)]),
        case("pad_const", "Pad", [In("x", x3), In("p", c64([0, 1, 2, 1, 0, -1]), True), In("v", np.float32(1.5), True)],
             opset=13),
        case("pad_reflect", "Pad", [In("x", x3), In("p", c64([0, 2, 1, 0, 3, 2]), True)], {"mode": "reflect"}, opset=13),
        case("pad_edge", "Pad", [In("x", x3), In("p", c64([1, 0, 0, 2, 1, 1]), True)], {"mode": "edge"}, opset=13),
        case("pad_axes", "Pad", [In("x", x3), In("p", c64([1, 2]), True), None, In("a", c64([-1]), True)], opset=18),
        case("pad_rt_value", "Pad", [In("x", x3), In("p", c64([1, 0, 0, 0, 2, 1]), True), In("v", np.float32(-2.0))],
             opset=13),
        case("pad2", "Pad", [In("x", x3)], {"pads": [0, 1, 1, 0, 1, 1], "value": 0.5}, opset=7),
        case("identity", "Identity", [In("x", x3)]),
        case("dropout", "Dropout", [In("x", x3)], opset=13, n_out=2),
        case("d2s_dcr", "DepthToSpace", [In("x", rand((1, 8, 2, 3)))], {"blocksize": 2}),
        case("d2s_crd", "DepthToSpace", [In("x", rand((1, 8, 2, 3)))], {"blocksize": 2, "mode": "CRD"}),
        case("s2d", "SpaceToDepth", [In("x", rand((1, 2, 4, 6)))], {"blocksize": 2}),
        case("triu", "Trilu", [In("x", rand((2, 4, 5)))], opset=14),
        case("tril_k", "Trilu", [In("x", rand((4, 5))), In("k", c64(-1), True)], {"upper": 0}, opset=14),
        case("triu_rt_k", "Trilu", [In("x", rand((4, 5))), In("k", c64(2))], opset=14),
        # a causal mask over a dynamic [seq, seq] (GPT-2 exported with dynamic axes), two sizes
        case("tril_dyn", "Trilu", [In("x", rand((2, 5, 5)), dims=["b", "seq", "seq"])], {"upper": 0}, opset=14,
             dim_bounds={"seq": (1, 16)}, sizes=[{"x": rand((3, 12, 12), seed=4)}]),
        case("triu_dyn_rect_k", "Trilu", [In("x", rand((3, 6)), dims=["r", "c"]), In("k", c64(-2))], opset=14,
             dim_bounds={"r": (1, 8), "c": (2, 9)}, sizes=[{"x": rand((8, 2), seed=5), "k": c64(1)}]),
        case("onehot", "OneHot", [In("i", c64([[0, 3], [-1, 7]])), In("d", c64(5), True),
                                  In("v", np.array([-1.0, 2.0], np.float32), True)], {"axis": 1}),
        case("eyelike", "EyeLike", [In("x", rand((3, 4)))], {"k": 1}),
        case("scatter_elements", "ScatterElements", [In("x", x3), In("i", ints((4, 2, 5), -6, 6, seed=5), True),
                                                     In("u", rand((4, 2, 5), seed=6))], {"axis": 1}, opset=16),
        case("scatter_nd", "ScatterND", [In("x", x3), In("i", c64([[1, 2], [3, -1]]), True),
                                         In("u", rand((2, 5), seed=7))], opset=16),
        case("scatter_nd_rows", "ScatterND", [In("x", x3), In("i", c64([[2], [0]]), True),
                                              In("u", rand((2, 6, 5), seed=8))], opset=16),
        case("scatter_nd_add", "ScatterND", [In("x", x3), In("i", c64([[1, 2], [3, -1], [1, 2]]), True),
                                             In("u", rand((3, 5), seed=9))], {"reduction": "add"}, opset=16),
        case("scatter_el_max", "ScatterElements", [In("x", x3), In("i", c64(np.zeros((4, 3, 5))), True),
                                                   In("u", rand((4, 3, 5), seed=10))], {"axis": 1, "reduction": "max"},
             opset=18),
        case("center_crop_pad", "CenterCropPad", [In("x", x3), In("s", c64([7, 3]), True)], {"axes": [1, 2]},
             opset=18),
        case("scatter_v9", "Scatter", [In("x", x3), In("i", c64(np.ones((2, 2, 5))), True),
                                       In("u", rand((2, 2, 5), seed=11))], {"axis": 1}, opset=9),
        case("compress", "Compress", [In("x", x3), In("c", np.array([1, 0, 1, 1, 0, 1], bool), True)], {"axis": 1}),
        case("compress_flat", "Compress", [In("x", rand((2, 3))), In("c", np.array([0, 1, 1, 0, 1], bool), True)]),
        case("reverse_seq", "ReverseSequence", [In("x", rand((5, 3, 2))), In("l", c64([5, 2, 0]), True)],
             {"batch_axis": 1, "time_axis": 0}),
        case("reverse_seq_b0", "ReverseSequence", [In("x", rand((3, 4))), In("l", c64([1, 4, 3]), True)],
             {"batch_axis": 0, "time_axis": 1}),
    ]
    return cs


def test_shape_ops_match_onnxruntime(tmp_path):
    cs = _cases()
    check_cases(cs, tmp_path / "m")
    assert len({c.model.graph.node[0].op_type for c in cs}) >= 27


@pytest.mark.parametrize("op,inputs,attrs,opset", [
    ("Shape", [In("x", X)], {}, 17),
    ("Shape", [In("x", X)], {"start": 1, "end": -1}, 15),
    ("Size", [In("x", X)], {}, 17),
    ("ConstantOfShape", [In("s", c64([2, 3]), True)], {"value": numpy_helper.from_array(np.array([7], np.int32))}, 17),
    ("Range", [In("a", np.float32(1.0), True), In("b", np.float32(4.0), True), In("c", np.float32(0.5), True)], {}, 17),
    ("Constant", [], {"value_ints": [1, 2, 3]}, 17),
    ("NonZero", [In("x", np.array([[1, 0, 3], [0, 0, 2]], np.float32), True)], {}, 17),
    ("HannWindow", [In("n", np.int64(10), True)], {}, 17),
    ("HammingWindow", [In("n", np.int64(7), True)], {"periodic": 0}, 17),
    ("BlackmanWindow", [In("n", np.int64(9), True)], {}, 17),
])
def test_import_time_values_fold(op, inputs, attrs, opset):
    c = case("fold", op, inputs, attrs, opset=opset)
    _, outs = ox.load(c.model)
    assert outs["y"].is_constant, f"{op} should fold to a constant"
    want = ort_run(c.model, c.feeds)["y"]
    assert_close(outs["y"].value, want, op)


def _graph(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)
    return onnx.shape_inference.infer_shapes(m)


def _const(name, v):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(v), name))


def _bert_reshape_model():
    """What torch exports for BERT's head split: the target shape built from Shape of the input."""
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        _const("i0", c64(0)), _const("i1", c64(1)), _const("ax", c64([0])), _const("tail", c64([4, 8])),
        helper.make_node("Gather", ["sh", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["sh", "i1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax"], ["bu"]),
        helper.make_node("Unsqueeze", ["s", "ax"], ["su"]),
        helper.make_node("Concat", ["bu", "su", "tail"], ["tgt"], axis=0),
        helper.make_node("Reshape", ["x", "tgt"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]),
        # position ids: arange(seq) from the same Shape, broadcast over the batch
        helper.make_node("Range", ["zero", "s", "one"], ["pos"]),
        _const("zero", c64(0)), _const("one", c64(1)),
        helper.make_node("Unsqueeze", ["pos", "ax"], ["pos2"]),
        helper.make_node("Concat", ["bu", "su"], ["bs"], axis=0),
        helper.make_node("Expand", ["pos2", "bs"], ["p"]),
        # a fill of the dynamic shape
        helper.make_node("ConstantOfShape", ["bs"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
    ]
    # ONNX wants topological order; Constants that the Range reads come after it here on purpose
    # (the importer sorts), so move them first for onnxruntime.
    nodes = [n for n in nodes if n.op_type == "Constant"] + [n for n in nodes if n.op_type != "Constant"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])
    outs = [helper.make_empty_tensor_value_info(n) for n in ("y", "p", "ones")]
    return _graph(nodes, [x], outs)


def test_bert_shape_chain_folds_and_runs_at_two_sizes(tmp_path):
    m = _bert_reshape_model()
    bounds = {"batch": (1, 4), "seq": (1, 16)}
    _, outs = ox.load(m, dim_bounds=bounds)
    ops, _ = topo_order(outs.values())
    kinds = {op.kind for op in ops}
    # No shape computation is left: the head split is one reshape and one permute.
    assert OpKind.GATHER not in kinds and OpKind.CONCAT not in kinds, kinds
    y_ops = topo_order([outs["y"]])[0]
    assert [op.kind for op in y_ops] == [OpKind.RESHAPE, OpKind.PERMUTE]
    assert str(outs["y"].shape[0]) == "batch" and str(outs["y"].shape[2]) == "seq"
    sizes = [(2, 5), (3, 16)]
    c = Case("bert", m, {"x": rand((2, 5, 32))}, bounds, [{"x": rand((b, s, 32), seed=b)} for b, s in sizes[1:]])
    check_cases([c], tmp_path / "m")


@pytest.mark.parametrize("bad,err,match", [
    (b"not a model", ImportError_, "not a valid ONNX model"),
])
def test_malformed_bytes(bad, err, match):
    with pytest.raises(err, match=match):
        ox.load(bad)


def test_errors_are_typed_and_name_the_node():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_empty_tensor_value_info("y")
    # an op type with no converter
    m = helper.make_model(helper.make_graph([helper.make_node("FooBar", ["x"], ["y"], name="n1")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match=r"node 'n1' \(FooBar, opset 17\)"):
        ox.load(m)
    # a dangling input name
    m = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "nope"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ImportError_, match="'nope'"):
        ox.load(m)
    # an attribute of the wrong type
    m = helper.make_model(helper.make_graph([helper.make_node("Concat", ["x", "x"], ["y"], axis="zero")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ImportError_, match="Concat"):
        ox.load(m)
    # wrap padding of a dynamic dim (its gather indices need the size) is refused by name
    c = case("wrap", "Pad", [In("x", rand((3, 4)), dims=["N", 4]), In("p", c64([1, 1, 1, 1]), True)], {"mode": "wrap"},
             opset=19)
    with pytest.raises(UnsupportedOpError, match="wrap padding of dim 0 needs a static"):
        ox.load(c.model)
    # a shape mismatch
    m = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"], name="add")], "g",
                                            [x, helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ImportError_, match=r"node 'add' \(Add"):
        ox.load(m)
    # a value needed while compiling, fed as a graph input: typed, with the way out named
    # (Dropout's training_mode picks the graph; a Reshape target fed as data is a size the run binds)
    c = case("rt_mode", "Dropout", [In("x", rand((1, 1, 2, 3))), None, In("t", np.array(False))], opset=19)
    with pytest.raises(UnsupportedOpError, match="constant_inputs"):
        ox.load(c.model)
    _, outs = ox.load(c.model, constant_inputs={"t": np.array(False)})
    assert [d.value for d in outs["y"].shape] == [1, 1, 2, 3]
    assert set(used_inputs(outs)) == {"x"}
    c = case("rt_shape", "Reshape", [In("x", rand((2, 3))), In("s", c64([3, 2]))])
    _, outs = ox.load(c.model)
    assert all(d.produced for d in outs["y"].shape) and set(used_inputs(outs)) == {"x", "s"}


def test_other_domains_are_unsupported_and_unimported_ones_malformed():
    s = helper.make_tensor_value_info("s", TensorProto.STRING, [2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_empty_tensor_value_info("y")
    enc = helper.make_node("LabelEncoder", ["s"], ["y"], name="enc", domain="ai.onnx.ml",
                           keys_strings=["a"], values_int64s=[1])
    # a model importing only ai.onnx.ml is valid ONNX: its node is refused by name, domain and opset
    m = helper.make_model(helper.make_graph([enc], "g", [s], [y]), opset_imports=[helper.make_opsetid("ai.onnx.ml", 4)])
    with pytest.raises(UnsupportedOpError, match=r"node 'enc' \(ai\.onnx\.ml\.LabelEncoder, ai\.onnx\.ml opset 4\)"):
        ox.load(m)
    # ... also beside a default-domain opset
    m.opset_import.append(helper.make_opsetid("", 17))
    with pytest.raises(UnsupportedOpError, match=r"node 'enc' \(ai\.onnx\.ml\.LabelEncoder"):
        ox.load(m)
    # a node of a domain the model does not import is malformed, as is a default-domain node then
    relu = helper.make_node("Relu", ["x"], ["y"], name="r")
    m = helper.make_model(helper.make_graph([relu], "g", [x], [y]), opset_imports=[helper.make_opsetid("ai.onnx.ml", 4)])
    with pytest.raises(ImportError_, match=r"node 'r' \(Relu\) is in the default domain.*imports ai.onnx.ml 4"):
        ox.load(m)
    m.graph.node[0].domain = "com.bogus"
    with pytest.raises(ImportError_, match=r"node 'r' \(Relu\) is in domain 'com.bogus'"):
        ox.load(m)


def _if_model():
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return _graph([node], [c, x], [helper.make_empty_tensor_value_info("y")], opset=16)


def test_if_inlines_a_known_branch_and_selects_at_run_time():
    m = _if_model()
    xv = rand((3, 4))
    # a run-time condition: both branches run, where() picks
    _, outs = ox.load(m)
    for cv in (np.array(True), np.array(False)):
        want = ort_run(m, {"c": cv, "x": xv})["y"]
        assert_close(ag.reference.run(outs, {"c": cv, "x": xv})["y"], want, f"If cond={cv}")
    # a condition known while importing: only the chosen branch is in the graph
    _, outs = ox.load(m, constant_inputs={"c": np.array(False)})
    assert [op.kind for op in topo_order(outs.values())[0]] == [OpKind.NEG]
    assert_close(ag.reference.run(outs, {"x": xv})["y"], -xv, "If inlined")


def test_if_with_branches_of_different_shapes(tmp_path):
    # then: x[:, :2] * 2 ([3, 2]); else: concat(x, x) along axis 0 ([6, 4]): under a run-time
    # condition the output's dims are sizes the run binds; one build serves both conditions. Exact
    # (the values are moved, and doubled, not summed). A rank that differs stays refused.
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    vi = helper.make_tensor_value_info
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("st", [0]), ("en", [2]), ("ax", [1]))]
    then_g = helper.make_graph([helper.make_node("Slice", ["x", "st", "en", "ax"], ["s"]),
                                helper.make_node("Add", ["s", "s"], ["t"])], "then", [],
                               [vi("t", TensorProto.FLOAT, None)], inits)

    def make(other):
        else_g = helper.make_graph([other], "else", [], [vi("e", TensorProto.FLOAT, None)])
        node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="pick")
        return _graph([node], [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [3, 4])],
                      [helper.make_empty_tensor_value_info("y")], opset=16)

    m = make(helper.make_node("Concat", ["x", "x"], ["e"], axis=0))
    _, outs = ox.load(m)
    assert all(d.produced for d in outs["y"].shape)
    xv = rand((3, 4))
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "if")
    for cv in (np.array(True), np.array(False), np.array(True)):
        feeds = {"c": cv, "x": xv}
        want = ReferenceEvaluator(m).run(None, feeds)[0]
        np.testing.assert_array_equal(ag.reference.run(outs, feeds)["y"], want)
        np.testing.assert_array_equal(model.run(feeds)["y"], want)
        np.testing.assert_array_equal(ort_run(m, feeds)["y"], want)
    model.close()
    with pytest.raises(UnsupportedOpError, match=r"node 'pick' \(If, opset 16\): output 0: the branches give "
                       r"rank 2 \['3', '2'\] and rank 0 \[\].*ranks must agree"):
        ox.load(make(helper.make_node("ReduceSum", ["x"], ["e"], keepdims=0)))
    with pytest.raises(UnsupportedOpError, match=r"node 'pick' \(If, opset 16\): output 0: .*same dtype"):
        ox.load(make(helper.make_node("Cast", ["x"], ["e"], to=TensorProto.INT32)))


def test_wrap_pad_matches_numpy_reference_and_onnxruntime(tmp_path):
    """Pad mode 'wrap' (opset 19+): pads within the dim, past it (wrapping twice), a crop on one side
    with a wrap on the other, and `axes`; exact (a gather of constant indices)."""
    from onnx_cases import check_cases_ref
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    i64 = np.int64
    cs = [case("wrap_small", "Pad", [In("x", x), In("p", np.array([0, 1, 2, 0, 2, 1], i64), True)],
               {"mode": "wrap"}, opset=19),
          case("wrap_past_dim", "Pad", [In("x", x), In("p", np.array([0, 4, 7, 0, 5, 9], i64), True)],
               {"mode": "wrap"}, opset=19),
          # onnx's reference (np.pad) takes no negative pads: onnxruntime decides
          case("wrap_crop", "Pad", [In("x", x), In("p", np.array([0, -1, 3, 0, 2, -2], i64), True)],
               {"mode": "wrap"}, opset=19, ref=False),
          case("wrap_axes", "Pad", [In("x", x.astype(np.int32)), In("p", np.array([2, 1, 3, 0], i64), True), None,
                                    In("a", np.array([2, 0], i64), True)], {"mode": "wrap"}, opset=19)]
    check_cases_ref(cs, tmp_path / "wrap", dict(rtol=0.0, atol=0.0))


def _nd_index(lead, dims, seed):
    """GatherND indices of depth len(dims), each column in [-d, d) (negative ones count from the end)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(-d, d, lead) for d in dims], axis=-1).astype(I64)


def test_gathers_over_dynamic_dims(tmp_path):
    """What transformers' dynamic-shape exports write: GatherElements whose indices have a run-time
    length along the gathered axis (BERT's token types at position_ids[:, :seq]) and GatherND over
    a [batch, seq] tensor with run-time sizes (the vmapped mask function's attention_mask[b, s])."""
    x3 = rand((4, 6, 5), seed=1)
    cs = [
        case("gather_elements_dyn", "GatherElements", [In("x", x3), In("i", ints((4, 2, 5), -6, 6), dims=[4, "n", 5])],
             {"axis": 1}, dim_bounds={"n": (1, 8)}, sizes=[{"i": ints((4, 7, 5), -6, 6, seed=2)}]),
        case("gather_elements_dyn_const_data", "GatherElements",
             [In("x", x3, True), In("i", ints((4, 3, 5), 0, 6, seed=3), dims=[4, "n", 5])], {"axis": 1},
             dim_bounds={"n": (1, 8)}, sizes=[{"i": ints((4, 1, 5), 0, 6, seed=4)}]),
        case("gather_nd_dyn", "GatherND", [In("x", rand((3, 4, 5), seed=5), dims=["b", "s", 5]),
                                           In("i", _nd_index((2, 3), (3, 4), 6), dims=["m", 3, 2])],
             dim_bounds={"b": (1, 8), "s": (1, 8), "m": (1, 6)},
             sizes=[{"x": rand((5, 6, 5), seed=7), "i": _nd_index((4, 3), (5, 6), 8)}]),
        case("gather_nd_dyn_elements", "GatherND", [In("x", rand((3, 4), seed=9), dims=["b", "s"]),
                                                    In("i", _nd_index((2, 5), (3, 4), 10), dims=["m", 5, 2])],
             dim_bounds={"b": (1, 8), "s": (1, 8), "m": (1, 6)},
             sizes=[{"x": rand((7, 2), seed=11), "i": _nd_index((1, 5), (7, 2), 12)}]),
    ]
    check_cases(cs, tmp_path / "m")


def test_slice_of_a_table_to_a_dynamic_length_runs_at_two_sizes(tmp_path):
    """position_ids[:, :seq] with seq = Shape(mask)[1] (a transformers export with a dynamic seq):
    the end is a dim only the run knows, so the slice is cut at run time, not folded at import."""
    table = np.arange(32, dtype=I64).reshape(1, 32) * 3
    nodes = [helper.make_node("Shape", ["mask"], ["n"], start=1, end=2),
             helper.make_node("Slice", ["table", "zero", "n", "one", "one"], ["pos"]),
             helper.make_node("Add", ["pos", "mask"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("mask", TensorProto.INT64, [1, "seq"])],
                          [helper.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(table, "table"), numpy_helper.from_array(c64([0]), "zero"),
                           numpy_helper.from_array(c64([1]), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    c = Case("slice_dyn", m, {"mask": ints((1, 5), 0, 2)}, {"seq": (1, 32)}, [{"mask": ints((1, 29), 0, 2, seed=1)}])
    check_cases([c], tmp_path / "m")
