"""precision="bfloat16" on the CPU: the mixed (torch.autocast) policy of passes/convert_precision.py.

GEMM/conv/attention read bf16 and accumulate in float32; layernorms, softmax and reductions compute in
float32 and the residual stream (embeddings -> layernorm -> residual add -> layernorm) stays float32.
The bar (issue 14, item 3): aitgen's bf16 error against the torch float32 twin is no larger than
torch.autocast(bfloat16)'s on the same weights and inputs. Full-size figures: benchmarks/cpu_bf16.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import models
from aitgen.compiler import compile_options
from aitgen.ir.dtype import DType
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.passes import PIPELINE
from aitgen.passes.runner import run_passes

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from cpu_vs_peers import CONFIGS, make_feeds, nchw  # noqa: E402  (the benchmark's inputs, one definition)

BF16, F32 = DType.bfloat16, DType.float32
# aitgen rounds no more often than autocast (a GEMM's bias and GELU round once with its result, not
# once each), so it is usually a little below autocast; the slack covers summation-order
# differences between the oneDNN implementations of different ISAs (AMX, AVX512-BF16, AVX-512).
SLACK = 1.25


def _errors(tmp_path, name: str, policy=None) -> tuple[float, float]:
    """(max |aitgen bf16 - torch fp32|, max |torch autocast bf16 - torch fp32|) over all outputs."""
    torch = pytest.importorskip("torch")
    from aitgen.models import torch_refs

    cfg = CONFIGS[name]["small"]
    module, inputs, outputs = models.build(name, **cfg)
    feeds = make_feeds(inputs, cfg)
    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
    args = [torch.from_numpy(v) for v in nchw(feeds).values()]
    with torch.inference_mode():
        ref = twin(*args)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            amp = twin(*args)
    ref, amp = (x if isinstance(x, tuple) else (x,) for x in (ref, amp))
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / f"{name}_{policy}", precision="bfloat16",
                             precision_policy=policy)
    got = model.run(feeds)
    model.close()
    ours = max(float(np.max(np.abs(got[k] - r.numpy()))) for k, r in zip(outputs, ref))
    theirs = max(float(np.max(np.abs(a.float().numpy() - r.numpy()))) for a, r in zip(amp, ref))
    return ours, theirs


def test_bert_bf16_at_least_as_accurate_as_autocast(tmp_path):
    ours, autocast = _errors(tmp_path, "bert_base")
    assert 0 < ours <= SLACK * autocast, (ours, autocast)
    # The uniform policy (every tensor bf16, the residual stream and layernorm outputs too) is what
    # the issue measured; it misses the bar by far, which is what the mixed policy is for.
    uniform, _ = _errors(tmp_path, "bert_base", policy="uniform")
    assert uniform > 2 * ours, (uniform, ours)


def test_resnet_bf16_at_least_as_accurate_as_autocast(tmp_path):
    ours, autocast = _errors(tmp_path, "resnet50")
    assert 0 < ours <= SLACK * autocast, (ours, autocast)


def _bf16_graph(name: str, **kw) -> Graph:
    _, outputs = models.get(name, **CONFIGS[name]["small"])
    return run_passes(Graph.from_outputs(outputs), compile_options("cpu", precision="bfloat16", **kw),
                      list(PIPELINE)).graph


def _float_dtypes(ts) -> set:
    return {t.dtype for t in ts if t.dtype.is_float}


def test_bert_policy_dtypes():
    g = _bf16_graph("bert_base")
    kinds = {op.kind for op in g.ops}
    assert {OpKind.GEMM, OpKind.ATTENTION, OpKind.LAYERNORM} <= kinds
    for op in g.ops:
        if op.kind in (OpKind.GEMM, OpKind.ATTENTION):
            assert _float_dtypes(op.inputs[:3]) == {BF16}, op   # bf16 operands (weights and bias too)
        if op.kind is OpKind.ATTENTION and len(op.inputs) == 4:
            # the additive padding mask stays float32, as autocast's bias does (the kernel adds it in float32)
            assert op.inputs[3].dtype is F32, op
        if op.kind is OpKind.LAYERNORM:
            # float32 out (the residual stream), float32 weights; its prologue adds the bf16 GEMM
            # result to the float32 residual in float32, inside the norm kernel.
            assert op.outputs[0].dtype is F32 and op.inputs[1].dtype is F32, op
            assert op.attrs.prologue is None or F32 in _float_dtypes(op.inputs[3:]), op
    # Both graph outputs leave as float32, as declared; the gathers read float32 tables (embeddings
    # are not matmuls: autocast keeps them float32 too).
    assert all(t.dtype is F32 for t in g.outputs.values())
    assert all(op.inputs[0].dtype is F32 for op in g.ops if op.kind is OpKind.GATHER)


def test_uniform_policy_and_default_elsewhere():
    g = _bf16_graph("bert_base", precision_policy="uniform")
    assert all(op.outputs[0].dtype is BF16 for op in g.ops if op.kind is OpKind.LAYERNORM)
    # float16 keeps the uniform policy on the CPU (backend.yaml lists bfloat16 only).
    _, outputs = models.get("bert_base", **CONFIGS["bert_base"]["small"])
    g16 = run_passes(Graph.from_outputs(outputs), compile_options("cpu", precision="float16"), list(PIPELINE)).graph
    assert all(op.outputs[0].dtype is DType.float16 for op in g16.ops if op.kind is OpKind.LAYERNORM)
    with pytest.raises(ag.errors.DTypeError, match="precision_policy"):
        _bf16_graph("bert_base", precision_policy="autocast")


def test_report_and_inspect_show_precision(tmp_path):
    _, outputs = models.get("bert_base", **CONFIGS["bert_base"]["small"])
    ag.compile_model(outputs, target="cpu", workdir=tmp_path, precision="bfloat16", load=False)
    prec = json.loads((tmp_path / "report.json").read_text())["precision"]
    assert prec["requested"] == "bfloat16" and prec["policy"] == "mixed"
    assert set(prec["by_kind"]["attention"]) == {"bf16+f32 -> bf16"}  # q, k, v bf16; the mask float32
    assert all(k.endswith("-> f32") for k in prec["by_kind"]["layernorm"]), prec["by_kind"]["layernorm"]
    out = subprocess.run([sys.executable, "-m", "aitgen", "inspect", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "precision bfloat16 (mixed policy, float32 accumulation)" in out and "layernorm" in out, out


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("kind", ["gemm", "conv"])
@pytest.mark.parametrize("fusion", [True, False])
def test_bf16_product_with_float32_residual(tmp_path, monkeypatch, kind, fusion, native):
    # y = x @ W + b + x (or conv(x) + b + x) under the mixed policy: the product reads bf16 and the
    # residual x is float32, so the add is float32. Fused, the GEMM/conv writes its float32
    # accumulator and adds x in its epilogue (f32_dst); unfused, a bf16 result is cast up and added.
    # Each equals the oracle of its own converted graph to float32 summation order (rtol 1e-5),
    # far tighter than one bf16 rounding of y (2**-9 relative): the fused build does not round.
    # native=False: a CPU without oneDNN bf16 jit kernels (AVX2), faked here: operands through
    # float32 scratch (the result is the same: bf16 operands are exact in float32).
    from aitgen import nn
    from aitgen.codegen.kernels.cpu import gemm as cpu_gemm
    if native and not cpu_gemm.native_bf16():
        # oneDNN creates no bf16 matmul/conv at all on an AVX2-only CPU (not even a reference one)
        pytest.skip("this CPU has no AVX-512: oneDNN has no bf16 kernels to run natively")
    if not native:
        monkeypatch.setattr(cpu_gemm, "native_bf16", lambda: False)
    rng = np.random.default_rng(3)
    if kind == "gemm":
        x = ag.Tensor([8, 32], "float32", name="x")
        y = nn.Linear(32, 32)(x) + x
        feeds = {"x": rng.standard_normal((8, 32)).astype(np.float32)}
    else:
        x = ag.Tensor([1, 6, 6, 16], "float32", name="x")
        y = nn.Conv2d(16, 16, 3, padding=1)(x) + x
        feeds = {"x": rng.standard_normal((1, 6, 6, 16)).astype(np.float32)}
    opts = compile_options("cpu", precision="bfloat16", fusion=fusion)
    g = run_passes(Graph.from_outputs({"y": y}), opts, list(PIPELINE)).graph
    product = next(op for op in g.ops if op.kind in (OpKind.GEMM, OpKind.CONV2D))
    assert product.inputs[0].dtype is BF16 and product.inputs[1].dtype is BF16
    assert product.outputs[0].dtype is (F32 if fusion else BF16)
    model = ag.compile_model({"y": y}, target="cpu", workdir=tmp_path, precision="bfloat16", fusion=fusion)
    got = model.run(feeds)["y"]
    sources = "".join(p.read_text() for p in tmp_path.rglob("*.cpp"))
    assert f"od::Storage::bf16, {'false' if native else 'true'}," in sources   # the config's `convert`
    want = ag.reference.run(g, feeds)["y"]
    if fusion:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:  # the bf16 result is rounded in both (the oracle rounds where the graph stores bf16)
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    # Against float32 math: one bf16 rounding of the inputs and weights, no more.
    exact = ag.reference.run({"y": y}, feeds)["y"]
    assert float(np.max(np.abs(got - exact))) <= 2 ** -7 * float(np.max(np.abs(exact)))
