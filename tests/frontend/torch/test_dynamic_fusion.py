"""torch.export with dynamic dims fuses as static does (issue 15, item 5).

For every zoo twin (aitgen/models/torch_refs.py, small configs), both models of
examples/import_torch.py and two attention blocks (F.scaled_dot_product_attention with a bool key
mask, nn.MultiheadAttention with a key padding mask), the import with a dynamic batch (and a
dynamic seq where the model has one) gives, after the pass pipeline, the kernel count of the static
import (report.json's num_kernels, counted here without a C++ build as test_imported_fusion.py
does) and the same op kinds, views aside. Before the fixes the examples' nn.TransformerEncoder
built to 43 kernels against 18 and the blocks to 17 and 18 against 4 and 6: attention was left as
bmm / softmax / reduce_max / where and permutes, because the row guard's zero fill, full_like with
a dynamic size, imports as expand(0, [batch, ...]), which the matcher did not take for a constant.
BERT and GPT-2 with a dynamic seq kept a position-embedding gather, a run-time
causal mask and the slices feeding them (arange(seq) is a slice of the longest table).

Views aside means: reshapes (they cost nothing and their number follows the importer's spelling),
slices that are a constant's prefix (`table[:seq]`, a view of the weights in the memory plan), and
ViT's class token, expand(cls, [batch, 1, D]) under a dynamic batch: its one kernel writes the
token into the concat's buffer where the static build's concat copies the folded constant, one
kernel either way.

The dynamic builds run on the CPU at two sizes against torch's float32 outputs (rtol 1e-4,
atol 1e-5, as test_import_zoo.py). The default tier builds GPT-2, the example models and the
blocks; the slow tier the other twins (BERT's dynamic build is also in test_import_zoo.py).
"""
from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch.export import needs torch")
pytest.importorskip("torch.export", reason="torch.export import needs torch >= 2.1")

import aitgen as ag  # noqa: E402
from aitgen import models  # noqa: E402
from aitgen.codegen.lower import lower_graph  # noqa: E402
from aitgen.compiler import compile_options  # noqa: E402
from aitgen.frontend.torch import import_module  # noqa: E402
from aitgen.ir.graph import Graph  # noqa: E402
from aitgen.ir.op import OpKind  # noqa: E402
from aitgen.memory import is_view, plan_memory  # noqa: E402
from aitgen.models import torch_refs  # noqa: E402
from aitgen.passes import run_pipeline  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]
RTOL, ATOL = 1e-4, 1e-5
Dim = torch.export.Dim

# The twins' small configs and input names, as test_import_zoo.py (this folder) builds them.
from test_import_zoo import ARGS as _TWIN_ARGS, SMALL  # noqa: E402

ARGS = {**_TWIN_ARGS,
        "example_cnn": ("image",), "example_transformer": ("src",),
        "sdpa_block": ("x", "keep"), "mha_block": ("x", "pad")}
HAS_SEQ = ("bert_base", "gpt2", "example_transformer", "sdpa_block", "mha_block")
# built in the default tier; the other twins in the slow tier
BUILT = ("gpt2", "example_cnn", "example_transformer", "sdpa_block", "mha_block")


def _example_models() -> dict:
    path = Path(__file__).resolve().parents[3] / "examples" / "import_torch.py"
    spec = importlib.util.spec_from_file_location("aitgen_example_import_torch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.models()


def model_and_inputs(name: str):
    """(torch module, make(batch, seq, seed) -> example args)."""
    if name in BLOCKS:
        return _block(*BLOCKS[name])
    if name.startswith("example_"):
        torch.manual_seed(0)
        module, make, _ = _example_models()[name[len("example_"):]]

        def make_example(b, s, seed):
            torch.manual_seed(seed)
            return make(b, s)
        return module.eval(), make_example
    cfg = SMALL[name]
    module, _, _ = models.build(name, **cfg)
    ref = torch_refs.from_aitgen(name, module, cfg, torch.float32).eval()

    def make_twin(b, s, seed):
        g = torch.Generator().manual_seed(seed)
        if ARGS[name] == ("x",):
            return (torch.randn(b, 3, 32, 32, generator=g),)
        ids = torch.randint(0, 100, (b, s), generator=g)
        if name == "gpt2":
            return (ids,)
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[0, s - 2:] = 0  # padding at the end of the first sequence exercises the mask
        return ids, torch.randint(0, 2, (b, s), generator=g), mask
    return ref, make_twin


class SdpaBlock(torch.nn.Module):
    """F.scaled_dot_product_attention with a bool key mask: its decomposition guards fully masked
    rows with where(~any(s != -inf), full_like(probs, 0), probs), the full_like that a dynamic
    batch imports as an expand (as in tests/frontend/test_imported_fusion.py)."""

    def __init__(self, e: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(e, 3 * e), torch.nn.Linear(e, e)

    def forward(self, x, keep):
        b, s, e = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(e, -1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :] > 0)
        return self.out(y.transpose(1, 2).reshape(b, s, e))


class MhaBlock(torch.nn.Module):
    def __init__(self, e: int = 16, heads: int = 2):
        super().__init__()
        self.m = torch.nn.MultiheadAttention(e, heads, batch_first=True)

    def forward(self, x, pad):
        return self.m(x, x, x, key_padding_mask=pad > 0, need_weights=False)[0]


def _block(cls, keep_value: float, empty_row: bool):
    torch.manual_seed(0)
    module = cls().eval()

    def make(b, s, seed):
        g = torch.Generator().manual_seed(seed)
        mask = torch.full((b, s), keep_value)
        mask[0, -2:] = 1 - keep_value  # two padded keys in the first sequence
        if empty_row and b > 1:
            mask[b - 1] = 1 - keep_value  # every key of the last one: torch's guard gives zeros
        return torch.randn(b, s, 16, generator=g), mask
    return module, make


# MHA has no guard: a fully masked row is NaN in torch and zeros in the fused op (fuse_attention's
# one documented difference), so its rows keep a key each.
BLOCKS = {"sdpa_block": (SdpaBlock, 1.0, True), "mha_block": (MhaBlock, 0.0, False)}


def dynamic_shapes(name: str, seq: bool) -> dict:
    batch, length = Dim("batch", min=1, max=4), Dim("seq", min=1, max=16)
    return {k: ({0: batch, 1: length} if seq else {0: batch}) for k in ARGS[name]}


def after_pipeline(outputs) -> tuple[int, Counter]:
    """(kernel calls per run, as report.json's num_kernels; op kinds after the pipeline, views aside)."""
    opts = compile_options(target="cpu")
    g = run_pipeline(Graph.from_outputs(outputs), opts)
    kernels = len(lower_graph(g, plan_memory(g, opts.caps), "cpu", opts=opts))
    kinds = Counter(op.kind.value for op in g.ops if not is_view(op) and not _class_token(op))
    return kernels, kinds


def _class_token(op) -> bool:
    """expand(constant, [batch, ...]): the folded constant's place under a dynamic batch."""
    return op.kind is OpKind.EXPAND and op.inputs[0].is_constant


CASES = [(n, False) for n in ARGS] + [(n, True) for n in HAS_SEQ]


@pytest.mark.parametrize("name, seq", CASES, ids=[f"{n}-{'batch_seq' if s else 'batch'}" for n, s in CASES])
def test_dynamic_import_has_the_static_kernels_and_ops(name, seq):
    module, make = model_and_inputs(name)
    args = make(2, 8, 0)
    _, static = import_module(module, args)
    _, dynamic = import_module(module, args, dynamic_shapes=dynamic_shapes(name, seq))
    (ks, kinds_s), (kd, kinds_d) = after_pipeline(static), after_pipeline(dynamic)
    assert kd == ks, (name, ks, kd, kinds_s, kinds_d)
    assert kinds_d == kinds_s
    if kinds_s["attention"] == 0:
        return
    assert kinds_d["bmm"] == kinds_d["softmax"] == 0  # every attention fused, none half-matched


def _built(name: str):
    marks = () if name in BUILT else (pytest.mark.slow,)
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_built(n) for n in ARGS])
def test_dynamic_build_matches_torch_at_two_sizes(tmp_path, name):
    module, make = model_and_inputs(name)
    seq = name in HAS_SEQ
    inputs, outputs = import_module(module, make(2, 8, 0), dynamic_shapes=dynamic_shapes(name, seq))
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / name)
    for b, s in ((3, 5), (1, 16)) if seq else ((3, 8), (1, 8)):
        args = make(b, s, b)
        with torch.no_grad():
            out = module(*args)
        want = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
        got = model.run({k: a.numpy() for k, a in zip(inputs, args)})
        assert len(got) == len(want)
        for (k, g), w in zip(got.items(), want):
            assert g.shape == w.shape, (name, b, s, k, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{name} {b}x{s} {k}")
