"""QDQ ONNX models (QuantizeLinear/DequantizeLinear around MatMul/Gemm/Conv, as onnxruntime's
quantize_static writes them) imported with fold_qdq=True: int8 kernels where exact, float
composites elsewhere (aitgen/frontend/onnx/qdq_fold.py).

One hand-built model holds every folded form (MatMul over a batch with uint8 / zero point 0,
given or left out, and int8 / zero point -128 activations, quantised by the kernel; uint8 / 128 and
int8 / 0 ones, read as Q's integers with the zero point compensated in the bias; Gemm transB 1 with
an int32 bias DQ'd as onnxruntime writes it, with zero point 0 and -20; Gemm transB 0; Conv with
pads / strides / dilations / groups and a bias, and under zero point 90 without and with pads, a
Pad of 90 then; a Relu and an Add after one) and the forms that must not fold (weight zero point
7, a weight given at run time): ONE CPU build. Activations span both saturations and exact ties
of x / scale.

Tolerances: the folded graph sums the same integers exactly where the QDQ graph (onnx.reference)
sums their float images, so they differ by float32 rounding only: max error <= 1e-5 x max |y|.
Compiled vs oracle: oneDNN scales in its own order, <= 1e-6 x max |y|. onnxruntime (its own fused
int8 kernels, asked only with VNNI: without it its u8 x s8 GEMM saturates int16 pair sums):
<= 1e-4 x max |y|.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import aitgen as ag
from aitgen.codegen.kernels.cpu.gemm import cpu_flags, int8_vnni
from aitgen.frontend import onnx as ox
from aitgen.ir.op import OpKind

VNNI = int8_vnni()
ORT_U8S8_EXACT = bool({"avx512_vnni", "avx_vnni"} & cpu_flags())
SX = np.float32(0.05)
needs_vnni = pytest.mark.skipif(not VNNI, reason="the fold needs VNNI (else the composites stay)")


def _hand_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(nh.from_array(np.asarray(arr), name))
        return name

    def q_dq(x, out, zp=0, dtype=np.uint8):
        s, z = init(f"{out}_s", SX), init(f"{out}_z", dtype(zp))
        nodes.append(h.make_node("QuantizeLinear", [x, s, z], [f"{out}_q"]))
        nodes.append(h.make_node("DequantizeLinear", [f"{out}_q", s, z], [out]))
        return out

    def w_dq(out, shape, axis, zp=0):
        n = shape[axis]
        w = init(f"{out}_q", rng.integers(-127, 128, shape).astype(np.int8))
        s = init(f"{out}_s", (rng.random(n) * 0.02 + 0.001).astype(np.float32))
        z = init(f"{out}_z", np.full(n, zp, np.int8))
        nodes.append(h.make_node("DequantizeLinear", [w, s, z], [out], axis=axis))
        return out, f"{out}_s"

    def bias_dq(out, n, w_scale):
        # onnxruntime's form: int32 bias, scale x_scale * w_scale, DQ'd
        b = init(f"{out}_q", rng.integers(-5000, 5000, n).astype(np.int32))
        s = init(f"{out}_s", (SX * nh.to_array([i for i in inits if i.name == w_scale][0])).astype(np.float32))
        nodes.append(h.make_node("DequantizeLinear", [b, s], [out], axis=0))
        return out

    a = q_dq("x", "a")
    w1, _ = w_dq("w1", (16, 6), 1)
    nodes.append(h.make_node("MatMul", [a, w1], ["mm"]))
    w2, s2 = w_dq("w2", (5, 16), 0)
    x2 = q_dq("x2", "a2")
    nodes.append(h.make_node("Gemm", [x2, w2, bias_dq("b2", 5, s2)], ["gemm_tb"], transB=1))
    w3, _ = w_dq("w3", (16, 4), 1)
    nodes.append(h.make_node("Gemm", [x2, w3], ["gemm"]))
    c = q_dq("xc", "c")
    wc, sc = w_dq("wc", (6, 2, 3, 3), 0)
    nodes.append(h.make_node("Conv", [c, wc, bias_dq("bc", 6, sc)], ["conv"], pads=[1, 0, 2, 1],
                             strides=[2, 1], dilations=[1, 2], group=2))
    s0 = init("s0", SX)   # zero points left out: uint8 0
    nodes += [h.make_node("QuantizeLinear", ["x", s0], ["x0_q"]), h.make_node("DequantizeLinear", ["x0_q", s0], ["x0"]),
              h.make_node("MatMul", ["x0", w1], ["mm_nozp"])]
    # onnxruntime's QInt8 form of a non-negative tensor: zero point -128, the uint8 grid shifted
    nodes.append(h.make_node("MatMul", [q_dq("x", "a8", zp=-128, dtype=np.int8), w1], ["mm_i8"]))
    # other zero points: the kernel reads Q's integers, the bias compensates the zero point
    nodes.append(h.make_node("MatMul", [q_dq("x", "az", zp=128), w1], ["mm_zp"]))
    nodes.append(h.make_node("MatMul", [q_dq("x", "ai", dtype=np.int8), w1], ["mm_s8"]))
    x2z = q_dq("x2", "a2z", zp=-20, dtype=np.int8)
    nodes.append(h.make_node("Gemm", [x2z, w2, bias_dq("b2z", 5, s2)], ["gemm_zp"], transB=1))
    cz = q_dq("xc", "cz", zp=90)
    nodes.append(h.make_node("Conv", [cz, wc], ["conv_zp"], strides=[1, 2], group=2))
    nodes.append(h.make_node("Conv", [cz, wc], ["conv_pad_zp"], pads=[1, 2, 0, 1], group=2))
    # float ops after a folded one (fusion passes meet the int8 kind before quantize_int8's place)
    nodes.append(h.make_node("MatMul", ["az", w3], ["mm_zp3"]))
    nodes.append(h.make_node("Relu", ["mm_zp3"], ["mm_zp3_relu"]))
    nodes.append(h.make_node("Add", ["mm_zp3_relu", init("res", rng.standard_normal(4).astype(np.float32))],
                             ["mm_zp_relu_add"]))
    # must not fold: weight zero point, a weight given at run time
    wz, _ = w_dq("wz", (16, 6), 1, zp=7)
    nodes.append(h.make_node("MatMul", [a, wz], ["keep_wzp"]))
    ws = init("wr_s", np.float32(0.01))
    nodes.append(h.make_node("DequantizeLinear", ["wr", ws, init("wr_z", np.int8(0))], ["wr_d"]))
    nodes.append(h.make_node("MatMul", [a, "wr_d"], ["keep_rt_w"]))   # a weight given at run time
    outs = ["mm", "mm_nozp", "mm_i8", "gemm_tb", "gemm", "conv", "mm_zp", "mm_s8", "gemm_zp", "conv_zp", "conv_pad_zp",
            "mm_zp_relu_add", "keep_wzp", "keep_rt_w"]
    g = h.make_graph(nodes, "qdq", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 16]),
                                    h.make_tensor_value_info("x2", T.FLOAT, [3, 16]),
                                    h.make_tensor_value_info("xc", T.FLOAT, [2, 4, 7, 8]),
                                    h.make_tensor_value_info("wr", T.INT8, [16, 6])],
                     [h.make_tensor_value_info(o, T.FLOAT, None) for o in outs], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


def _x(shape, seed):
    """Both saturations (beyond 255 * SX and below 0) and exact ties k.5 * SX."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 16, shape).astype(np.float32)
    x.flat[::5] = (rng.integers(0, 250, x.size)[::5] + 0.5).astype(np.float32) * SX
    return x


def _close(got, want, rel, what):
    err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    assert err <= rel * scale, f"{what}: max error {err} > {rel} x {scale}"


@needs_vnni
def test_hand_qdq_model_folds_and_matches(tmp_path):
    model = _hand_model()
    _, outs = ox.load(model, fold_qdq=True)
    kinds = {k: t.producer.kind for k, t in outs.items()}
    for k in ("mm", "mm_nozp", "mm_i8", "gemm_tb", "gemm", "mm_zp", "mm_s8", "gemm_zp"):
        assert kinds[k] is OpKind.QGEMM, k
    for k in ("conv", "conv_zp", "conv_pad_zp"):   # under the NCHW permute
        assert outs[k].producer.inputs[0].producer.kind is OpKind.QCONV2D, k
    assert kinds["keep_wzp"] is kinds["keep_rt_w"] is OpKind.GEMM
    feeds = {"x": _x((2, 3, 16), 1), "x2": _x((3, 16), 2), "xc": _x((2, 4, 7, 8), 3),
             "wr": np.random.default_rng(5).integers(-128, 128, (16, 6)).astype(np.int8)}
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    oracle = ag.reference.run(outs, feeds)
    m = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "b"))
    got = m.run(feeds)
    for k in outs:
        _close(oracle[k], want[k], 1e-5, f"{k}: oracle vs onnx.reference")
        _close(got[k], oracle[k], 1e-6, f"{k}: CPU build vs oracle")
    if ORT_U8S8_EXACT:
        import onnxruntime as ort
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for k, v in zip([o.name for o in model.graph.output], sess.run(None, feeds)):
            _close(got[k], v, 1e-4, f"{k}: CPU build vs onnxruntime")


def test_without_the_option_or_without_vnni_the_composites_stay(monkeypatch):
    model = _hand_model()
    _, outs = ox.load(model)
    assert not any(op.kind in (OpKind.QGEMM, OpKind.QCONV2D) for op in _ops(outs))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")   # oneDNN's u8 x s8 would saturate: no fold
    _, outs = ox.load(model, fold_qdq=True)
    assert not any(op.kind in (OpKind.QGEMM, OpKind.QCONV2D) for op in _ops(outs))


def _ops(outs):
    seen, stack = {}, [t.producer for t in outs.values() if t.producer is not None]
    while stack:
        op = stack.pop()
        if id(op) not in seen:
            seen[id(op)] = op
            stack += [t.producer for t in op.inputs if t.producer is not None]
    return list(seen.values())


@needs_vnni
def test_quantize_static_model_folds_and_matches(tmp_path):
    quant = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(4)
    inits = [nh.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3, "wc"),
             nh.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "bc"),
             nh.from_array(rng.standard_normal((8 * 4 * 4, 10)).astype(np.float32) * 0.05, "wm"),
             nh.from_array(np.array([1, 8 * 4 * 4], np.int64), "flat")]
    nodes = [h.make_node("Conv", ["x", "wc", "bc"], ["c"]),
             h.make_node("Relu", ["c"], ["r"]), h.make_node("Reshape", ["r", "flat"], ["f"]),
             h.make_node("MatMul", ["f", "wm"], ["y"])]
    g = h.make_graph(nodes, "f", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 6, 6])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 10])], inits)
    fp = tmp_path / "f.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 21)]), fp)   # onnx.reference: DQ from 19
    # onnxruntime's activations (QInt8 by default): the signed input gets some zero point (read as
    # Q's integers, compensated), the ReLU's non-negative output -128 (the uint8 grid)
    feeds = [{"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)} for _ in range(4)]

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    qp = tmp_path / "q.onnx"
    quant.quantize_static(str(fp), str(qp), Reader(), quant_format=quant.QuantFormat.QDQ, per_channel=True)
    model = onnx.load(qp)
    _, outs = ox.load(model, fold_qdq=True)
    kinds = {op.kind for op in _ops(outs)}
    assert OpKind.QCONV2D in kinds and OpKind.QGEMM in kinds, kinds
    test = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32) * 1.5}
    want = ReferenceEvaluator(model).run(None, test)[0]
    got = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "b")).run(test)["y"]
    _close(ag.reference.run(outs, test)["y"], want, 1e-5, "oracle vs onnx.reference")
    unfolded = ag.reference.run(ox.load(model)[1], test)["y"]
    _close(got, unfolded, 1e-5, "CPU build vs the unfolded composites' oracle")
    _close(got, want, 1e-5, "CPU build vs onnx.reference")
    if ORT_U8S8_EXACT:
        import onnxruntime as ort
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        _close(got, sess.run(None, test)[0], 1e-4, "CPU build vs onnxruntime")


def test_cli_fold_qdq(tmp_path, capsys):
    """`aitgen compile model.onnx --fold-qdq`: the API's fold; refused (usage error, exit 2) for a
    model that is not ONNX and for a target other than the CPU, before anything is built."""
    import json

    from aitgen.cli import main
    path = tmp_path / "qdq.onnx"
    onnx.save(_hand_model(), path)
    base = ["compile", str(path), "--workdir", str(tmp_path / "w"), "--fold-qdq"]
    for extra, msg in ((["--target", "cuda"], "CPU has only"),):
        with pytest.raises(SystemExit, match=msg) as e:
            main(base + extra)
        assert e.value.code == 2
    mod = tmp_path / "m.py"
    mod.write_text("from aitgen import ops\nimport aitgen as ag\n"
                   "def build():\n    return {'y': ops.relu(ag.Tensor([2], dtype='float32', name='x'))}\n")
    with pytest.raises(SystemExit, match=".onnx models only") as e:
        main(["compile", f"{mod}:build", "--target", "cpu", "--workdir", str(tmp_path / "w"), "--fold-qdq"])
    assert not (tmp_path / "w" / "model.json").exists()
    if VNNI:
        assert main(base + ["--target", "cpu"]) == 0
        report = json.loads((tmp_path / "w" / "report.json").read_text())
        assert report["precision"]["int8"] == {"qgemm": 9, "qconv2d": 3}, report["precision"]


def test_subgraphs_keep_the_composites():
    """A MatMul inside an If branch reading a name the branch defines (an initializer) that the
    top-level graph also defines, as DQ(Q(x)): the fold reads only the top-level graph's producers,
    so it must not take the branch's operand for the top-level's; the branch keeps its float ops."""
    rng = np.random.default_rng(6)
    sx, z = nh.from_array(SX, "sx"), nh.from_array(np.uint8(0), "zx")

    def branch(tag):
        d = nh.from_array(rng.standard_normal((3, 16)).astype(np.float32), "d")   # shadows the outer "d"
        return h.make_graph([h.make_node("MatMul", ["d", "wd"], [f"y{tag}"])], tag, [],
                            [h.make_tensor_value_info(f"y{tag}", T.FLOAT, [3, 4])], [d])

    w = nh.from_array(rng.integers(-127, 128, (16, 4)).astype(np.int8), "w")
    ws = nh.from_array(np.full(4, 0.01, np.float32), "ws")
    nodes = [h.make_node("QuantizeLinear", ["x", "sx", "zx"], ["q"]),
             h.make_node("DequantizeLinear", ["q", "sx", "zx"], ["d"]),
             h.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=1),
             h.make_node("If", ["c"], ["y"], then_branch=branch("t"), else_branch=branch("e"))]
    g = h.make_graph(nodes, "if", [h.make_tensor_value_info("c", T.BOOL, []),
                                   h.make_tensor_value_info("x", T.FLOAT, [3, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 4]), h.make_tensor_value_info("d", T.FLOAT, [3, 16])],
                     [sx, z, w, ws])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    _, outs = ox.load(model, fold_qdq=True)
    assert not any(op.kind in (OpKind.QGEMM, OpKind.QCONV2D) for op in _ops(outs))
    # against the import without the fold (the branch's own "d", lexically): onnx.reference reads
    # the outer "d" there; ONNX leaves such shadowing undefined, and the fold must not change it
    _, plain = ox.load(model)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": _x((3, 16), 7)}
        _close(ag.reference.run(outs, feeds)["y"], ag.reference.run(plain, feeds)["y"], 0, f"If {c}")


def _hostile(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """The model with every value and node renamed to a hostile name (quotes, backslash, newline,
    comment ends, a preprocessor line, a system() call); returns it and old name -> new name."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    names = {v.name for v in list(g.input) + list(g.output)} | {i.name for i in g.initializer}
    names |= {n for node in g.node for n in list(node.input) + list(node.output) if n}
    new = {n: f'{n}"; system("x"); //\\*/\n#include <{i}>' for i, n in enumerate(sorted(names))}
    for v in list(g.input) + list(g.output) + list(g.initializer):
        v.name = new[v.name]
    for i, node in enumerate(g.node):
        node.name = f'node{i} */ "\\'
        node.input[:] = [new[n] if n else n for n in node.input]
        node.output[:] = [new[n] for n in node.output]
    return m, new


@needs_vnni
def test_hostile_names_fold_to_the_same_bits(tmp_path):
    """The folded int8 ops take their names from the ONNX graph: hostile names build, fold as plain
    ones do, give the plain build's bits, and a bad run is refused by name, leaving the model usable."""
    from aitgen.errors import RuntimeInputError
    model = _hand_model()
    bad, new = _hostile(model)
    feeds = {"x": _x((2, 3, 16), 1), "x2": _x((3, 16), 2), "xc": _x((2, 4, 7, 8), 3),
             "wr": np.random.default_rng(5).integers(-128, 128, (16, 6)).astype(np.int8)}
    _, plain_outs = ox.load(model, fold_qdq=True)
    _, outs = ox.load(bad, fold_qdq=True)
    assert sum(op.kind is OpKind.QGEMM for op in _ops(outs)) == sum(op.kind is OpKind.QGEMM for op in _ops(plain_outs))
    want = ag.compile_model(plain_outs, target="cpu", workdir=str(tmp_path / "plain")).run(feeds)
    m = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "hostile"))
    hfeeds = {new[k]: v for k, v in feeds.items()}
    got = m.run(hfeeds)
    for k, v in want.items():
        np.testing.assert_array_equal(got[new[k]], v, err_msg=k)
    with pytest.raises(RuntimeInputError, match="system"):
        m.run({**hfeeds, new["x"]: np.zeros((2, 3, 15), np.float32)})
    np.testing.assert_array_equal(m.run(hfeeds)[new["mm"]], want["mm"])
    m.close()
