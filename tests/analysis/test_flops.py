"""aitgen.analysis.count_flops: hand-computed counts for each op family, and the zoo's five models
against torch's own counter (torch.utils.flop_counter on the torch twins, built on the meta device:
architecture only, no weights) and against the figures torchvision publishes."""
from __future__ import annotations

import inspect
import pathlib
import sys

import numpy as np
import pytest

import aitgen as ag
from aitgen import models, ops
from aitgen.analysis import count_flops, count_flops_after_passes
from aitgen.errors import ShapeError, UnknownDimError
from aitgen.ir.dtype import DType
from aitgen.ir.op import OpKind
from aitgen.ops.gemm import GemmAttrs
from aitgen.ops.grouped import grouped
from aitgen.ops.qlinear import QConv2dAttrs, QGemmAttrs
from aitgen.ops.registry import make_op1

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
from cpu_vs_peers import CONFIGS  # noqa: E402 - the benchmark's configs, small and full

rng = np.random.default_rng(0)


def const(*shape, dtype=np.float32):
    return ag.constant(rng.standard_normal(shape).astype(dtype))


def macs_of(outputs, kind):
    return count_flops(outputs)["by_kind"][kind]["macs"]


# -- one op at a time -------------------------------------------------------------------------

def test_linear_counts_rows_of_every_leading_dim_times_n_times_k():
    x = ag.Tensor([3, 5, 16], name="x")
    y = ops.linear(x, const(32, 16), const(32))  # bias adds no MACs
    c = count_flops(y)
    assert c["macs"] == 3 * 5 * 32 * 16 == 7680 and c["flops"] == 15360
    assert c["by_kind"] == {"gemm": {"ops": 1, "macs": 7680, "flops": 15360}}
    assert c["int8_macs"] == 0 and c["other_elements"] == 0


@pytest.mark.parametrize("layout", ["rrr", "rcr", "crr", "ccr"])
def test_every_gemm_layout_is_m_n_k(layout):
    m, n, k = 6, 10, 7
    a = ag.Tensor([k, m] if layout[0] == "c" else [m, k], name="a")
    b = const(*([n, k] if layout[1] == "c" else [k, n]))
    assert macs_of(ops.gemm(a, b, layout=layout), "gemm") == m * n * k


def _torch_flops(fn, *args):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as fc:
        fn(*[torch.from_numpy(a) for a in args])
    return fc.get_total_flops()


def test_conv_with_groups_stride_asymmetric_padding_and_dilation():
    x = ag.Tensor([2, 15, 17, 8], name="x")                 # NHWC, C = 8
    w = const(12, 3, 3, 4)                                   # OHWI, groups 2: 4 input channels each
    y = ops.conv2d(x, w, const(12), stride=(2, 1), padding=(1, 2, 0, 1), dilation=(1, 2), groups=2)
    # HO = (15 + 1 + 2 - 3) // 2 + 1 = 8; WO = (17 + 0 + 1 - 5) // 1 + 1 = 14 (dilated kernel 5 wide)
    assert [d.value for d in y.shape] == [2, 8, 14, 12]
    assert macs_of(y, "conv2d") == 2 * 8 * 14 * 12 * (3 * 3 * 4) == 96768

    import torch.nn.functional as F  # the same conv in torch (NCHW, OIHW), its counter
    xs, ws = np.zeros((2, 8, 15, 17), np.float32), np.zeros((12, 4, 3, 3), np.float32)
    assert _torch_flops(lambda a, b: F.conv2d(F.pad(a, (0, 1, 1, 2)), b, stride=(2, 1), dilation=(1, 2), groups=2),
                        xs, ws) == 2 * 96768


def test_depthwise_conv_is_one_tap_set_per_channel():
    y = ops.conv2d(ag.Tensor([1, 14, 14, 32], name="x"), const(32, 3, 3, 1), stride=2, padding=1, groups=32)
    assert macs_of(y, "conv2d") == 7 * 7 * 32 * 9


def test_transposed_conv_counts_input_elements_times_taps_times_group_outputs():
    x = ag.Tensor([1, 5, 6, 4], name="x")
    w = const(4, 3, 3, 3)                                    # [C_in, KH, KW, C_out / groups], groups 2 -> C_out 6
    y = ops.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2)
    assert [d.value for d in y.shape] == [1, 10, 12, 6]
    assert macs_of(y, "conv_transpose2d") == 5 * 6 * 4 * (3 * 3 * 3) == 3240

    import torch.nn.functional as F
    assert _torch_flops(lambda a, b: F.conv_transpose2d(a, b, stride=2, padding=1, output_padding=1, groups=2),
                        np.zeros((1, 4, 5, 6), np.float32), np.zeros((4, 3, 3, 3), np.float32)) == 2 * 3240


def test_bmm_broadcasts_batch_dims_and_reads_k_through_transposes():
    a, b = ag.Tensor([2, 3, 4, 5], name="a"), ag.Tensor([3, 5, 6], name="b")
    assert macs_of(ops.bmm(a, b), "bmm") == 2 * 3 * 4 * 6 * 5 == 720
    at, bt = ag.Tensor([2, 3, 5, 4], name="at"), ag.Tensor([3, 6, 5], name="bt")
    assert macs_of(ops.bmm(at, bt, trans_a=True, trans_b=True), "bmm") == 720


def test_attention_counts_qk_and_pv():
    q, k = ag.Tensor([2, 4, 10, 8], name="q"), ag.Tensor([2, 4, 12, 8], name="k")
    v6 = ag.Tensor([2, 4, 12, 6], name="v")
    # Q K^T: B*H*Sq*Sk*D, P V: B*H*Sq*Sk*Dv
    assert macs_of(ops.scaled_dot_product_attention(q, k, v6), "attention") == 2 * 4 * 10 * 12 * (8 + 6)
    v = ag.Tensor([2, 4, 12, 8], name="v8")
    c = count_flops(ops.scaled_dot_product_attention(q, k, v, causal=True))
    assert c["flops"] == 4 * 2 * 4 * 10 * 12 * 8  # 4*B*H*Sq*Sk*D: the masked half is counted too
    assert any("causal" in n for n in c["notes"])


def test_matmul_softmax_matmul_counts_the_same_once_fused_into_attention():
    q, k, v = (ag.Tensor([1, 2, 16, 8], name=n) for n in "qkv")
    y = ops.bmm(ops.softmax(ops.bmm(q, k, trans_b=True) * 0.35, axis=-1), v)
    before, after = count_flops(y), count_flops_after_passes(y)
    assert set(before["by_kind"]) == {"bmm"} and set(after["by_kind"]) == {"attention"}
    assert before["macs"] == after["macs"] == 2 * (2 * 16 * 16 * 8)
    assert before["other_by_kind"]["softmax"]["elements"] == 2 * 16 * 16


def test_gemm_with_a_fused_epilogue_keeps_its_macs():
    x = ag.Tensor([8, 32], name="x")
    y = ops.gelu(ops.linear(x, const(32, 32), const(32))) + x  # GELU and the residual fuse into the GEMM
    before, after = count_flops(y), count_flops_after_passes(y)
    assert before["macs"] == after["macs"] == 8 * 32 * 32
    assert before["other_elements"] == 2 * 8 * 32 and after["other_elements"] == 0
    assert after["by_kind"]["gemm"]["ops"] == 1


def test_grouped_members_count_as_the_ops_they_are():
    x = ag.Tensor([4, 16], name="x")
    members = [([x, const(n, 16)], GemmAttrs(trans_b=True)) for n in (8, 24, 40)]
    outs = grouped(OpKind.GEMM, members)
    c = count_flops([o[0] for o in outs])
    assert c["by_kind"]["gemm"] == {"ops": 3, "macs": 4 * 16 * (8 + 24 + 40), "flops": 2 * 4 * 16 * 72}


def test_int8_gemm_and_conv_are_counted_apart():
    x = ag.Tensor([3, 32], name="x")
    q = make_op1(OpKind.QGEMM, [x, const(16, 32, dtype=np.int8), const(1), const(16)], QGemmAttrs())
    img = ag.Tensor([1, 6, 6, 8], name="img")
    qc = make_op1(OpKind.QCONV2D, [img, const(4, 3, 3, 8, dtype=np.int8), const(1), const(4)],
                  QConv2dAttrs(padding=(1, 1, 1, 1), act=DType.int8))
    c = count_flops([q, qc])
    assert c["macs"] == 0 and c["flops"] == 0
    assert c["int8_macs"] == 3 * 16 * 32 + 6 * 6 * 4 * 9 * 8 and c["int8_ops"] == 2 * c["int8_macs"]
    assert c["by_kind"]["qgemm"]["macs"] == 3 * 16 * 32 and c["by_kind"]["qconv2d"]["macs"] == 6 * 6 * 4 * 72


def test_other_ops_count_elements_written_and_skip_reshapes():
    x = ag.Tensor([4, 6], name="x")
    y = ops.layernorm(ops.relu(x)).reshape([24])
    c = count_flops(y)
    assert c["macs"] == 0 and c["other_elements"] == 48
    assert c["other_by_kind"] == {"layernorm": {"ops": 1, "elements": 24}, "relu": {"ops": 1, "elements": 24}}


def test_dynamic_dims_count_at_the_upper_bound_unless_given():
    n = ag.IntVar("n", 1, 8)
    y = ops.linear(ag.Tensor([n, 16], name="x"), const(4, 16))
    c = count_flops(y)
    assert c["macs"] == 8 * 16 * 4 and c["dims"] == {"n": 8}
    assert any("n=8 (upper bound)" in s for s in c["notes"])
    assert count_flops(y, dims={"n": 3})["macs"] == 3 * 16 * 4
    with pytest.raises(UnknownDimError, match="seq"):
        count_flops(y, dims={"seq": 3})
    with pytest.raises(ShapeError, match="'n' = 9 .* \\[1, 8\\]"):
        count_flops(y, dims={"n": 9})


# -- the zoo --------------------------------------------------------------------------------

def _torch_twin_flops(name: str, cfg: dict, inputs: dict) -> int:
    """torch's counter over the model's torch twin (aitgen/models/torch_refs.py), built on the meta
    device: shapes only, so the full-size models cost nothing to count."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from aitgen.models import torch_refs
    cls = torch_refs.REFS[name]
    with torch.device("meta"):
        twin = cls(**{k: v for k, v in cfg.items() if k in inspect.signature(cls).parameters}).eval()
        args = []
        for t in inputs.values():
            shape = [d.value for d in t.shape]
            if len(shape) == 4:  # NHWC here, NCHW in the twin
                shape = [shape[0], shape[3], shape[1], shape[2]]
            args.append(torch.empty(shape) if t.dtype.is_float else torch.zeros(shape, dtype=torch.int64))
        with FlopCounterMode(display=False) as fc:
            twin(*args)
    return fc.get_total_flops()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_small_zoo_models_match_torch_before_and_after_passes(name):
    _, inputs, outputs = models.build(name, **CONFIGS[name]["small"])
    c = count_flops(outputs)
    assert c["flops"] == _torch_twin_flops(name, CONFIGS[name]["small"], inputs) > 0
    after = count_flops_after_passes(outputs)
    assert after["flops"] == c["flops"]
    assert after["other_elements"] < c["other_elements"]  # fusion removed intermediates


# Published figures, multiply-adds (torchvision's "GFLOPS" column counts one multiply-add as one
# operation, as fvcore does): https://pytorch.org/vision/stable/models/generated/torchvision.models.
# resnet50.html (4.09), ...vit_b_16.html (17.56), ...mobilenet_v2.html (0.30).
PUBLISHED_GMACS = {"resnet50": 4.09, "vit_b16": 17.56, "mobilenet_v2": 0.30}


def _transformer_macs(layers, seq, hidden, inter, tokens_out=0, vocab=0):
    """Per layer: Q, K, V and output projections, the two MLP GEMMs, Q K^T and P V."""
    per_layer = 4 * seq * hidden * hidden + 2 * seq * hidden * inter + 2 * seq * seq * hidden
    return layers * per_layer + tokens_out * hidden * vocab


@pytest.mark.parametrize("name", list(CONFIGS))
def test_full_size_zoo_models_match_torch_and_the_published_figures(name):
    cfg = CONFIGS[name]["full"]
    _, inputs, outputs = models.build(name, **cfg)
    c = count_flops(outputs)
    assert c["flops"] == _torch_twin_flops(name, cfg, inputs)
    if name in PUBLISHED_GMACS:
        assert round(c["macs"] / 1e9, 2) == PUBLISHED_GMACS[name]
    elif name == "bert_base":  # 12 layers, s128, hidden 768, FFN 3072, plus the pooler's 768x768 on one token
        assert c["macs"] == _transformer_macs(12, 128, 768, 3072) + 768 * 768  # 11.17 G
    else:  # gpt2: the same 12 layers, plus the tied LM head over 128 tokens x 50257 words
        assert c["macs"] == _transformer_macs(12, 128, 768, 3072, tokens_out=128, vocab=50257)  # 16.11 G
