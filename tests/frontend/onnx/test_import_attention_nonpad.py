"""ONNX Attention with nonpad_kv_seqlen (opset 24+; an external KV cache with per-batch valid
lengths, fed at run time): keys at or past each batch's length are masked, and the causal / window
frontier moves per batch (offset[b] = len[b] - q_len). Against onnx's numpy reference and
onnxruntime (1.32 runs every case), in ONE CPU build, with two sets of lengths through the same
build. Cases: causal with GQA, a boolean attn_mask combined with causal, sliding windows, a
length shorter than q_len (a negative offset: rows with no key give Y = 0), 3-D inputs.
Tolerance: float32 rtol 1e-5 / atol 1e-5 (softmax over at most 8 keys, exp from libm).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, rand

from aitgen.errors import ImportError_
from aitgen.frontend import onnx as ox

TOL = dict(rtol=1e-5, atol=1e-5)
I64 = np.int64


def _att(name, q, k, v, lens, attrs, mask=None, other_lens=None, ort=True, opset=24):
    ins = [In("q", q), In("k", k), In("v", v), In("m", mask) if mask is not None else None, None, None,
           In("lens", np.asarray(lens, I64))]
    sizes = [{"lens": np.asarray(other_lens, I64)}] if other_lens is not None else []
    return case(name, "Attention", ins, attrs, opset=opset, sizes=sizes, ort=ort)


def _cases():
    q, k, v = rand((2, 4, 3, 5), seed=1), rand((2, 2, 8, 5), seed=2), rand((2, 2, 8, 6), seed=3)
    mask = rand((3, 8), seed=4) > -1.5
    return [
        _att("np_causal_gqa", q, k, v, [8, 5], {"is_causal": 1}, other_lens=[3, 7]),
        _att("np_plain", q, k, v, [6, 8], {}, other_lens=[1, 2]),
        _att("np_mask_causal", q, k, v, [7, 4], {"is_causal": 1}, mask=mask),
        _att("np_short", q, k, v, [2, 8], {"is_causal": 1}),  # batch 0: offset -1, its first row has no key
        _att("np_window", q, k, v, [8, 6], {"left_window_size": 2, "right_window_size": 1}, opset=25,
             other_lens=[4, 5]),
        _att("np_3d", rand((2, 3, 8), seed=5), rand((2, 6, 8), seed=6), rand((2, 6, 4), seed=7), [6, 3],
             {"q_num_heads": 2, "kv_num_heads": 2, "is_causal": 1}),
    ]


def test_attention_nonpad_kv_seqlen_matches_reference(tmp_path):
    check_cases_ref(_cases(), tmp_path / "nonpad", TOL)


def test_nonpad_with_a_past_cache_is_malformed():
    # ONNX: nonpad_kv_seqlen describes an external cache, so past_key/past_value cannot come with it
    q, k = rand((1, 2, 3, 4), seed=1), rand((1, 2, 5, 4), seed=2)
    ins = [In("q", q), In("k", k), In("v", k), None, In("pk", k), In("pv", k), In("lens", np.array([4], I64))]
    c = case("bad", "Attention", ins, {}, opset=24, n_out=3, infer=False)
    with pytest.raises(ImportError_, match=r"node 'Attention_0' \(Attention, opset 24\).*cannot be combined"):
        ox.load(c.model)
