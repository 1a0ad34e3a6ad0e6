"""ONNX Loop as ONE LOOP op (frontend/onnx/loop_host.py, ops/loop.py) run by the CPU backend as a
host-side loop over its compiled body (codegen/kernels/cpu/loop.py): trip counts past the old
unrolling caps, a condition the body computes, a body reading an outer tensor, a body with
constants and a MatMul of a constant weight (lifted into the outer weights by codegen/loop_body.py).
Each model is built once and run at several trip counts, against onnxruntime (when installed) and
aitgen's oracle. Tolerance: rtol 1e-5 / atol 1e-5 (float32 on every side, the same op order; the
accumulations run up to 1000 steps).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import aitgen as ag  # noqa: E402
from aitgen.codegen.cstring import c_string_literal  # noqa: E402
from aitgen.errors import RuntimeInputError, UnsupportedOpError  # noqa: E402
from aitgen.frontend import onnx as ox  # noqa: E402
from aitgen.frontend.onnx import loop_host  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
vi = helper.make_tensor_value_info
TOL = dict(rtol=1e-5, atol=1e-5)


def _model(body, loop_inputs, graph_inputs, outputs, inits=()):
    node = helper.make_node("Loop", loop_inputs, [o.name for o in outputs], body=body, name="the_loop")
    g = helper.make_graph([node], "g", graph_inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _accumulate():
    """acc' = acc + x * i (x from the enclosing graph); scan output acc'. M fed at run time."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", ["acc", "xi"], ["acc_o"]), helper.make_node("Identity", ["c"], ["c_o"]),
         helper.make_node("Identity", ["acc_o"], ["s"])],
        "body", [vi("i", I64, []), vi("c", B, []), vi("acc", F, [3])],
        [vi("c_o", B, []), vi("acc_o", F, [3]), vi("s", F, [3])])
    return _model(body, ["M", "", "a0"], [vi("M", I64, []), vi("a0", F, [3]), vi("x", F, [3])],
                  [vi("af", F, [3]), vi("ss", F, None)])


def _until():
    """x' = x * 1.5 + 0.25 while sum(x') < limit (the body computes the condition); M at run time."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["xk"]), helper.make_node("Add", ["xk", "q"], ["xo"]),
         helper.make_node("ReduceSum", ["xo"], ["sm"], keepdims=0), helper.make_node("Less", ["sm", "limit"], ["c_o"]),
         helper.make_node("Identity", ["sm"], ["s"])],
        "body", [vi("i", I64, []), vi("c", B, []), vi("x", F, [2])],
        [vi("c_o", B, []), vi("xo", F, [2]), vi("s", F, [])],
        [numpy_helper.from_array(np.array(1.5, np.float32), "k"),
         numpy_helper.from_array(np.array(0.25, np.float32), "q")])
    return _model(body, ["M", "c0", "x0"], [vi("M", I64, []), vi("c0", B, []), vi("x0", F, [2]), vi("limit", F, [])],
                  [vi("xf", F, [2]), vi("sums", F, None)])


W = np.random.default_rng(7).uniform(-0.6, 0.6, (4, 4)).astype(np.float32)
BIAS = np.linspace(-0.2, 0.3, 4, dtype=np.float32)


def _rnn():
    """h' = tanh(h @ W + b + u) with W and b constants of the body, u an outer input; scan output h'."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "W"], ["hw"]), helper.make_node("Add", ["hw", "b"], ["hb"]),
         helper.make_node("Add", ["hb", "u"], ["pre"]), helper.make_node("Tanh", ["pre"], ["h_o"]),
         helper.make_node("Identity", ["c"], ["c_o"]), helper.make_node("Identity", ["h_o"], ["y"])],
        "body", [vi("i", I64, []), vi("c", B, []), vi("h", F, [1, 4])], [vi("c_o", B, []), vi("h_o", F, [1, 4]),
                                                                          vi("y", F, [1, 4])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(BIAS, "b")])
    return _model(body, ["M", "", "h0"], [vi("M", I64, []), vi("h0", F, [1, 4]), vi("u", F, [1, 4])],
                  [vi("hf", F, [1, 4]), vi("hs", F, None)])


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _check(model, outs, m, feeds):
    got = m.run(feeds)
    ref = ag.reference.run(outs, feeds)
    want = _ort(model, feeds)
    for k in want:
        assert got[k].shape == want[k].shape == ref[k].shape, k
        np.testing.assert_allclose(got[k], want[k], **TOL, err_msg=k)
        np.testing.assert_allclose(ref[k], want[k], **TOL, err_msg=k)
    return got


def _loop_kernels(workdir) -> list[str]:
    report = json.loads((workdir / "report.json").read_text())
    return [k["template"] for k in report["kernels"]]


def _one_loop_build(model, workdir):
    """(outputs, model built for the CPU), checked to run as ONE call: the loop's own kernel, not
    one copy of the body per iteration."""
    _, outs = ox.load(model)
    m = ag.compile_model(outs, target="cpu", workdir=workdir)
    assert _loop_kernels(workdir) == ["cpu/templates/loop.cpp.j2"]
    return outs, m


def test_runtime_trip_count_with_carried_sum_and_scan_output(tmp_path):
    model = _accumulate()
    outs, m = _one_loop_build(model, tmp_path / "acc")
    # the body's kernels are built and linked too; the runtime's reports name the loop for them
    model_json = json.loads((tmp_path / "acc" / "model.json").read_text())
    assert len(model_json["kernel_ops"]) > 1 and all(v == ["the_loop"] for v in model_json["kernel_ops"].values())
    rng = np.random.default_rng(0)
    base = {"a0": rng.standard_normal(3).astype(np.float32), "x": rng.standard_normal(3).astype(np.float32)}
    for trips in (0, 1, 5, 100, 1000):  # past the old caps: 32 at run time, 256 at all
        got = _check(model, outs, m, {**base, "M": np.array(trips, np.int64)})
        assert got["ss"].shape == (trips, 3)
    # past the scan outputs' bound: refused, naming the node; the model stays usable
    with pytest.raises(RuntimeInputError, match="the_loop: the loop would run past its bound of 4096"):
        m.run({**base, "M": np.array(loop_host.SCAN_MAX_TRIPS + 1, np.int64)})
    with pytest.raises(RuntimeInputError, match="the_loop"):  # the oracle refuses it alike
        ag.reference.run(outs, {**base, "M": np.array(loop_host.SCAN_MAX_TRIPS + 1, np.int64)})
    got = _check(model, outs, m, {**base, "M": np.array(7, np.int64)})
    assert got["ss"].shape == (7, 3)
    m.close()


def test_condition_computed_by_the_body_stops_the_loop(tmp_path):
    model = _until()
    outs, m = _one_loop_build(model, tmp_path / "until")
    x0 = np.array([0.5, 1.0], np.float32)
    seen = set()
    for trips, limit, cond in ((1000, 50.0, True), (1000, 1e6, True), (3, 1e6, True), (1000, 0.0, True),
                               (1000, 50.0, False)):
        feeds = {"M": np.array(trips, np.int64), "c0": np.array(cond), "x0": x0, "limit": np.array(limit, np.float32)}
        got = _check(model, outs, m, feeds)
        seen.add(got["sums"].shape[0])
    # stopped mid-way by the condition (several lengths), by M, after one iteration, and never started
    assert {1, 3, 0}.issubset(seen) and len(seen) >= 4
    m.close()


def test_body_constants_and_constant_weight_matmul(tmp_path):
    model = _rnn()
    outs, m = _one_loop_build(model, tmp_path / "rnn")
    # the body's weight is lifted into the outer weights file (its set_constants reaches it)
    constants = json.loads((tmp_path / "rnn" / "model.json").read_text())["constants"]
    assert any(list(c["shape"]) == [4, 4] for c in constants.values())
    rng = np.random.default_rng(1)
    base = {"h0": rng.standard_normal((1, 4)).astype(np.float32), "u": rng.standard_normal((1, 4)).astype(np.float32)}
    for trips in (0, 1, 5, 300):
        got = _check(model, outs, m, {**base, "M": np.array(trips, np.int64)})
        assert got["hs"].shape == (trips, 1, 4)
    m.close()


def test_gpu_targets_name_the_cpu_backend(tmp_path):
    _, outs = ox.load(_accumulate())
    # refused before anything is built (no nvcc needed): the body is compiled for the target first
    with pytest.raises(UnsupportedOpError, match="op loop 'the_loop' has no cuda kernel yet: Loop runs on the CPU"):
        ag.compile_model(outs, target="cuda", workdir=tmp_path / "cuda", load=False)


def _scan(directions=(0, 1), out_axes=(0, 1)):
    """Scan over a run-time sequence length: s' = s * 0.9 + a_t + b_t (b scanned reversed), with
    outputs s' (stacked reversed) and s' * w (w an outer input; stacked along axis 1)."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["s", "nine"], ["sn"]), helper.make_node("Add", ["sn", "a"], ["sa"]),
         helper.make_node("Add", ["sa", "b"], ["s_o"]), helper.make_node("Mul", ["s_o", "w"], ["y"]),
         helper.make_node("Identity", ["s_o"], ["e"])],
        "body", [vi("s", F, [3]), vi("a", F, [3]), vi("b", F, [3])],
        [vi("s_o", F, [3]), vi("e", F, [3]), vi("y", F, [3])],
        [numpy_helper.from_array(np.array(0.9, np.float32), "nine")])
    node = helper.make_node("Scan", ["s0", "xa", "xb"], ["sf", "es", "ys"], body=body, num_scan_inputs=2,
                            scan_input_directions=list(directions), scan_output_axes=list(out_axes),
                            scan_output_directions=[1, 0], name="the_scan")
    g = helper.make_graph([node], "g",
                          [vi("s0", F, [3]), vi("xa", F, ["T", 3]), vi("xb", F, ["T", 3]), vi("w", F, [3])],
                          [vi("sf", F, [3]), vi("es", F, None), vi("ys", F, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_scan_over_a_runtime_length_reads_its_inputs_in_place(tmp_path):
    model = _scan()
    _, outs = ox.load(model, dim_bounds={"T": (0, 2000)})
    assert [str(d) for d in outs["ys"].shape] == ["3", "T"]   # stacked along axis 1: the length is T's
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "scan")
    assert "cpu/templates/loop.cpp.j2" in _loop_kernels(tmp_path / "scan")
    rng = np.random.default_rng(2)
    for t in (1, 7, 300, 2000):  # past the 256 a scan could unroll to
        feeds = {"s0": rng.standard_normal(3).astype(np.float32), "xa": rng.standard_normal((t, 3)).astype(np.float32),
                 "xb": rng.standard_normal((t, 3)).astype(np.float32), "w": rng.standard_normal(3).astype(np.float32)}
        got = _check(model, outs, m, feeds)
        assert got["es"].shape == (t, 3) and got["ys"].shape == (3, t)
    m.close()


def test_float16_build_keeps_the_body_interface(tmp_path):
    # convert_precision casts around the LOOP (its body takes float32) and the body converts inside
    # itself when it is compiled: the results follow the oracle to float16's rounding
    _, outs = ox.load(_rnn())
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "f16", precision="float16")
    rng = np.random.default_rng(3)
    feeds = {"M": np.array(20, np.int64), "h0": rng.standard_normal((1, 4)).astype(np.float32),
             "u": rng.standard_normal((1, 4)).astype(np.float32)}
    got, ref = m.run(feeds), ag.reference.run(outs, feeds)
    for k in ref:
        assert got[k].shape == ref[k].shape
        np.testing.assert_allclose(got[k], ref[k], rtol=2e-2, atol=2e-2, err_msg=k)
    m.close()


def test_two_loops_over_the_same_inputs_with_different_bodies_stay_apart(tmp_path):
    # dedup compares a LOOP's body by identity: same operands, other bodies -> two loops, two results
    def body(op):
        return helper.make_graph(
            [helper.make_node(op, ["acc", "x"], ["acc_o"]), helper.make_node("Identity", ["c"], ["c_o"])],
            "body", [vi("i", I64, []), vi("c", B, []), vi("acc", F, [3])], [vi("c_o", B, []), vi("acc_o", F, [3])])
    nodes = [helper.make_node("Loop", ["M", "", "a0"], ["sum"], body=body("Add"), name="adds"),
             helper.make_node("Loop", ["M", "", "a0"], ["prod"], body=body("Mul"), name="muls")]
    g = helper.make_graph(nodes, "g", [vi("M", I64, []), vi("a0", F, [3]), vi("x", F, [3])],
                          [vi("sum", F, [3]), vi("prod", F, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    _, outs = ox.load(model)
    m = ag.compile_model(outs, target="cpu", workdir=tmp_path / "two", verify=True)  # verify: after every pass
    assert _loop_kernels(tmp_path / "two") == ["cpu/templates/loop.cpp.j2"] * 2
    feeds = {"M": np.array(4, np.int64), "a0": np.array([1.0, 2.0, -1.0], np.float32),
             "x": np.array([0.5, 1.5, 2.0], np.float32)}
    got = _check(model, outs, m, feeds)
    np.testing.assert_allclose(got["sum"], feeds["a0"] + 4 * feeds["x"], rtol=1e-6)
    np.testing.assert_allclose(got["prod"], feeds["a0"] * feeds["x"] ** 4, rtol=1e-6)
    m.close()


def _evil(s: str) -> str:
    """A name with a quote, a backslash, a newline, a comment's end, an #include and a system() call."""
    return f'{s}"\\\n*/ #include <cstdlib>\nsystem("id"); //'


def test_hostile_names_reach_the_loop_kernel_escaped(tmp_path):
    """The Loop node, its graph inputs and outputs and its body's values all named hostile: the
    build escapes every one in its C++ (the loop kernel's label and comments included), runs as
    onnxruntime and the oracle do, and a run past the bound is refused naming the node as written;
    the model stays usable."""
    e = _evil
    body = helper.make_graph(
        [helper.make_node("Cast", [e("i")], [e("fi")], to=F), helper.make_node("Mul", [e("x"), e("fi")], [e("xi")]),
         helper.make_node("Add", [e("acc"), e("xi")], [e("acc_o")]), helper.make_node("Identity", [e("c")], [e("c_o")]),
         helper.make_node("Identity", [e("acc_o")], [e("s")])],
        "body", [vi(e("i"), I64, []), vi(e("c"), B, []), vi(e("acc"), F, [3])],
        [vi(e("c_o"), B, []), vi(e("acc_o"), F, [3]), vi(e("s"), F, [3])])
    outputs = [vi(e("af"), F, [3]), vi(e("ss"), F, None)]
    node = helper.make_node("Loop", [e("M"), "", e("a0")], [o.name for o in outputs], body=body, name=e("loop"))
    g = helper.make_graph([node], "g", [vi(e("M"), I64, []), vi(e("a0"), F, [3]), vi(e("x"), F, [3])], outputs)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    outs, m = _one_loop_build(model, tmp_path / "evil")
    srcs = {p.name: p.read_text() for p in (tmp_path / "evil" / "obj" / "src").glob("*.cpp")}
    for name, text in srcs.items():
        assert "system(\"id\")" not in text, name   # only its escaped form, \"id\"
    loop_src = [t for t in srcs.values() if "host-side loop" in t]
    assert len(loop_src) == 1 and c_string_literal(e("loop")) in loop_src[0]   # the label, escaped
    rng = np.random.default_rng(5)
    base = {e("a0"): rng.standard_normal(3).astype(np.float32), e("x"): rng.standard_normal(3).astype(np.float32)}
    got = _check(model, outs, m, {**base, e("M"): np.array(6, np.int64)})
    assert got[e("ss")].shape == (6, 3)
    with pytest.raises(RuntimeInputError) as err:
        m.run({**base, e("M"): np.array(loop_host.SCAN_MAX_TRIPS + 1, np.int64)})
    assert e("loop") in str(err.value)
    _check(model, outs, m, {**base, e("M"): np.array(2, np.int64)})   # still usable
    m.close()
