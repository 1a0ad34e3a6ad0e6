"""Mutated ONNX models: every failure of load() (and of a CPU build of what loads) is a typed
aitgen error, never another exception and never a crash.

A few small valid models (conv net, MLP, attention-like block, reductions, resize, shape chain)
are mutated with fixed seeds: byte flips and truncations of the serialized proto, deleted inputs
and initializers, dangling names, unknown ops and domains, wrong attribute types, missing
attributes, bogus shapes and element types, cycles, duplicated outputs, odd opsets, missing or
extra node inputs. Each mutant goes through load(); a small, fixed subset of those that load is
built for the CPU and run on random inputs.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import aitgen as ag  # noqa: E402
from aitgen.errors import AitgenError  # noqa: E402
from aitgen.frontend import onnx as ox  # noqa: E402
from aitgen.ir.graph import topo_order  # noqa: E402

F = TensorProto.FLOAT
N_MUTANTS_PER_BASE = 45
N_BUILDS = 6


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _init(name, shape, seed=0, dtype=np.float32):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(dtype), name)


def base_models() -> list:
    vi = helper.make_tensor_value_info
    conv = _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["p"], ["g"]),
         helper.make_node("Flatten", ["g"], ["y"], axis=1)],
        [vi("x", F, ["N", 3, 8, 8])], [vi("y", F, None)],
        [_init("w", [4, 3, 3, 3]), _init("b", [4], 1)])
    mlp = _model(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, alpha=0.5),
         helper.make_node("Tanh", ["h"], ["a"]),
         helper.make_node("MatMul", ["a", "w2"], ["m"]),
         helper.make_node("Softmax", ["m"], ["y"], axis=-1)],
        [vi("x", F, [2, 6])], [vi("y", F, None)],
        [_init("w1", [5, 6]), _init("b1", [5], 2), _init("w2", [5, 3], 3)])
    attn = _model(
        [helper.make_node("LayerNormalization", ["x", "s", "bb"], ["n"], axis=-1, epsilon=1e-5),
         helper.make_node("Transpose", ["n"], ["nt"], perm=[0, 2, 1]),
         helper.make_node("MatMul", ["n", "nt"], ["qk"]),
         helper.make_node("Softmax", ["qk"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "n"], ["y"])],
        [vi("x", F, [1, 4, 8])], [vi("y", F, None)], [_init("s", [8]), _init("bb", [8], 1)])
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    red = _model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
         helper.make_node("ArgMax", ["x"], ["a"], axis=2, keepdims=0),
         helper.make_node("Div", ["x", "s"], ["y"])],
        [vi("x", F, [2, 3, 4])], [vi("y", F, None), vi("a", TensorProto.INT64, None)], [axes], opset=18)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    rs = _model(
        [helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="linear"),
         helper.make_node("BatchNormalization", ["u", "g", "be", "mu", "var"], ["y"])],
        [vi("x", F, [1, 2, 3, 3])], [vi("y", F, None)],
        [scales, _init("g", [2]), _init("be", [2], 1), numpy_helper.from_array(np.zeros(2, np.float32), "mu"),
         numpy_helper.from_array(np.ones(2, np.float32), "var")], opset=19)
    shp = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"]),
         helper.make_node("Concat", ["nu", "m1"], ["tgt"], axis=0),
         helper.make_node("Reshape", ["x", "tgt"], ["y"])],
        [vi("x", F, ["B", 3, 4])], [vi("y", F, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([0], np.int64), "ax0"),
         numpy_helper.from_array(np.array([-1], np.int64), "m1")])
    return [conv, mlp, attn, red, rs, shp]


# -- mutations -----------------------------------------------------------------------------------

def _bytes(m, rng):
    b = bytearray(m.SerializeToString())
    kind = rng.integers(3)
    if kind == 0:
        for _ in range(rng.integers(1, 5)):
            i = rng.integers(len(b))
            b[i] ^= int(rng.integers(1, 256))
    elif kind == 1:
        b = b[: rng.integers(1, len(b))]
    else:
        i = rng.integers(len(b))
        b[i:i] = bytes(rng.integers(0, 256, size=rng.integers(1, 9)).astype(np.uint8))
    return bytes(b)


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))] if len(seq) else None


def _del_input(m, rng):
    if m.graph.input:
        del m.graph.input[int(rng.integers(len(m.graph.input)))]


def _del_init(m, rng):
    if m.graph.initializer:
        del m.graph.initializer[int(rng.integers(len(m.graph.initializer)))]


def _dangling(m, rng):
    n = _pick(rng, m.graph.node)
    if n.input:
        n.input[int(rng.integers(len(n.input)))] = "no_such_value"


def _unknown_op(m, rng):
    _pick(rng, m.graph.node).op_type = _pick(rng, ["NotAnOp", "Loop", "NonMaxSuppression", "StringNormalizer", ""])


def _bad_domain(m, rng):
    _pick(rng, m.graph.node).domain = _pick(rng, ["com.bogus", "ai.onnx.ml", "ai.onnx.preview.training"])


def _attr_type(m, rng):
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        return
    n = _pick(rng, nodes)
    i = int(rng.integers(len(n.attribute)))
    name = n.attribute[i].name
    bogus = _pick(rng, [helper.make_attribute(name, "oops"), helper.make_attribute(name, 3.5),
                        helper.make_attribute(name, [1.0, 2.0]), helper.make_attribute(name, -7),
                        helper.make_attribute(name, [9, 9, 9, 9, 9, 9, 9]),
                        helper.make_attribute(name, numpy_helper.from_array(np.zeros(3, np.float32)))])
    n.attribute[i].CopyFrom(bogus)


def _drop_attr(m, rng):
    nodes = [n for n in m.graph.node if n.attribute]
    if nodes:
        n = _pick(rng, nodes)
        del n.attribute[int(rng.integers(len(n.attribute)))]


def _extra_attr(m, rng):
    _pick(rng, m.graph.node).attribute.append(helper.make_attribute("bogus_attr", 1))


def _bad_shape(m, rng):
    vi = _pick(rng, m.graph.input)
    dims = vi.type.tensor_type.shape.dim
    choice = rng.integers(4)
    if choice == 0 and dims:
        d = dims[int(rng.integers(len(dims)))]
        d.dim_value = int(_pick(rng, [0, 1, 7, 1 << 20]))
    elif choice == 1 and dims:
        del dims[int(rng.integers(len(dims)))]
    elif choice == 2:
        dims.add().dim_value = 5
    else:
        vi.type.tensor_type.ClearField("shape")


def _bad_init(m, rng):
    if not m.graph.initializer:
        return
    t = _pick(rng, m.graph.initializer)
    if rng.integers(3) == 0:
        t.data_type = int(_pick(rng, [TensorProto.STRING, TensorProto.UINT16, 99]))
    elif t.dims:
        t.dims[0] = t.dims[0] + int(_pick(rng, [1, 3, -1]))
    else:
        t.dims.append(2)


def _bad_elem_type(m, rng):
    _pick(rng, m.graph.input).type.tensor_type.elem_type = int(_pick(rng, [TensorProto.DOUBLE, TensorProto.STRING, 0, 77]))


def _cycle(m, rng):
    nodes = m.graph.node
    if len(nodes) >= 2 and nodes[0].input:
        nodes[0].input[0] = nodes[-1].output[0]
    elif nodes and nodes[0].input:
        nodes[0].input[0] = nodes[0].output[0]


def _dup_output(m, rng):
    if len(m.graph.node) >= 2:
        m.graph.node[1].output[0] = m.graph.node[0].output[0]


def _bad_graph_output(m, rng):
    m.graph.output[0].name = "never_made"


def _opset(m, rng):
    v = _pick(rng, [1, 5, 12, 99, 1 << 30])
    if rng.integers(4) == 0 or not m.opset_import:
        del m.opset_import[:]
    else:
        m.opset_import[0].version = int(v)


def _arity(m, rng):
    n = _pick(rng, m.graph.node)
    if rng.integers(2) and n.input:
        del n.input[-1]
    else:
        n.input.append(_pick(rng, list(n.input) or ["x"]))


def _no_graph(m, rng):
    m.ClearField("graph")


MUTATIONS = [_del_input, _del_init, _dangling, _unknown_op, _bad_domain, _attr_type, _drop_attr, _extra_attr,
             _bad_shape, _bad_init, _bad_elem_type, _cycle, _dup_output, _bad_graph_output, _opset, _arity,
             _no_graph]


def mutants():
    """(label, model or bytes) for every mutant: deterministic seeds per base model."""
    out = []
    for bi, base in enumerate(base_models()):
        rng = np.random.default_rng(1000 + bi)
        for k in range(N_MUTANTS_PER_BASE):
            if k % 3 == 0:
                out.append((f"base{bi}/bytes{k}", _bytes(base, rng)))
                continue
            m = copy.deepcopy(base)
            muts = [MUTATIONS[int(rng.integers(len(MUTATIONS)))] for _ in range(int(rng.integers(1, 3)))]
            muts.sort(key=lambda f: f is _no_graph)  # clearing the graph goes last
            for f in muts:
                if m.graph.node and m.graph.input:  # every mutation edits a graph that still has both
                    f(m, rng)
            out.append((f"base{bi}/{'+'.join(f.__name__.strip('_') for f in muts)}{k}", m))
    return out


def _load(obj):
    """(inputs, outputs) or the typed error; any other exception fails the test."""
    try:
        return ox.load(obj)
    except AitgenError as e:
        assert str(e), "a typed error must say what is wrong"
        return e


def test_base_models_load_and_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    for bi, m in enumerate(base_models()):
        inputs, outputs = ox.load(m)
        feeds = {n: np.random.default_rng(bi).standard_normal([int(d) if d.is_static else 2 for d in t.shape]).astype(np.float32)
                 for n, t in inputs.items()}
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        got = ag.reference.run(outputs, feeds)
        for (k, g), w in zip(got.items(), want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"base{bi} {k}")


def test_mutated_models_raise_typed_errors(tmp_path):
    ms = mutants()
    assert len(ms) >= 250
    loaded, errors = [], {}
    for label, obj in ms:
        try:
            res = _load(obj)
        except AitgenError:  # pragma: no cover - _load returns those
            raise
        except Exception as e:  # noqa: BLE001 - exactly what must not happen
            pytest.fail(f"{label}: load raised {type(e).__name__}: {e}")
        if isinstance(res, AitgenError):
            errors[type(res).__name__] = errors.get(type(res).__name__, 0) + 1
        else:
            loaded.append((label, res))
    # Most mutants are malformed; the typed errors must include both kinds.
    assert errors.get("ImportError_", 0) > 50 and errors.get("UnsupportedOpError", 0) > 10, errors
    # A fixed handful of the loaded mutants also build and run: typed errors only there too.
    rng = np.random.default_rng(7)
    picked = [loaded[int(i)] for i in rng.choice(len(loaded), size=min(N_BUILDS, len(loaded)), replace=False)]
    for j, (label, (inputs, outputs)) in enumerate(picked):
        try:
            m = ag.compile_model(outputs, target="cpu", workdir=tmp_path / f"m{j}")
            live = {t.name: t for t in topo_order(list(outputs.values()))[1] if t.is_input}
            feeds = {n: np.ones([d.value if d.is_static else d.lower for d in t.shape], t.dtype.np)
                     for n, t in live.items()}
            m.run(feeds)
            m.close()
        except AitgenError:
            pass
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"{label}: build/run raised {type(e).__name__}: {e}")
