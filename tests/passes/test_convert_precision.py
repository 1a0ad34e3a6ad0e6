"""convert_precision: float16/bfloat16 inside, declared dtypes at the edges, same numbers as the
float32 graph to the narrow type's rounding (checked with the oracle, and end to end on the CPU)."""
import numpy as np
import pytest

import aitgen as ag
from aitgen import models, nn, ops
from aitgen.compiler import compile_options
from aitgen.errors import DTypeError
from aitgen.ir.dtype import DType
from aitgen.passes import run_pipeline
from aitgen.passes.convert_precision import convert_precision

# Zoo configs small enough for the oracle in well under a second each.
SMALL = {
    "resnet50": dict(layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10),
    "mobilenet_v2": dict(width=0.25, image_size=32, num_classes=10),
    "bert_base": dict(layers=2, hidden=32, heads=2, intermediate=64, vocab=100, seq=8),
    "vit_b16": dict(image_size=32, patch=8, layers=2, hidden=32, heads=2, mlp=64, num_classes=10),
    "gpt2": dict(layers=2, hidden=32, heads=2, vocab=100, seq=8),
}
# Max error relative to the output's largest magnitude. float16 keeps 11 significant bits,
# bfloat16 8; a few layers of rounded intermediates cost a few ulps of each (measured: at most
# 0.002 for float16 and 0.01 for bfloat16 over the zoo configs above).
TOL = {"float16": 1e-2, "bfloat16": 4e-2}


def feeds_for(inputs, rng):
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d.upper for d in t.shape)
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(t.dtype.np)
        elif name == "attention_mask":
            feeds[name] = np.ones(shape, t.dtype.np)
            feeds[name][..., -2:] = 0
        elif name == "token_type_ids":
            feeds[name] = rng.integers(0, 2, shape).astype(t.dtype.np)
        else:
            feeds[name] = rng.integers(0, 100, shape).astype(t.dtype.np)
    return feeds


def assert_close(got, want, precision):
    scale = max(float(np.max(np.abs(want))), 1.0)
    err = float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32))))
    assert err <= TOL[precision] * scale, f"max error {err} > {TOL[precision]} x {scale}"


def small_mlp():
    x = ag.Tensor([ag.IntVar("b", 1, 4), 8], name="x")
    h = ops.gelu(nn.Linear(8, 16)(x))
    y = ops.layernorm(h, ag.constant(np.ones(16, np.float32)), ag.constant(np.zeros(16, np.float32)))
    return x, {"y": y, "h16": ops.cast(h, "float16"), "x_out": x}


def test_inside_narrow_edges_declared():
    _, outs = small_mlp()
    g = ag.Graph.from_outputs(outs)
    weights = [t.value for t in g.constants]
    g = convert_precision(g, compile_options(precision="float16"))
    assert [t.dtype for t in g.inputs] == [DType.float32]
    assert {k: t.dtype for k, t in g.outputs.items()} == {"y": DType.float32, "h16": DType.float16,
                                                        "x_out": DType.float32}
    assert g.outputs["x_out"] is g.inputs[0]           # an input returned as is stays the input
    assert all(t.dtype is DType.float16 and t.value.dtype == np.float16 for t in g.constants)
    assert all(w.dtype == np.float32 for w in weights)  # the original arrays are not rewritten
    # Every op but the edge casts computes in float16: one cast in, one cast out, the user's cast.
    assert [op.outputs[0].dtype for op in g.ops if op.kind is not ag.OpKind.CAST] == [DType.float16] * 3
    casts = [(op.inputs[0].dtype, op.outputs[0].dtype) for op in g.ops if op.kind is ag.OpKind.CAST]
    assert sorted(casts, key=str) == sorted([(DType.float32, DType.float16), (DType.float16, DType.float32),
                                             (DType.float16, DType.float16)], key=str)
    ag.verify(g)


def test_pipeline_removes_the_identity_cast_and_names_everything():
    _, outs = small_mlp()
    g = run_pipeline(ag.Graph.from_outputs(outs), compile_options(precision="float16", verify=True, fusion=False))
    assert all(not (op.kind is ag.OpKind.CAST and op.inputs[0].dtype == op.outputs[0].dtype) for op in g.ops)
    assert all(t.name for t in g.tensors)


def test_no_precision_is_a_no_op():
    _, outs = small_mlp()
    g = ag.Graph.from_outputs(outs)
    before = str(g)
    assert str(convert_precision(g, compile_options())) == before


def test_unknown_precision_is_a_typed_error():
    # "int8" is quantize_int8's (a no-op here); another integer type is nobody's
    _, outs = small_mlp()
    with pytest.raises(DTypeError, match="int16"):
        convert_precision(ag.Graph.from_outputs(outs), compile_options(precision="int16"))


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_zoo_oracle_before_and_after(name, precision):
    """A pure IR pass: the oracle of the converted graph equals the float32 graph's, to rounding."""
    inputs, outputs = models.get(name, **SMALL[name])
    g = convert_precision(ag.Graph.from_outputs(outputs), compile_options(precision=precision))
    assert any(t.dtype.value == precision for t in g.tensors if t.producer is not None)
    # integer inputs (token ids, masks) are untouched; float ones keep float32
    assert [t.dtype for t in g.inputs] == [t.dtype for t in inputs.values()]
    feeds = feeds_for(inputs, np.random.default_rng(0))
    want = ag.reference.run(outputs, feeds)
    got = ag.reference.run(g, feeds)
    for k in want:
        assert got[k].dtype == want[k].dtype
        assert_close(got[k], want[k], precision)


@pytest.mark.parametrize("name,precision", [("bert_base", "float16"), ("resnet50", "bfloat16")])
def test_cpu_build_in_narrow_precision(tmp_path, name, precision):
    """End to end on the CPU backend (float16/bfloat16 storage, float32 compute)."""
    inputs, outputs = models.get(name, **SMALL[name])
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / name, precision=precision)
    assert {k: s.dtype for k, s in model.input_specs.items()} == {k: t.dtype for k, t in inputs.items()}
    feeds = feeds_for(inputs, np.random.default_rng(1))
    got, want = model.run(feeds), ag.reference.run(outputs, feeds)
    for k in want:
        assert got[k].dtype == want[k].dtype
        assert_close(got[k], want[k], precision)
    # the weights are stored narrow: half the float32 bytes (the zoo's constants are all float)
    import json
    report = json.loads((tmp_path / name / "report.json").read_text())
    f32_bytes = sum(t.value.nbytes for t in ag.Graph.from_outputs(outputs).constants)
    assert report["constant_bytes"] <= 0.55 * f32_bytes
