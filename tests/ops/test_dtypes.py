"""float64, int16 and the unsigned integers through the CPU backend, against the numpy oracle and,
through the ONNX importer, against onnxruntime where it has a kernel.

Tolerances: integers and bools exactly (fixed-width wraparound: numpy's, ONNX's); float64 against
the float64 oracle rtol 1e-12 / atol 1e-14 (libm and summation order differ in the last bits),
against onnxruntime rtol 1e-9 / atol 1e-12 (its kernels vectorise differently). Each test is one
CPU build of many ops, to keep the build count small.
"""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import UnsupportedOpError
from aitgen.ir.dtype import DType

INTS = ["int16", "uint8", "uint16", "uint32", "uint64"]
F64 = dict(rtol=1e-12, atol=1e-14)


def _ints(rng, dt: str, shape, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min if lo is None else lo, info.max if hi is None else hi, shape, dtype=dt,
                        endpoint=True)


def _check(outs: dict, feeds: dict, tmp_path, tol=None) -> dict:
    got = ag.compile_model(outs, target="cpu", workdir=str(tmp_path)).run(feeds)
    ref = ag.reference.run(outs, feeds)
    for k in outs:
        assert got[k].dtype == ref[k].dtype, k
        if tol is None or got[k].dtype.kind != "f":
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
        else:
            np.testing.assert_allclose(got[k], ref[k], err_msg=k, **tol)
    return got


@pytest.mark.parametrize("dt", INTS)
def test_integer_ops_wrap_like_numpy(dt, tmp_path):
    x = ag.Tensor([6, 10], dtype=dt, name="x")
    y = ag.Tensor([6, 10], dtype=dt, name="y")
    idx = ag.Tensor([3], dtype="int64", name="i")
    outs = {"add": ops.add(x, y), "sub": ops.sub(x, y), "mul": ops.mul(x, y), "div": ops.div(x, y),
            "mod": ops.mod(x, y), "fmod": ops.fmod(x, y), "max": ops.maximum(x, y), "min": ops.minimum(x, y),
            "neg": ops.neg(x), "abs": ops.abs(x), "and": ops.bitwise_and(x, y), "or": ops.bitwise_or(x, y),
            "xor": ops.bitwise_xor(x, y), "not": ops.bitwise_not(x), "lt": ops.less(x, y), "eq": ops.equal(x, x),
            "ge": ops.greater_equal(x, y), "where": ops.where(ops.less(x, y), x, y),
            "to_f32": ops.cast(x, "float32"), "to_i64": ops.cast(x, "int64"), "to_u8": ops.cast(x, "uint8"),
            "sum": ops.reduce_sum(x, 1), "sum0": ops.reduce_sum(x, 0), "rmax": ops.reduce_max(x, 1),
            "rmin": ops.reduce_min(x, 0), "prod": ops.reduce_prod(x, 1), "cumsum": ops.cumsum(x, 1),
            "argmax": ops.argmax(x, 1), "cat": ops.concat([x, y], 0), "perm": ops.permute(x, [1, 0]),
            "slice": x[1:5, ::3], "gather": ops.gather(x, idx, 1), "reshape": ops.reshape(x, [3, 20]),
            "pad": ops.pad(x, [1, 1, 0, 2]),
            # their float forms guard NaN; the integer forms have no guard
            "relu": ops.relu(x), "sign": ops.sign(x)}
    s = ag.Tensor([6, 10], dtype=dt, name="s")  # shift counts, past the width too
    outs.update(shl=ops.shift_left(x, s), shr=ops.shift_right(x, s))
    rng = np.random.default_rng(0)
    feeds = {"x": _ints(rng, dt, (6, 10)), "y": _ints(rng, dt, (6, 10)), "i": np.array([0, 9, 4]),
             "s": _ints(rng, dt, (6, 10), 0, 70)}
    feeds["y"][0, :3] = 0  # division and remainder by zero give 0, as the oracle says
    got = _check(outs, feeds, tmp_path)
    # spot checks of the wraparound itself, independent of the oracle
    wide = feeds["x"].astype(object) + feeds["y"].astype(object)
    np.testing.assert_array_equal(got["add"].astype(object), wide % (1 << (8 * np.dtype(dt).itemsize))
                                  if dt.startswith("u") else got["add"].astype(object))
    assert got["sum"].dtype == np.dtype(dt)


@pytest.mark.parametrize("dt", INTS)
def test_integer_casts_from_float(dt, tmp_path):
    """float -> integer truncates toward zero (in range values: out of range is undefined in C++)."""
    x = ag.Tensor([50], dtype="float32", name="x")
    d = ag.Tensor([50], dtype="float64", name="d")
    outs = {"f": ops.cast(x, dt), "d": ops.cast(d, dt)}
    info = np.iinfo(dt)
    rng = np.random.default_rng(1)
    hi = min(float(info.max), 1e6)
    v = rng.uniform(max(float(info.min), -1e6), hi, 50)
    got = _check(outs, {"x": v.astype(np.float32), "d": v}, tmp_path)
    np.testing.assert_array_equal(got["d"], np.trunc(v).astype(dt))


def test_float64_computes_in_float64(tmp_path):
    x = ag.Tensor([4, 6], dtype="float64", name="x")
    y = ag.Tensor([4, 6], dtype="float64", name="y")
    w = ag.Tensor([6, 5], dtype="float64", name="w")
    bb = ag.Tensor([4, 6, 3], dtype="float64", name="bb")
    bias = ag.constant(np.linspace(-1, 1, 5), dtype="float64")
    outs = {"tiny": ops.sub(ops.add(x, 1e-12), x),  # float32 would give 0 (or 1.2e-7 steps)
            "exp": ops.exp(x), "log": ops.log(ops.abs(x)), "sin": ops.sin(x), "tanh": ops.tanh(x),
            "sig": ops.sigmoid(x), "silu": ops.silu(x), "gelu": ops.gelu(x), "gelu_t": ops.gelu(x, "tanh"),
            "erf": ops.erf(x), "sqrt": ops.sqrt(ops.abs(x)), "rsqrt": ops.rsqrt(ops.add(ops.abs(x), 1.0)),
            "pow": ops.pow(ops.abs(x), y), "div": ops.div(x, y), "hs": ops.hardswish(x),
            "clamp": ops.clamp(x, -0.3, 0.7), "round": ops.round(x), "mod": ops.mod(x, y),
            "sum": ops.reduce_sum(x, 1), "mean": ops.reduce_mean(x, 0), "var": ops.reduce_var(x, 1),
            "var0": ops.reduce_var(x, 0), "max": ops.reduce_max(x, 1), "prod": ops.reduce_prod(x, 0),
            "cumsum": ops.cumsum(x, 1), "mm": ops.matmul(x, w), "gemm_ep": ops.gelu(ops.gemm(x, w, bias)),
            "bmm": ops.matmul(ops.reshape(x, [4, 1, 6]), bb), "to_f32": ops.cast(x, "float32"),
            "from_f32": ops.cast(ops.cast(x, "float32"), "float64"), "to_i64": ops.cast(ops.mul(x, 100.0), "int64"),
            "avgpool": ops.avg_pool2d(ops.reshape(x, [1, 4, 6, 1]), 3, 1, 1),
            "gap": ops.global_avg_pool(ops.reshape(x, [1, 4, 3, 2])),
            "maxpool": ops.max_pool2d(ops.reshape(x, [1, 4, 6, 1]), 2, 2)}
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((4, 6)), "y": rng.uniform(0.5, 2.0, (4, 6)), "w": rng.standard_normal((6, 5)),
             "bb": rng.standard_normal((4, 6, 3))}
    got = _check(outs, feeds, tmp_path, F64)
    np.testing.assert_allclose(got["tiny"], 1e-12, rtol=1e-3)
    xv = feeds["x"]
    np.testing.assert_allclose(got["avgpool"][0, 1, 1, 0], xv[0:3, 0:3].mean(), rtol=1e-14)  # float64 precision
    np.testing.assert_allclose(got["gap"].reshape(-1), xv.reshape(12, 2).mean(0), rtol=1e-14)


def test_float64_softmax_and_norms_compute_in_float64(tmp_path):
    """Their kernels compute in float32: float64 builds them from element-wise ops and reductions
    (ops/float64.py), which match_norms does not fuse back."""
    x = ag.Tensor([3, 4, 6], dtype="float64", name="x")
    rng = np.random.default_rng(7)
    w = ag.constant(rng.standard_normal(6), dtype="float64")
    b = ag.constant(rng.standard_normal(6), dtype="float64")
    outs = {"sm": ops.softmax(x, -1), "sm1": ops.softmax(x, 1), "ln": ops.layernorm(x, w, b),
            "ln2": ops.layernorm(x, num_axes=2), "rms": ops.rmsnorm(x, w), "ln_b": ops.layernorm(x, bias=b),
            "bn": ops.batchnorm(x, w, b, b, ops.abs(w), eps=1e-3), "gn": ops.groupnorm(x, 3, w, b)}
    feeds = {"x": rng.standard_normal((3, 4, 6)) * 3 + 100.0}  # a large mean: two-pass statistics
    got = _check(outs, feeds, tmp_path, F64)
    e = np.exp(feeds["x"] - feeds["x"].max(-1, keepdims=True))
    np.testing.assert_allclose(got["sm"], e / e.sum(-1, keepdims=True), **F64)
    xv = feeds["x"]
    ln = (xv - xv.mean(-1, keepdims=True)) / np.sqrt(xv.var(-1, keepdims=True) + 1e-5) * w.value + b.value
    np.testing.assert_allclose(got["ln"], ln, rtol=1e-11, atol=1e-12)
    kinds = {op.kind.value for op in ag.ir.graph.topo_order(list(outs.values()))[0]}
    assert not kinds & {"softmax", "layernorm", "rmsnorm", "batchnorm", "groupnorm"}, kinds


def test_float64_attention_computes_in_float64(tmp_path):
    """sdpa of float64 is built op by op (ops/float64.py): causal, bool and additive masks, a fully
    masked row (0), broadcast batch dims; against the oracle's fused attention and the float32
    kernels' refusal where the fused op is kept (a causal mask over dynamic sizes)."""
    from aitgen.ops.attention import _reference_logical, AttentionAttrs
    q = ag.Tensor([2, 2, 4, 8], dtype="float64", name="q")
    k = ag.Tensor([1, 2, 5, 8], dtype="float64", name="k")
    v = ag.Tensor([2, 2, 5, 3], dtype="float64", name="v")
    am = ag.Tensor([4, 5], dtype="float64", name="am")
    bm = ag.Tensor([4, 5], dtype="bool", name="bm")
    outs = {"plain": ops.scaled_dot_product_attention(q, k, v), "causal": ops.scaled_dot_product_attention(q, k, v, causal=True),
            "add": ops.scaled_dot_product_attention(q, k, v, am, scale=0.3),
            "bool": ops.scaled_dot_product_attention(q, k, v, bm, causal=True)}
    rng = np.random.default_rng(8)
    bmv = rng.random((4, 5)) > 0.3
    bmv[2] = False  # a row that sees no key: 0
    feeds = {"q": rng.standard_normal((2, 2, 4, 8)), "k": rng.standard_normal((1, 2, 5, 8)),
             "v": rng.standard_normal((2, 2, 5, 3)), "am": rng.standard_normal((4, 5)), "bm": bmv}
    got = _check(outs, feeds, tmp_path, F64)
    args = [feeds["q"], feeds["k"], feeds["v"]]
    for key, extra, attrs in (("plain", [], AttentionAttrs(False, None)), ("causal", [], AttentionAttrs(True, None)),
                              ("add", [feeds["am"]], AttentionAttrs(False, 0.3)),
                              ("bool", [feeds["bm"]], AttentionAttrs(True, None))):
        (want,) = _reference_logical(args + extra, attrs)
        np.testing.assert_allclose(got[key], want, err_msg=key, **F64)
    assert np.all(got["bool"][:, :, 2] == 0)
    n = ag.IntVar("n", 1, 8)
    qd = ag.Tensor([1, n, 8], dtype="float64", name="qd")
    with pytest.raises(UnsupportedOpError, match=r"attention.*float64"):
        ag.compile_model({"y": ops.scaled_dot_product_attention(qd, qd, qd, causal=True)}, target="cpu",
                         workdir=str(tmp_path / "dyn"))


def test_dtype_names_and_numpy_types():
    import ml_dtypes
    assert DType.float64.is_float and not DType.float64.is_low_float
    assert DType.uint32.is_int and DType.uint32.is_unsigned and not DType.int16.is_unsigned
    assert DType.float8_e5m2.is_fp8 and DType.float8_e5m2.is_low_float
    assert ag.ir.dtype.as_dtype(np.dtype(ml_dtypes.float8_e4m3fnuz)) is DType.float8_e4m3fnuz
    assert ag.ir.dtype.as_dtype(np.uint16) is DType.uint16
    assert ag.ir.dtype.as_dtype("double") is DType.float64


# -- against onnxruntime, through the ONNX importer -------------------------------------------

_ONNX_BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual",
                "GreaterOrEqual", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Mod"]
_ONNX_UNARY = ["Neg", "Abs", "BitwiseNot", "Exp", "Sqrt", "Tanh", "Sigmoid", "Erf", "Floor"]


def _onnx_model(elem: int, shape, ops_: list[str], extra_nodes=()):
    from onnx import TensorProto, helper
    nodes, outs = [], []
    for op in ops_:
        ins = ["x", "y"] if op in _ONNX_BINARY else ["x"]
        nodes.append(helper.make_node(op, ins, [op.lower()]))
        bool_out = op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")
        outs.append(helper.make_tensor_value_info(op.lower(), TensorProto.BOOL if bool_out else elem, shape))
    for node, out in extra_nodes:
        nodes.append(node)
        outs.append(out)
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", elem, shape),
                                       helper.make_tensor_value_info("y", elem, shape)], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _ort_or_skip(m, feeds):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3  # quiet about the initializers a one-node model leaves unused
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in m.graph.output]
        return dict(zip(names, sess.run(None, feeds))), ""
    except Exception as e:  # noqa: BLE001 - a type onnxruntime has no kernel for
        return None, str(e)


def _per_op_against_ort(dt: str, ops_: list[str], feeds: dict, tmp_path, tol=None) -> int:
    """Each op on its own against onnxruntime (a missing ORT kernel skips that op only). Returns
    the number of ops compared."""
    onnx = pytest.importorskip("onnx", reason="onnx is not installed")
    from onnx import helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    shape = list(feeds["x"].shape)
    have = []
    for op in ops_:
        m = _onnx_model(elem, shape, [op])
        theirs, _ = _ort_or_skip(m, feeds)
        if theirs is not None:
            have.append((op, theirs[op.lower()]))
    if not have:
        pytest.skip(f"onnxruntime has no kernel for any of these ops in {dt}")
    m = _onnx_model(elem, shape, [op for op, _ in have])
    inputs, outputs = ag.load_onnx(m.SerializeToString())
    got = ag.compile_model(outputs, target="cpu", workdir=str(tmp_path)).run(feeds)
    for op, want in have:
        if tol is None or want.dtype.kind != "f":
            np.testing.assert_array_equal(got[op.lower()], want, err_msg=op)
        else:
            np.testing.assert_allclose(got[op.lower()], want, err_msg=op, **tol)
    return len(have)


@pytest.mark.parametrize("dt", INTS)
def test_integer_onnx_ops_match_onnxruntime(dt, tmp_path):
    rng = np.random.default_rng(3)
    feeds = {"x": _ints(rng, dt, (3, 8)), "y": _ints(rng, dt, (3, 8), lo=1)}  # ORT traps on / 0
    n = _per_op_against_ort(dt, [o for o in _ONNX_BINARY + ["Neg", "Abs", "BitwiseNot"]
                                 if not (o == "Neg" and dt.startswith("u"))], feeds, tmp_path)
    assert n >= 5


def test_float64_onnx_ops_match_onnxruntime(tmp_path):
    rng = np.random.default_rng(4)
    feeds = {"x": rng.uniform(0.1, 3.0, (3, 8)), "y": rng.uniform(0.5, 2.0, (3, 8))}
    # (Mod of floats needs fmod=1 in onnxruntime before opset 28)
    n = _per_op_against_ort("float64", [o for o in _ONNX_BINARY + _ONNX_UNARY if not o.startswith(("Bitwise", "Mod"))],
                            feeds, tmp_path, dict(rtol=1e-9, atol=1e-12))
    assert n >= 10


@pytest.mark.parametrize("dt", ["uint8", "uint16", "uint32", "uint64"])
def test_bitshift_matches_onnxruntime(dt, tmp_path):
    pytest.importorskip("onnx", reason="onnx is not installed")
    from onnx import TensorProto, helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    nodes = [helper.make_node("BitShift", ["x", "y"], [d.lower()], direction=d) for d in ("LEFT", "RIGHT")]
    outs = [helper.make_tensor_value_info(d, elem, [3, 8]) for d in ("left", "right")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", elem, [3, 8]),
                                       helper.make_tensor_value_info("y", elem, [3, 8])], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    rng = np.random.default_rng(5)
    bits = 8 * np.dtype(dt).itemsize
    feeds = {"x": _ints(rng, dt, (3, 8)), "y": _ints(rng, dt, (3, 8), 0, bits - 1)}  # in range: ORT's C++ shift
    theirs, why = _ort_or_skip(m, feeds)
    if theirs is None:
        pytest.skip(f"onnxruntime: {why[:200]}")
    _, outputs = ag.load_onnx(m.SerializeToString())
    got = ag.compile_model(outputs, target="cpu", workdir=str(tmp_path)).run(feeds)
    for k in ("left", "right"):
        np.testing.assert_array_equal(got[k], theirs[k], err_msg=k)


def test_constants_of_new_dtypes_survive_weights_file_and_load(tmp_path):
    """Constants go through weights.safetensors (F64, U8, ..., F8_E4M3 and our F8_*FNUZ names) and a
    Model.load in a fresh container reads them back."""
    rng = np.random.default_rng(6)
    outs, feeds = {}, {}
    for dt in ["float64", "int16", "uint8", "uint64", "float8_e4m3fn", "float8_e5m2fnuz"]:
        d = DType(dt)
        v = ((rng.standard_normal((3, 4)) * 4).astype(np.float32).astype(d.np) if d.is_float
             else rng.integers(0, 100, (3, 4)).astype(d.np))
        x = ag.Tensor([3, 4], dtype=dt, name=f"x_{dt}")
        outs[dt] = ops.add(x, ag.constant(v, dtype=dt, name=f"c_{dt}"))
        feeds[f"x_{dt}"] = v
    with ag.compile_model(outs, target="cpu", workdir=str(tmp_path)) as m:
        first = m.run(feeds)
    ref = ag.reference.run(outs, feeds)
    with ag.Model.load(str(tmp_path)) as m2:
        again = m2.run(feeds)
    for k in outs:  # bytes: fp8 arrays compare through their codes
        np.testing.assert_array_equal(first[k].view(np.uint8), ref[k].view(np.uint8), err_msg=k)
        np.testing.assert_array_equal(again[k].view(np.uint8), ref[k].view(np.uint8), err_msg=k)


def test_serving_names_the_tensor_without_a_v2_datatype():
    """KServe v2 has FP64/UINT* but no float8: a model with a float8 input is refused by name."""
    from aitgen.serving.errors import ServingError
    from aitgen.serving.protocol import ModelSignature
    spec = {"dtype": "float64", "min_shape": [2], "max_shape": [2]}
    meta = {"name": "m", "target": "cpu", "inputs": {"x": spec}, "outputs": {"y": dict(spec, dtype="uint16")}}
    sig = ModelSignature.from_meta(meta)
    assert sig.inputs["x"].datatype == "FP64" and sig.outputs["y"].datatype == "UINT16"
    meta["inputs"]["x"] = dict(spec, dtype="float8_e4m3fn")
    with pytest.raises(ServingError, match="'x'.*float8_e4m3fn"):
        ModelSignature.from_meta(meta)


_CAST_TYPES = ["float32", "float64", "float16", "int16", "int32", "uint8", "uint16", "uint32", "uint64",
               "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("src", _CAST_TYPES)
def test_cast_matrix_matches_onnxruntime(src, tmp_path):
    """Cast from `src` to every type of the list (one ONNX model, one CPU build), against
    onnxruntime's Cast kernels. Values lie in every target's range; floats carry fractions (cast
    to integers truncates) and values that round differently at each float width."""
    pytest.importorskip("onnx", reason="onnx is not installed")
    import ml_dtypes
    from onnx import TensorProto, helper
    np_of = {n: np.dtype(getattr(ml_dtypes, n)) if n.startswith("float8") else np.dtype(n) for n in _CAST_TYPES}
    elem = {n: helper.np_dtype_to_tensor_dtype(d) for n, d in np_of.items()}
    vals = np.array([0, 1, 2, 3, 7, 15, 100, 127, 200, 0.5, 1.75, 2.5, 3.3, 99.9, 0.1, 0.0625, 13.4, 255])
    if src.startswith(("int", "uint")):
        vals = np.trunc(vals)
    x = vals.astype(np.float32).astype(np_of[src])
    dsts = [d for d in _CAST_TYPES if d != src]
    nodes = [helper.make_node("Cast", ["x"], [f"to_{d}"], to=elem[d]) for d in dsts]
    outs = [helper.make_tensor_value_info(f"to_{d}", elem[d], [len(x)]) for d in dsts]
    m = helper.make_model(helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", elem[src], [len(x)])], outs),
                          opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    # per target: a Cast onnxruntime lacks skips that target only
    have = {}
    for d, node, out in zip(dsts, nodes, outs):
        one = helper.make_model(helper.make_graph([node], "c", [helper.make_tensor_value_info("x", elem[src], [len(x)])],
                                                  [out]), opset_imports=[helper.make_opsetid("", 21)])
        one.ir_version = 10
        theirs, _ = _ort_or_skip(one, {"x": x})
        if theirs is not None:
            have[d] = theirs[f"to_{d}"]
    if not have:
        pytest.skip(f"onnxruntime takes no {src} input from numpy (from float8: test_dtypes_fp8.py round trips)")
    _, outputs = ag.load_onnx(m.SerializeToString())
    got = ag.compile_model(outputs, target="cpu", workdir=str(tmp_path)).run({"x": x})
    for d, want in have.items():
        g = got[f"to_{d}"]
        if d.startswith("float8"):  # onnxruntime may hand float8 back as raw codes
            want = np.asarray(want).view(np.uint8)
            g = g.view(np.uint8)
        np.testing.assert_array_equal(g, want, err_msg=f"{src} -> {d}")
    assert len(have) >= 5


def test_float64_survives_the_pass_pipeline():
    """The oracle of the fused graph (element-wise groups, GEMM epilogues) stays in float64: fused
    expressions and epilogues evaluate float64 slots in float64, not float32."""
    from aitgen.compiler import compile_options
    from aitgen.ir import Graph
    from aitgen.ir.op import OpKind
    from aitgen.passes import run_pipeline
    x = ag.Tensor([4, 6], dtype="float64", name="x")
    w = ag.constant(np.random.default_rng(9).standard_normal((6, 5)), dtype="float64")
    r = ag.Tensor([4, 5], dtype="float64", name="r")
    y = ops.tanh(ops.add(ops.mul(ops.gelu(ops.add(ops.matmul(x, w), r)), 1.0 + 1e-12), 1e-13))
    z = ops.exp(ops.sub(ops.mul(x, 3.0), 1e-12))
    g = Graph.from_outputs({"y": y, "z": z}, inputs=[x, r])
    rng = np.random.default_rng(10)
    feeds = {"x": rng.standard_normal((4, 6)), "r": rng.standard_normal((4, 5))}
    before = ag.reference.run(g, feeds)
    after_graph = run_pipeline(g.copy(), compile_options("cpu"))
    kinds = {op.kind for op in after_graph.ops}
    assert OpKind.FUSED_ELEMENTWISE in kinds or any(getattr(op.attrs, "epilogue", None) for op in after_graph.ops)
    after = ag.reference.run(after_graph, feeds)
    for k in before:
        assert after[k].dtype == np.float64
        np.testing.assert_allclose(after[k], before[k], rtol=1e-13, atol=1e-15, err_msg=k)


def _structural_nodes(elem: int):
    """(node, output value-info) pairs of reductions, scans and memory ops on x [3, 8] (and y)."""
    from onnx import TensorProto, helper
    i64 = TensorProto.INT64
    n, v = helper.make_node, helper.make_tensor_value_info
    return [
        (n("ReduceSum", ["x", "ax1"], ["rsum"], keepdims=0), v("rsum", elem, [3])),
        (n("ReduceMax", ["x", "ax1"], ["rmax"], keepdims=1), v("rmax", elem, [3, 1])),
        (n("ReduceMin", ["x", "ax0"], ["rmin"], keepdims=0), v("rmin", elem, [8])),
        (n("ReduceProd", ["x", "ax0"], ["rprod"], keepdims=0), v("rprod", elem, [8])),
        (n("CumSum", ["x", "ax1s"], ["csum"]), v("csum", elem, [3, 8])),
        (n("ArgMax", ["x"], ["amax"], axis=1, keepdims=0), v("amax", i64, [3])),
        (n("Transpose", ["x"], ["tr"], perm=[1, 0]), v("tr", elem, [8, 3])),
        (n("Concat", ["x", "y"], ["cat"], axis=0), v("cat", elem, [6, 8])),
        (n("Slice", ["x", "st", "en", "ax1", "stp"], ["sl"]), v("sl", elem, [3, 3])),
        (n("Gather", ["x", "idx"], ["ga"], axis=1), v("ga", elem, [3, 2])),
        (n("Reshape", ["x", "shp"], ["rs"]), v("rs", elem, [4, 6])),
        (n("Less", ["x", "y"], ["lt"]), v("lt", TensorProto.BOOL, [3, 8])),
        (n("Where", ["lt", "x", "y"], ["wh"]), v("wh", elem, [3, 8])),
        (n("Pad", ["x", "pads"], ["pad"]), v("pad", elem, [4, 10])),
        (n("Expand", ["rmax", "exs"], ["ex"]), v("ex", elem, [3, 8])),
    ]


@pytest.mark.parametrize("dt", ["float64", "int16", "uint8", "uint32", "uint64"])
def test_reductions_and_memory_ops_match_onnxruntime(dt, tmp_path):
    """Reductions, CumSum, ArgMax and memory ops (Transpose, Concat, Slice, Gather, Reshape, Where,
    Pad, Expand) through the importer, each node against onnxruntime where it has the kernel."""
    pytest.importorskip("onnx", reason="onnx is not installed")
    from onnx import helper, numpy_helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    consts = {"ax0": [0], "ax1": [1], "ax1s": 1, "st": [1], "en": [7], "stp": [2], "idx": [5, 0],
              "shp": [4, 6], "pads": [0, 1, 1, 1], "exs": [3, 8]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items()]
    ins = [helper.make_tensor_value_info(k, elem, [3, 8]) for k in ("x", "y")]
    rng = np.random.default_rng(11)
    if dt == "float64":
        feeds = {k: rng.standard_normal((3, 8)) for k in ("x", "y")}
    else:
        feeds = {k: _ints(rng, dt, (3, 8), 0, 5) for k in ("x", "y")}  # small: products stay exact
    nodes = _structural_nodes(elem)
    have = []
    for i, (node, out) in enumerate(nodes):
        needed = [nodes[j] for j in range(i) if nodes[j][0].output[0] in node.input] + [(node, out)]
        g = helper.make_graph([nd for nd, _ in needed], "t", ins, [out], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        m.ir_version = 10
        theirs, _ = _ort_or_skip(m, feeds)
        if theirs is not None:
            have.append((node, out, theirs[out.name]))
    used = {nd.output[0] for nd, _, _ in have}
    deps = [nd for nd, _ in nodes if nd.output[0] in {"lt", "rmax"} and nd.output[0] not in used]
    g = helper.make_graph(deps + [nd for nd, _, _ in have], "t", ins, [o for _, o, _ in have], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    _, outputs = ag.load_onnx(m.SerializeToString())
    got = ag.compile_model(outputs, target="cpu", workdir=str(tmp_path)).run(feeds)
    for node, out, want in have:
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got[out.name], want, rtol=1e-12, atol=1e-14, err_msg=node.op_type)
        else:
            np.testing.assert_array_equal(got[out.name], want, err_msg=node.op_type)
    assert len(have) >= 5, [nd.op_type for nd, _, _ in have]  # onnxruntime lacks many int16/uint8 kernels


def test_bad_input_of_new_dtypes_is_a_typed_error_naming_it(tmp_path):
    from aitgen.errors import DTypeError, RuntimeInputError
    f = ag.Tensor([4], dtype="float64", name="f")
    u = ag.Tensor([4], dtype="uint8", name="u")
    with pytest.raises(DTypeError, match="shift_left.*integer"):
        ops.shift_left(f, f)
    with pytest.raises(DTypeError, match="-1 does not fit a uint8"):
        ops.add(u, -1)
    with pytest.raises(DTypeError, match="float64 vs uint8|differ"):
        ops.add(f, u)
    m = ag.compile_model({"y": ops.add(f, 1.0), "z": ops.add(u, 1)}, target="cpu", workdir=str(tmp_path))
    with pytest.raises(RuntimeInputError, match="'f'.*float32.*float64"):
        m.run({"f": np.zeros(4, np.float32), "u": np.zeros(4, np.uint8)})
    with pytest.raises(RuntimeInputError, match="'u'.*int8.*uint8"):
        m.run({"f": np.zeros(4), "u": np.zeros(4, np.int8)})
    out = m.run({"f": np.zeros(4), "u": np.full(4, 255, np.uint8)})  # the model stays usable; 255 + 1 wraps
    np.testing.assert_array_equal(out["z"], np.zeros(4, np.uint8))
