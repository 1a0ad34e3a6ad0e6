"""Imported models compile to as few kernels as the zoo's native ones.

The zoo's torch twins (aitgen/models/torch_refs.py) imported through torch.export and through ONNX
(torch's TorchScript exporter, dynamo=False; opset 14, where layer norm and GELU are written out op
by op, and opset 17) must give `report.json`'s num_kernels equal to the native model's after
compile_model(..., target="cpu"). The one allowed difference: an image model imported from NCHW
takes one NCHW -> NHWC permute of its input, which the native model (whose input is NHWC) does not
need (ViT not even that: allowed()); nothing else, in particular no permute between convs. The
numbers are checked too: against onnxruntime or torch in float32 at rtol 1e-4 (atol 1e-4 of the
output's magnitude for ONNX, as in tests/frontend/onnx/test_zoo_onnx.py; atol 1e-5 for torch, as
in test_import_zoo.py).

The native side is counted without a C++ build: the pipeline, memory planning and lowering that
compile_model runs, then the number of kernel calls (the same figure report.json holds; the first
test checks that on the imported build). The default tier builds three small models; the slow tier
builds the rest of the zoo at small size and counts the full-size BERT-base and ResNet-50 imports.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import torch.nn.functional as F  # noqa: E402

import aitgen as ag  # noqa: E402
from aitgen import models, ops  # noqa: E402
from aitgen.codegen.lower import lower_graph  # noqa: E402
from aitgen.compiler import compile_options  # noqa: E402
from aitgen.frontend import onnx as ox  # noqa: E402
from aitgen.frontend.torch import import_module  # noqa: E402
from aitgen.ir.graph import Graph  # noqa: E402
from aitgen.memory import plan_memory  # noqa: E402
from aitgen.models import torch_refs  # noqa: E402
from aitgen.passes import PIPELINE, run_pipeline  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SMALL = {
    "resnet50": dict(layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10),
    "mobilenet_v2": dict(width=0.25, image_size=32, num_classes=10),
    "vit_b16": dict(image_size=32, patch=8, layers=2, hidden=32, heads=2, mlp=64, num_classes=10),
    "bert_base": dict(layers=2, hidden=32, heads=2, intermediate=64, vocab=100, max_position=16, seq=8),
    "gpt2": dict(layers=2, hidden=32, heads=2, vocab=100, max_position=16, seq=8),
}
IMAGE = ("resnet50", "mobilenet_v2", "vit_b16")


def kernels(outputs) -> int:
    """Kernel calls per run, as compile_model counts them (report.json num_kernels), unbuilt."""
    opts = compile_options(target="cpu")
    g = run_pipeline(Graph.from_outputs(outputs), opts, list(PIPELINE))
    return len(lower_graph(g, plan_memory(g, opts.caps), "cpu", opts=opts))


def allowed(name: str) -> int:
    """Kernels an import may add to the native count: the NCHW image input's layout permute. Not
    ViT's: its patch conv reads the image through a permute of its own (patchify_conv), with which
    merge_view_chains merges the layout permute, so the import copies the image once, as the native."""
    return 1 if name in IMAGE and name != "vit_b16" else 0


def feeds(inputs: dict, seed: int = 0) -> dict:
    """Feeds in the twins' layout (images NCHW); the first sequence has two padded positions."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in inputs.items():
        shape = [d.value for d in t.shape]
        if t.dtype.is_float:
            a = rng.standard_normal(shape).astype(np.float32)
            out[name] = np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if a.ndim == 4 else a
        elif name == "attention_mask":
            m = np.ones(shape, t.dtype.np)
            m[0, -2:] = 0
            out[name] = m
        else:
            out[name] = rng.integers(0, 2 if name == "token_type_ids" else 100, shape).astype(t.dtype.np)
    return out


def build(outputs, tmp_path, tag: str):
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / tag)
    report = json.loads((tmp_path / tag / "report.json").read_text())
    # compile_model's kernel check: no GEMM/conv of an import runs oneDNN's reference kernel
    assert report["onednn_impls"] and report["reference_kernels"] == [], report["reference_kernels"]
    return model, report["num_kernels"]


def close(got: np.ndarray, want: np.ndarray, what: str, atol_rel: float) -> None:
    assert got.shape == want.shape, (what, got.shape, want.shape)
    atol = atol_rel * max(float(np.max(np.abs(want))), 1.0) if atol_rel > 1e-5 else atol_rel
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol, err_msg=what)


def check_onnx(name: str, opset: int, tmp_path) -> None:
    cfg = SMALL[name]
    module, inputs, native = models.build(name, **cfg)
    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
    f = feeds(inputs)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(twin, tuple(torch.from_numpy(v) for v in f.values()), str(path), opset_version=opset,
                          dynamo=False, input_names=list(f), output_names=list(native))
    _, outs = ox.load(path)
    model, got_kernels = build(outs, tmp_path, f"{name}_onnx{opset}")
    assert got_kernels == kernels(outs)  # the unbuilt count is report.json's
    assert got_kernels == kernels(native) + allowed(name), (name, opset, got_kernels, kernels(native))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    f = {k: v for k, v in f.items() if k in model.input_specs}
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f)))
    got = model.run(f)
    for k in want:
        close(got[k], want[k], f"{name} onnx{opset} {k}", 1e-4)
    model.close()


def check_torch(name: str, tmp_path) -> None:
    cfg = SMALL[name]
    module, inputs, native = models.build(name, **cfg)
    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
    f = feeds(inputs)
    args = tuple(torch.from_numpy(v) for v in f.values())
    ins, outs = import_module(twin, args)
    model, got_kernels = build(outs, tmp_path, f"{name}_torch")
    assert got_kernels == kernels(native) + allowed(name), (name, got_kernels, kernels(native))
    with torch.no_grad():
        want = twin(*args)
    want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
    got = model.run({k: a.numpy() for k, a in zip(ins, args)})
    for (k, g), w in zip(got.items(), want):
        close(g, w, f"{name} torch {k}", 1e-5)
    model.close()


# -- default tier: layer norm / GELU / pooler gather written out (BERT, opset 14), the patch
#    flatten's permute pair (ViT, opset 17), torch's SDPA guard ------------------------------

@pytest.mark.parametrize("name, opset", [("bert_base", 14), ("vit_b16", 17)])
def test_onnx_import_has_the_native_kernel_count(tmp_path, name, opset):
    check_onnx(name, opset, tmp_path)


class SdpaBlock(torch.nn.Module):
    """A self-attention block on F.scaled_dot_product_attention with a key padding mask (bool)."""

    def __init__(self, e: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(e, 3 * e), torch.nn.Linear(e, e)

    def forward(self, x, keep):
        b, s, e = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(e, -1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :] > 0)
        return self.out(y.transpose(1, 2).reshape(b, s, e))


def _native_sdpa_block(block: SdpaBlock, b: int, s: int, e: int) -> dict:
    """The same block written with aitgen ops (what the zoo's own attention looks like)."""
    w = {k: ag.constant(p.detach().numpy()) for k, p in block.state_dict().items()}
    x, keep = ag.Tensor([b, s, e], name="x"), ag.Tensor([b, s], name="keep")
    h, d = block.heads, e // block.heads
    q, k, v = (ops.permute(ops.reshape(t, [b, s, h, d]), [0, 2, 1, 3])
               for t in ops.split(ops.linear(x, w["qkv.weight"], w["qkv.bias"]), 3, axis=2))
    mask = ops.reshape(ops.greater(keep, 0.0), [b, 1, 1, s])
    y = ops.scaled_dot_product_attention(q, k, v, mask)
    return {"y": ops.linear(ops.reshape(ops.permute(y, [0, 2, 1, 3]), [b, s, e]), w["out.weight"], w["out.bias"])}


def test_torch_sdpa_guard_fuses_and_fully_masked_rows_match_torch(tmp_path):
    torch.manual_seed(0)
    b, s, e = 3, 6, 16
    block = SdpaBlock(e).eval()
    x = torch.randn(b, s, e)
    keep = torch.ones(b, s)
    keep[0, -2:] = 0
    keep[2] = 0  # every key of sequence 2 masked: torch gives zeros before out-proj, so do we
    ins, outs = import_module(block, (x, keep))
    kinds = [op.kind.value for op in ag.passes.optimize(outs, compile_options("cpu")).ops]
    assert kinds.count("attention") == 1 and "softmax" not in kinds and "where" not in kinds
    model, got_kernels = build(outs, tmp_path, "sdpa")
    assert got_kernels == kernels(_native_sdpa_block(block, b, s, e))
    with torch.no_grad():
        want = block(x, keep).numpy()
    assert np.allclose(want[2], block.out.bias.detach().numpy(), atol=1e-6)  # the zero rows, through out-proj
    got = model.run({"x": x.numpy(), "keep": keep.numpy()})
    close(next(iter(got.values())), want, "sdpa block", 1e-5)
    model.close()


def _native_mha(mha: torch.nn.MultiheadAttention, b: int, s: int, e: int) -> dict:
    """nn.MultiheadAttention's math, batch first throughout, written with aitgen ops."""
    w = {k: p.detach().numpy() for k, p in mha.state_dict().items()}
    x, pad = ag.Tensor([b, s, e], name="x"), ag.Tensor([b, s], name="pad")
    h, d = mha.num_heads, e // mha.num_heads
    q, k, v = (ops.permute(ops.reshape(ops.linear(x, ag.constant(w["in_proj_weight"][i * e:(i + 1) * e]),
                                                  ag.constant(w["in_proj_bias"][i * e:(i + 1) * e])),
                                       [b, s, h, d]), [0, 2, 1, 3]) for i in range(3))
    mask = ops.reshape(ops.where(ops.greater(pad, 0.0), ag.constant(np.float32(-np.inf)),
                                 ag.constant(np.float32(0))), [b, 1, 1, s])
    y = ops.reshape(ops.permute(ops.scaled_dot_product_attention(q, k, v, mask), [0, 2, 1, 3]), [b, s, e])
    return {"y": ops.linear(y, ag.constant(w["out_proj.weight"]), ag.constant(w["out_proj.bias"]))}


class MhaBlock(torch.nn.Module):
    def __init__(self, e: int = 16, heads: int = 2):
        super().__init__()
        self.m = torch.nn.MultiheadAttention(e, heads, batch_first=True)

    def forward(self, x, pad):
        return self.m(x, x, x, key_padding_mask=pad > 0, need_weights=False)[0]


# torch's batch_first MHA transposes its input to [S, B, E] before the in-projection GEMM and its
# result back after the out-projection GEMM; a GEMM between them keeps the pair from cancelling
# (2 kernels). From ONNX, the q/k/v split's permute also stays: its result is read by all three
# attention operands, and fuse_memory_ops folds only chains with one reader (1 more).
MHA_EXTRA = {"torch": 2, "onnx": 3}


@pytest.mark.parametrize("source", sorted(MHA_EXTRA))
def test_multihead_attention_batch_first(tmp_path, source):
    torch.manual_seed(1)
    b, s, e = 2, 5, 16
    block = MhaBlock(e).eval()
    with torch.no_grad():
        block.m.in_proj_bias.normal_()  # torch initialises it to zeros, which would hide a lost bias
    x, pad = torch.randn(b, s, e), torch.zeros(b, s)
    pad[0, -2:] = 1
    if source == "torch":
        _, outs = import_module(block, (x, pad))
    else:
        path = tmp_path / "mha.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(block, (x, pad), str(path), opset_version=17, dynamo=False, input_names=["x", "pad"])
        _, outs = ox.load(path)
    kinds = [op.kind.value for op in ag.passes.optimize(outs, compile_options("cpu")).ops]
    assert kinds.count("attention") == 1 and "slice" not in kinds and "gather" not in kinds
    model, got_kernels = build(outs, tmp_path, f"mha_{source}")
    assert got_kernels == kernels(_native_mha(block.m, b, s, e)) + MHA_EXTRA[source], (source, kinds)
    with torch.no_grad():
        want = block(x, pad).numpy()
    got = next(iter(model.run({"x": x.numpy(), "pad": pad.numpy()}).values()))
    close(got, want, f"mha {source}", 1e-5)
    model.close()


# -- slow tier: the rest of the zoo, both importers; full-size counts ----------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_torch_import_has_the_native_kernel_count(tmp_path, name):
    check_torch(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name, opset", [(n, o) for n in sorted(SMALL) for o in (14, 17)
                                         if (n, o) not in (("bert_base", 14), ("vit_b16", 17))])
def test_onnx_import_has_the_native_kernel_count_slow(tmp_path, name, opset):
    check_onnx(name, opset, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name, cfg", [("bert_base", dict(seq=128)), ("resnet50", dict())])
def test_full_size_imports_count_as_native(tmp_path, name, cfg):
    module, inputs, native = models.build(name, **cfg)
    twin = torch_refs.from_aitgen(name, module, cfg, torch.float32)
    f = feeds(inputs)
    args = tuple(torch.from_numpy(v) for v in f.values())
    want = kernels(native) + allowed(name)
    _, outs = import_module(twin, args)
    assert kernels(outs) == want
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(twin, args, str(path), opset_version=14, dynamo=False, input_names=list(f),
                          output_names=list(native))
    _, outs = ox.load(path)
    assert kernels(outs) == want
