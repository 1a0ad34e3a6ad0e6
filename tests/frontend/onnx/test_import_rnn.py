"""ONNX RNN, LSTM and GRU (ops_rnn.py: unrolled into GEMM + element-wise ops) against a float64
numpy reference written from the spec (rnn_reference.py) and onnxruntime, through the oracle and
ONE CPU build for all cases.

Covers: forward, reverse and bidirectional; sequence_lens (rows shorter than the sequence, in
both directions); initial_h / initial_c; biases; LSTM peepholes and input_forget; GRU
linear_before_reset; clip; non-default activations with alphas/betas; layout=1 (batch-major,
which onnxruntime refuses: the numpy reference alone checks it); weights as initializers and as
run-time inputs; a dynamic batch. Tolerance: rtol 1e-4 / atol 1e-5 (float32 against float64,
sequences of <= 5 steps, values in [-1, 1]).
"""
from __future__ import annotations

import numpy as np
import pytest
import rnn_reference
from onnx_cases import ort_run, rand
import onnx
from onnx import TensorProto, helper, numpy_helper

import aitgen as ag
from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox
from aitgen.frontend.onnx import ops_rnn

TOL = dict(rtol=1e-4, atol=1e-5)
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_NAMES = ["X", "W", "R", "B", "seq_lens", "initial_h", "initial_c", "P"]


def _model(op, attrs, vals, consts=(), batch_dim=None):
    """One node; vals: input name -> array (None: omitted). consts: names stored as initializers."""
    names, gin, inits = [], [], []
    for n in _NAMES[:8 if op == "LSTM" else 6]:
        v = vals.get(n)
        names.append("" if v is None else n)
        if v is None:
            continue
        if n in consts:
            inits.append(numpy_helper.from_array(v, n))
        else:
            shape = list(v.shape)
            if batch_dim is not None and n == "X":
                shape[1 if attrs.get("layout", 0) == 0 else 0] = batch_dim
            gin.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), shape))
    while names and names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, **attrs)
    g = helper.make_graph([node], op.lower(), gin, [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def _case(name, op, attrs, seq=4, batch=3, inp=5, hid=4, *, b=True, lens=None, h0=False, c0=False, p=False,
          consts=("W", "R", "B"), seed=0, batch_dim=None):
    nd = 2 if attrs.get("direction") == "bidirectional" else 1
    g = _GATES[op]
    layout = attrs.get("layout", 0)
    s = iter(range(seed * 10, seed * 10 + 10))
    vals = {"X": rand((batch, seq, inp) if layout else (seq, batch, inp), -1, 1, seed=next(s)),
            "W": rand((nd, g * hid, inp), -1, 1, seed=next(s)), "R": rand((nd, g * hid, hid), -1, 1, seed=next(s))}
    if b:
        vals["B"] = rand((nd, 2 * g * hid), -1, 1, seed=next(s))
    if lens is not None:
        vals["seq_lens"] = np.array(lens, np.int32)
    hshape = (batch, nd, hid) if layout else (nd, batch, hid)
    if h0:
        vals["initial_h"] = rand(hshape, -1, 1, seed=next(s))
    if c0:
        vals["initial_c"] = rand(hshape, -1, 1, seed=next(s))
    if p:
        vals["P"] = rand((nd, 3 * hid), -1, 1, seed=next(s))
    attrs = {"hidden_size": hid, **attrs}
    return name, op, attrs, vals, _model(op, attrs, vals, consts, batch_dim)


ACTS = {"activations": ["HardSigmoid", "LeakyRelu", "ScaledTanh", "Sigmoid", "Tanh", "Affine"],
        "activation_alpha": [0.3, 0.05, 0.9, 0.7], "activation_beta": [0.4, 1.2, -0.2]}
CASES = [
    _case("rnn_forward", "RNN", {}),
    _case("rnn_reverse_lens_h0", "RNN", {"direction": "reverse"}, lens=[4, 2, 3], h0=True),
    _case("rnn_bidi_relu_affine", "RNN", {"direction": "bidirectional", "activations": ["Relu", "Affine"],
                                          "activation_alpha": [0.5], "activation_beta": [0.1]}, h0=True),
    _case("rnn_layout1_lens", "RNN", {"layout": 1, "direction": "bidirectional"}, lens=[1, 4, 3], h0=True),
    _case("gru_forward_runtime_weights", "GRU", {}, consts=(), h0=True),
    _case("gru_reverse_lbr_lens", "GRU", {"direction": "reverse", "linear_before_reset": 1}, lens=[3, 4, 1], h0=True),
    _case("gru_bidi_lbr_nobias", "GRU", {"direction": "bidirectional", "linear_before_reset": 1}, b=False),
    _case("gru_bidi_clip_acts_lens", "GRU",
          {"direction": "bidirectional", "clip": 0.7, "activations": ["HardSigmoid", "Softsign", "Sigmoid", "Elu"],
           "activation_alpha": [0.25, 0.8]}, lens=[2, 4, 4]),
    _case("gru_layout1", "GRU", {"layout": 1}, h0=True),
    _case("lstm_forward_h0c0", "LSTM", {}, h0=True, c0=True),
    _case("lstm_peepholes_lens", "LSTM", {}, p=True, h0=True, c0=True, lens=[4, 1, 2]),
    _case("lstm_reverse_peepholes_nostate", "LSTM", {"direction": "reverse"}, p=True),
    _case("lstm_bidi_lens_runtime", "LSTM", {"direction": "bidirectional"}, lens=[2, 4, 3], h0=True, c0=True,
          consts=()),
    _case("lstm_input_forget_clip", "LSTM", {"input_forget": 1, "clip": 0.5}, p=True),
    _case("lstm_acts", "LSTM", {**ACTS, "direction": "bidirectional"}),
    _case("lstm_softplus_thresholded", "LSTM", {"activations": ["Sigmoid", "Softplus", "ThresholdedRelu"],
                                                "activation_alpha": [0.1]}),
    _case("lstm_layout1_peep_lens", "LSTM", {"layout": 1, "direction": "bidirectional"}, p=True, h0=True, c0=True,
          lens=[3, 1, 4]),
    _case("lstm_dynamic_batch", "LSTM", {}, h0=False, batch_dim="N"),
]


def _ref(op, attrs, vals):
    return rnn_reference.run(op, attrs, vals["X"], vals["W"], vals["R"], B=vals.get("B"),
                             seq_lens=vals.get("seq_lens"), h0=vals.get("initial_h"),
                             c0=vals.get("initial_c"), P=vals.get("P"))


def _close(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    np.testing.assert_allclose(got.astype(np.float64), want, err_msg=what, **TOL)


def test_recurrent_ops_match_numpy_reference_and_onnxruntime(tmp_path):
    merged, runs = {}, []
    for name, op, attrs, vals, model in CASES:
        ins, outs = ox.load(model, dim_bounds={"N": (1, 8)} if name.endswith("dynamic_batch") else None)
        feeds = {k: v for k, v in vals.items() if k in ins}
        want = dict(zip(outs, _ref(op, attrs, vals)))
        ours = ag.reference.run(outs, feeds)
        theirs = ort_run(model, feeds) if attrs.get("layout", 0) == 0 else {}
        for k in outs:
            _close(ours[k], want[k], f"{name}: oracle {k} vs numpy reference")
            if k in theirs:
                _close(theirs[k], want[k], f"{name}: onnxruntime {k} vs numpy reference (the reference itself)")
        for t in ins.values():
            t.name = f"{name}__{t.name}"
        merged.update({f"{name}__{k}": t for k, t in outs.items()})
        runs.append({f"{name}__{k}": v for k, v in feeds.items()})
        runs[-1]["want"] = {f"{name}__{k}": v for k, v in want.items()}
    m = ag.compile_model(merged, target="cpu", workdir=tmp_path / "rnn")
    feeds = {k: v for r in runs for k, v in r.items() if k != "want"}
    got = m.run(feeds)
    for r in runs:
        for k, v in r["want"].items():
            _close(got[k], v, f"CPU build: {k}")
    # the dynamic batch runs at another size too
    name, op, attrs, vals, _ = CASES[-1]
    x = rand((5, 5, 5), -1, 1, seed=99)[:4]
    vals2 = {**vals, "X": x}
    got = m.run({**feeds, f"{name}__X": x})
    for k, v in zip(("Y", "Y_h", "Y_c"), _ref(op, attrs, vals2)):
        _close(got[f"{name}__{k}"], v, f"CPU build, batch 5: {name} {k}")
    m.close()


def test_sequence_is_unrolled_with_one_input_projection_per_direction():
    from aitgen.ir.graph import topo_order
    from aitgen.ir.op import OpKind
    name, op, attrs, vals, model = CASES[12]  # bidirectional LSTM, 4 steps
    _, outs = ox.load(model)
    gemms = [o for o in topo_order(outs.values())[0] if o.kind == OpKind.GEMM]
    # 2 projections + 2 directions x 4 steps of H x R^T (initial_h given, so step 0 has one too)
    assert len(gemms) == 2 + 2 * 4


def _bad(op="LSTM", attrs=None, **kw):
    return _case("bad", op, attrs or {}, **kw)[4]


@pytest.mark.parametrize("make,err,match", [
    (lambda: _bad(attrs={"direction": "sideways"}), ImportError_, "direction"),
    (lambda: _bad(attrs={"activations": ["Sigmoid", "Tanh"]}), ImportError_, "activations lists 2"),
    (lambda: _bad("RNN", {"activations": ["Gelu"]}), UnsupportedOpError, "activation 'gelu'"),
    (lambda: _bad(attrs={"hidden_size": 7}), ImportError_, "hidden_size 7"),
    (lambda: _bad(seq=ops_rnn.MAX_STEPS + 1, inp=2, hid=2, batch=1), UnsupportedOpError, "unrolling cap"),
    (lambda: _bad("GRU", lens=[5, 1, 1], consts=("W", "R", "seq_lens")), ImportError_, "sequence_lens"),
])
def test_typed_errors(make, err, match):
    m = make()
    with pytest.raises(err, match=match) as e:
        ox.load(m)
    assert f"({m.graph.node[0].op_type}, opset " in str(e.value)


def test_dynamic_sequence_length_is_refused():
    _, _, _, vals, _ = _case("d", "RNN", {})
    g = helper.make_graph([helper.make_node("RNN", ["X", "W", "R"], ["Y"], hidden_size=4)], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", 3, 5])],
                          [helper.make_empty_tensor_value_info("Y")],
                          [numpy_helper.from_array(vals["W"], "W"), numpy_helper.from_array(vals["R"], "R")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(UnsupportedOpError, match="RNN, opset 14.*sequence length T is dynamic"):
        ox.load(m)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_onnx_export_matches_torch(kind):
    """torch.onnx.export writes nn.LSTM / nn.GRU as ONNX LSTM / GRU nodes (GRU with
    linear_before_reset=1, 2 layers chained through Transpose/Reshape); the oracle matches torch."""
    torch = pytest.importorskip("torch", reason="the exporter needs torch")
    import io
    torch.manual_seed(0)
    m = getattr(torch.nn, kind)(6, 5, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = torch.randn(3, 4, 6)
    f = io.BytesIO()
    torch.onnx.export(m, (x,), f, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17)
    _, outs = ox.load(f.getvalue())
    assert kind in {n.op_type for n in onnx.load_from_string(f.getvalue()).graph.node}
    got = ag.reference.run(outs, {"x": x.numpy()})
    with torch.no_grad():
        want = m(x)
    _close(got["y"], want[0].numpy().astype(np.float64), f"{kind}: Y vs torch")
    finals = want[1] if kind == "GRU" else want[1][0]
    _close(list(got.values())[1], finals.numpy().astype(np.float64), f"{kind}: final h vs torch")
