"""int8 builds (precision="int8") of small models on the CPU against the oracle of the quantised graph
(integer semantics, ops/qlinear.py) and against the float32 model.

Tolerances. Against the quantised graph's oracle: int32 accumulation is exact, so only the float
dequantisation and epilogue differ (rtol 1e-5, atol 1e-5 x the output's magnitude). One thing more
in a deep model: an activation that a float kernel (layer norm, softmax, a fused epilogue) computes
a few ulps away from numpy may land on the other side of a rounding boundary (x / scale at k + 0.5)
and be quantised one step away; that element's contribution then differs by x_scale * |w|. So the
whole-model checks allow 0.5 % of elements outside the tight bound, each within 5 % of the output's
magnitude. Against float32: the int8 error, loose (checked per model below)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import models, nn, ops
from aitgen.codegen.kernels.cpu.gemm import int8_vnni
from aitgen.compiler import compile_options
from aitgen.errors import RuntimeInputError
from aitgen.passes import optimize


def feeds_for(inputs, rng):
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d.value if d.is_static else d.upper for d in t.shape)
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(shape).astype(t.dtype.np)
        elif name == "attention_mask":
            feeds[name] = np.ones(shape, t.dtype.np)
        elif name == "token_type_ids":
            feeds[name] = rng.integers(0, 2, shape).astype(t.dtype.np)
        else:
            feeds[name] = rng.integers(0, 100, shape).astype(t.dtype.np)
    return feeds


def close_to_oracle(got, want, flips=0.005):
    scale = max(float(np.abs(want).max()), 1.0)
    bad = np.abs(got - want) > 1e-5 * scale + 1e-5 * np.abs(want)
    assert bad.mean() <= flips, f"{bad.sum()} of {bad.size} elements off the oracle"
    np.testing.assert_allclose(got, want, atol=5e-2 * scale, rtol=0)


def rel_err(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))


def build(tmp_path, outputs, feeds, method="minmax"):
    m = ag.compile_model(outputs, target="cpu", workdir=tmp_path, precision="int8", calibration=feeds,
                         calibration_method=method)
    g = optimize(outputs, compile_options("cpu", precision="int8", calibration=tuple(feeds),
                                          calibration_method=method))
    report = json.loads((tmp_path / "report.json").read_text())
    return m, g, report


def int8_primitives(report):
    return [p for p in report["onednn_primitives"] if p["primitive"].endswith("_int8")]



def matches_both_oracles(m, g, outputs, test, rel):
    """The build against the oracle of its quantised graph (tightly) and of the float32 model
    (within `rel` relative error), then closed."""
    got = m.run(test)
    want_q = ag.reference.run(g, test)
    want_f = ag.reference.run(outputs, test)
    for k in got:
        close_to_oracle(got[k], want_q[k])
        assert rel_err(got[k], want_f[k]) < rel, k
    m.close()

def test_mlp_int8_equals_its_oracle_and_stays_usable(tmp_path):
    nn.manual_seed(0)
    x = ag.Tensor([ag.IntVar("batch", 1, 8), 32], dtype="float32", name="x")
    y = nn.Linear(64, 16)(ops.gelu(nn.Linear(32, 64)(x), approximate="tanh"))
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((8, 32)).astype(np.float32)} for _ in range(4)]
    m, g, report = build(tmp_path, {"y": y}, feeds)
    assert sorted(op.kind.value for op in g.ops) == ["qgemm", "qgemm"]
    prims = int8_primitives(report)
    assert len(prims) == 2 and not any(p["impl"].startswith("ref") for p in prims), prims
    assert report["precision"]["requested"] == "int8" and report["precision"]["int8"] == {"qgemm": 2}
    test = {"x": rng.standard_normal((5, 32)).astype(np.float32)}   # another batch than calibrated
    out = m.run(test)["y"]
    close_to_oracle(out, ag.reference.run(g, test)["y"], flips=0)
    assert rel_err(out, ag.reference.run({"y": y}, test)["y"]) < 0.05
    with pytest.raises(RuntimeInputError):
        m.run({"x": np.zeros((5, 31), np.float32)})
    np.testing.assert_array_equal(m.run(test)["y"], out)   # a wrong run leaves the model as it was
    m.close()


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_small_bert_int8(tmp_path, method):
    inputs, outputs = models.get("bert_base", layers=1, hidden=64, heads=2, intermediate=128, vocab=100, seq=16)
    rng = np.random.default_rng(1)
    feeds = [feeds_for(inputs, rng) for _ in range(3)]
    m, g, report = build(tmp_path, outputs, feeds, method)
    kinds = [op.kind.value for op in g.ops]
    # Q/K/V (packed), output projection, two FFN GEMMs, the pooler: int8; attention, layer norms,
    # softmax and the embedding sums stay float32
    assert kinds.count("qgemm") >= 4 and "gemm" not in kinds
    assert "attention" in kinds or "bmm" in kinds
    assert not any(p["impl"].startswith("ref") for p in int8_primitives(report))
    # the FFN's gelu(x W1 + b) is a oneDNN post-op (epilogue.INT8_GELU) and its result is stored
    # int8 for the second FFN GEMM (quantize_int8._requantize): no float32 pass between them
    ffn = [op for op in g.ops if op.name.endswith("intermediate_dense")]
    assert ffn and all(op.attrs.out_act is not None for op in ffn), [op.attrs.out_act for op in ffn]
    srcs = [p.read_text() for p in (tmp_path / "obj" / "src").glob("k_*.cpp")]
    assert any("od::PostAlg::gelu_erf" in s for s in srcs)
    # Without VNNI the weights keep 7 bits (int8_reduced_weights_rule: oneDNN's int16 pair sums
    # must not saturate), twice the weight step: entropy calibration measured 0.104 there (AVX2 EPYC)
    matches_both_oracles(m, g, outputs, feeds_for(inputs, rng), 0.1 if int8_vnni() else 0.15)


def test_small_resnet_int8(tmp_path):
    inputs, outputs = models.get("resnet50", batch=1, layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10)
    rng = np.random.default_rng(2)
    feeds = [feeds_for(inputs, rng) for _ in range(2)]
    m, g, report = build(tmp_path, outputs, feeds)
    kinds = [op.kind.value for op in g.ops]
    assert kinds.count("qconv2d") >= 10 and "conv2d" not in kinds
    # each bottleneck's conv1 -> conv2 -> conv3 pass uint8 (quantize_int8._requantize), and so do the
    # block outputs read only by the next stage's conv1 and downsample conv; the last one (the
    # average pool's) stays float32. Each stage's downsample conv, read only as its conv3's
    # residual, is stored int8 with a scale of its own (quantize_int8._residual_only), and the stem
    # conv (relu) uint8, which the max pool then pools as it is, for layer1's convs to read.
    requant = [op for op in g.ops if getattr(op.attrs, "out_act", None) is not None]
    assert len(requant) == 16 and requant[0].name == "conv1"
    (pool,) = [op for op in g.ops if op.kind.value == "max_pool2d"]
    assert pool.inputs[0].producer is requant[0] and pool.outputs[0].dtype.value == "uint8"
    assert {u.name for u in pool.outputs[0].users} == {"layer1_0_conv1", "layer1_0_downsample_0"}
    assert {op.name: op.outputs[0].dtype.value for op in requant if op.outputs[0].dtype.value != "uint8"} == {
        f"layer{i}_0_downsample_0": "int8" for i in range(1, 5)}
    for i in range(1, 5):
        (c3,) = [op for op in g.ops if op.name == f"layer{i}_0_conv3"]
        assert c3.inputs[-1].dtype.value == "int8" and c3.attrs.extra_scales[-1] > 0
    assert [op.name for op in g.ops if op.name.endswith("conv3") and op.attrs.out_act is None] == ["layer4_0_conv3"]
    prims = int8_primitives(report)
    assert any(p["primitive"] == "convolution_int8" for p in prims)
    assert not any(p["impl"].startswith("ref") for p in prims), prims
    # relu(conv3 + residual) and the stem's relu are oneDNN post-ops (epilogue.INT8_RELU), not a
    # second pass over the float32 result
    srcs = [p.read_text() for p in (tmp_path / "obj" / "src").glob("k_*.cpp")]
    assert sum("od::PostAlg::add" in s and "od::PostAlg::relu" in s for s in srcs) >= 1
    assert not any("epilogue_loop" in s and "int8: x is" in s and "od::PostAlg" not in s for s in srcs)
    matches_both_oracles(m, g, outputs, feeds_for(inputs, rng), 0.15)


def test_resnet_block_outputs_stay_uint8(tmp_path):
    """Bottlenecks with identity shortcuts: each block's output (relu(conv3 + residual)) is stored
    uint8 once, read as x by the next conv1 and as a quantised residual (extra_scales) by the next
    conv3, whose oneDNN post-ops add it as (v / s + q) * s; the build equals its oracle."""
    inputs, outputs = models.get("resnet50", batch=1, layers=(3, 2, 1, 1), width=8, image_size=32, num_classes=10)
    rng = np.random.default_rng(3)
    feeds = [feeds_for(inputs, rng) for _ in range(2)]
    m, g, report = build(tmp_path, outputs, feeds)
    conv3 = [op for op in g.ops if op.name.endswith("conv3")]
    assert len(conv3) == 7
    # every block output but the last (read by the average pool) is uint8 ...
    assert [op.attrs.out_act and op.attrs.out_act.value for op in conv3] == ["uint8"] * 6 + [None]
    # ... and every conv3 reads its residual quantised: uint8 from an identity shortcut (the block
    # before's output), int8 from a stage's first block's downsample conv (its own scale)
    quantised = [op for op in conv3 if any(op.attrs.extra_scales)]
    assert [op.inputs[-1].dtype.value for op in quantised] == ["int8", "uint8", "uint8", "int8", "uint8", "int8", "int8"]
    srcs = [p.read_text() for p in (tmp_path / "obj" / "src").glob("k_*.cpp")]
    assert any("od::PostAlg::add" in s and ", 2}," in s and "od::PostAlg::linear" in s for s in srcs)
    assert not any(p["impl"].startswith("ref") for p in int8_primitives(report))
    matches_both_oracles(m, g, outputs, feeds_for(inputs, rng), 0.15)


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE"])
def test_int8_without_vnni_stays_exact(tmp_path, isa):
    """oneDNN capped below VNNI (what an AVX2-only or an older AVX-512 CPU runs): its int8 kernels sum
    u8 x s8 pairs in int16 and halve s8 x s8 weights there, so the pass gives the weights headroom
    (quantize_int8.weight_grid) and the build still equals its oracle exactly. On a CPU that has
    VNNI, this is also the check that the cap reaches the pass."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa)
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("int8_isa_case.py")), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["err"] <= 1e-5 * max(out["scale"], 1.0), out
    assert max(out["wmax"]) <= 63 and out["requantised"] == 2, out   # conv and GEMM 1 write uint8 (ReLU)
    assert len(out["prims"]) == 3 and all(p.endswith("_int8") and not i.startswith("ref") for p, i in out["prims"]), out


_SHIFT_CASE = r"""
import json, sys
import numpy as np
import aitgen as ag
from aitgen import nn, ops
from aitgen.compiler import compile_options
from aitgen.passes import optimize
nn.manual_seed(3)
x = ag.Tensor([6, 24], dtype="float32", name="x")
y = nn.Linear(16, 5)(ops.tanh(nn.Linear(24, 16)(x)))   # signed sources: s8, quantised in the kernels
rng = np.random.default_rng(2)
feeds = [{"x": rng.standard_normal((6, 24)).astype(np.float32)} for _ in range(3)]
m = ag.compile_model({"y": y}, target="cpu", workdir=sys.argv[1], precision="int8", calibration=feeds)
g = optimize({"y": y}, compile_options("cpu", precision="int8", calibration=tuple(feeds)))
test = {"x": rng.standard_normal((6, 24)).astype(np.float32)}
got, want = m.run(test)["y"], ag.reference.run(g, test)["y"]
acts = sorted({op.attrs.act.short for op in g.ops if op.kind.value == "qgemm"})
print(json.dumps({"err": float(np.abs(got - want).max()), "scale": float(np.abs(want).max()), "acts": acts}))
"""


def _run_avx2_case(case: str, tmp_path) -> tuple[list, dict]:
    """Run a case script under ONEDNN_MAX_CPU_ISA=AVX2 with oneDNN's log: (its stdout lines, the JSON
    its last line prints)."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", ONEDNN_VERBOSE="1")
    res = subprocess.run([sys.executable, "-c", case, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    return lines, json.loads(lines[-1])


def test_int8_s8_source_shifted_without_vnni(tmp_path):
    """Under ONEDNN_MAX_CPU_ISA=AVX2 an int8 matmul that quantises its own signed (s8) source stores
    it as u8 = q + 128 with oneDNN's source zero point 128 (onednn_kernels.cpp shift_s8_src: oneDNN's
    gemm-based int8 matmul takes u8 sources faster); a requantised s8 result that only int8 matmuls read
    (gemm.py shifted_int8) is stored the same way, through the dst zero point, and read with the source
    zero point. Same integers: the build equals the quantised graph's oracle (atol 1e-5 x its
    magnitude), and oneDNN's log shows which source got which form."""
    lines, out = _run_avx2_case(_SHIFT_CASE, tmp_path)
    assert out["acts"] == ["i8"], out   # both GEMMs read signed int8
    assert out["err"] <= 1e-5 * max(out["scale"], 1.0), out
    execs = [ln for ln in lines if ln.startswith("onednn_verbose") and ",exec," in ln and ",matmul," in ln]
    first = [ln for ln in execs if ",6x24:24x16," in ln]    # quantises x itself: shifted
    second = [ln for ln in execs if ",6x16:16x5," in ln]    # reads the first's requantised s8, shifted
    assert first and second, lines[-20:]
    for ln in first:   # ... and stores its requantised s8 result as u8 with dst zero point 128
        assert "src_u8" in ln and "dst_u8" in ln and "attr-zero-points:src0:0+dst:0 " in ln, ln
    for ln in second:
        assert "src_u8" in ln and "dst_f32" in ln and "attr-zero-points:src0:0 " in ln, ln
        assert "ref" not in ln.split(",")[4], ln


_RESIDUAL_CASE = r"""
import json, sys
import numpy as np
import aitgen as ag
from aitgen import nn, ops
from aitgen.compiler import compile_options
from aitgen.passes import optimize
from aitgen.codegen.kernels.cpu.gemm import shifted_int8
nn.manual_seed(3)
x = ag.Tensor([6, 24], dtype="float32", name="x")
h = ops.tanh(nn.Linear(24, 16)(x))            # requantised to s8: both its readers are int8 GEMMs
y = nn.Linear(24, 16)(x) + h                   # ... one adds it as its residual
z = nn.Linear(16, 5)(h)
rng = np.random.default_rng(2)
feeds = [{"x": rng.standard_normal((6, 24)).astype(np.float32)} for _ in range(3)]
outs = {"y": y, "z": z}
m = ag.compile_model(outs, target="cpu", workdir=sys.argv[1], precision="int8", calibration=feeds)
g = optimize(outs, compile_options("cpu", precision="int8", calibration=tuple(feeds)))
test = {"x": rng.standard_normal((6, 24)).astype(np.float32)}
got, want = m.run(test), ag.reference.run(g, test)
q = [op for op in g.ops if op.kind.value == "qgemm"]
print(json.dumps({"err": max(float(np.abs(got[k] - want[k]).max()) for k in want),
                  "out_acts": [str(op.attrs.out_act) for op in q], "shifted": [shifted_int8(op.outputs[0]) for op in q]}))
"""


def test_int8_s8_result_read_as_residual_stays_s8(tmp_path):
    """The negative of the case above (gemm.py shifted_int8): a requantised s8 result that one int8
    GEMM reads as its x and another adds as its residual (a oneDNN binary post-op, which takes no zero
    point) stays s8 on both sides, under ONEDNN_MAX_CPU_ISA=AVX2 too, and the build equals its oracle."""
    lines, out = _run_avx2_case(_RESIDUAL_CASE, tmp_path)
    assert out["out_acts"].count("int8") == 1 and not any(out["shifted"]), out
    assert out["err"] <= 1e-5, out
    execs = [ln for ln in lines if ln.startswith("onednn_verbose") and ",exec," in ln and ",matmul," in ln]
    producer = [ln for ln in execs if "dst_s8" in ln]
    residual = [ln for ln in execs if "binary_add:s8" in ln]
    reader = [ln for ln in execs if ",6x16:16x5," in ln]
    assert producer and residual and reader, lines[-20:]
    assert all("zero-points:src0:0 " in ln and "+dst" not in ln.split("zero-points")[1] for ln in producer), producer
    assert all("src_s8" in ln and "zero-points" not in ln for ln in reader), reader


_SATURATION_CASE = r"""
import json, sys
import numpy as np
import aitgen as ag
from aitgen import nn, ops
from aitgen.compiler import compile_options
from aitgen.passes import optimize
nn.manual_seed(3)
x = ag.Tensor([6, 24], dtype="float32", name="x")
y = nn.Linear(16, 5)(ops.tanh(nn.Linear(24, 16)(x)))
rng = np.random.default_rng(2)
feeds = [{"x": 0.05 * rng.standard_normal((6, 24)).astype(np.float32)} for _ in range(3)]   # small: a narrow scale
m = ag.compile_model({"y": y}, target="cpu", workdir=sys.argv[1], precision="int8", calibration=feeds)
g = optimize({"y": y}, compile_options("cpu", precision="int8", calibration=tuple(feeds)))
test = {"x": 20 * rng.standard_normal((6, 24)).astype(np.float32)}   # far outside it: tanh saturates both ways
got, want = m.run(test)["y"], ag.reference.run(g, test)["y"]
print(json.dumps({"err": float(np.abs(got - want).max()), "scale": float(np.abs(want).max())}))
"""


@pytest.mark.parametrize("isa", ["native", "AVX2"])
def test_int8_requantised_result_saturates_like_the_kernel(tmp_path, isa):
    """Calibrated on small inputs and run far outside them, the requantised s8 tanh output saturates
    at both ends: oneDNN stores -128 below -127.5 x out_scale, and the oracle does the same
    (qlinear.REQUANT_RANGES; it clipped at -127 before, one step off: err 6.5e-4 on outputs of 0.34).
    Under AVX2 the result travels as u8 + 128 (gemm.py shifted_int8), which saturates alike."""
    if isa == "native":
        res = subprocess.run([sys.executable, "-c", _SATURATION_CASE, str(tmp_path)], capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        out = json.loads(res.stdout.strip().splitlines()[-1])
    else:
        _, out = _run_avx2_case(_SATURATION_CASE, tmp_path)
    assert out["err"] <= 1e-6 * max(out["scale"], 1.0), out


@pytest.mark.parametrize("pool_is_output", [False, True])
def test_int8_max_pool_of_a_requantised_conv(tmp_path, pool_is_output):
    """conv -> relu -> max pool -> two int8 convs (ResNet's stem): the stem conv stores uint8 and the
    pool pools the quantised values (monotonic: the same bits as quantising the float pool). Where
    the pool's result is also a model output, the float32 path stays. Against both oracles; NaN-free
    inputs, odd sizes and channels (37) so the pool's window edges and channel tail run."""
    nn.manual_seed(4)
    x = ag.Tensor([2, 19, 21, 3], name="x")
    h = ops.max_pool2d(ops.relu(nn.Conv2d(3, 37, 3, stride=2, padding=1)(x)), 3, 2, 1)
    a = nn.Conv2d(37, 16, 1)(h)
    b = ops.relu(nn.Conv2d(37, 16, 3, padding=1)(h))
    outputs = {"y": ops.add(a, b)} | ({"pooled": h} if pool_is_output else {})
    rng = np.random.default_rng(6)
    feeds = [feeds_for({"x": x}, rng) for _ in range(3)]
    m, g, _ = build(tmp_path, outputs, feeds)
    (pool,) = [op for op in g.ops if op.kind.value == "max_pool2d"]
    assert pool.outputs[0].dtype.value == ("float32" if pool_is_output else "uint8")
    assert pool.inputs[0].producer.kind.value == "qconv2d"
    assert (pool.inputs[0].producer.attrs.out_act is None) == pool_is_output
    matches_both_oracles(m, g, outputs, feeds_for({"x": x}, rng), 0.15)
