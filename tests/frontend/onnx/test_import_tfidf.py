"""TfIdfVectorizer over integer tokens (ops_text.py: shifted-slice comparisons, sums, one GEMM)
against onnx's numpy reference and onnxruntime, in ONE CPU build.

Covers: TF / IDF / TFIDF with and without weights, unigrams + bigrams + trigrams with skips, a
pool size outside [min_gram_length, max_gram_length] (its ids still counted off), 1-D and 2-D
int64 input, int32 input, output columns shared by two n-grams and columns no n-gram reaches.
Counts are exact (small integers in float32); weights are float32: rtol 1e-6.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import In, case, check_cases_ref, ints

from aitgen.errors import ImportError_, UnsupportedOpError
from aitgen.frontend import onnx as ox

TOL = dict(rtol=1e-6, atol=0.0)
POOL = [2, 3, 5, 4,            # unigrams
        5, 6, 7, 8, 6, 7,      # bigrams (5,6) (7,8) (6,7)
        2, 3, 2, 4, 4, 4]      # trigrams (2,3,2) (4,4,4)
COUNTS = [0, 4, 10]


def _tf(name, x, mode, lo, hi, skip, weights=None, indexes=None, **kw):
    attrs = {"mode": mode, "min_gram_length": lo, "max_gram_length": hi, "max_skip_count": skip,
             "ngram_counts": COUNTS, "ngram_indexes": indexes or list(range(9)), "pool_int64s": POOL}
    if weights is not None:
        attrs["weights"] = weights
    return case(name, "TfIdfVectorizer", [In("x", x)], attrs, opset=9, **kw)


def _cases():
    x2 = ints((3, 14), 2, 9, seed=1)
    x2[0, :6] = [2, 3, 2, 4, 4, 4]
    x1 = ints((12,), 2, 9, seed=2)
    w = [0.5, 1.5, 2.0, 0.25, 3.0, 1.0, 0.75, 2.5, 4.0]
    return [
        _tf("tf_all_skip2", x2, "TF", 1, 3, 2),
        _tf("idf_weights_bi_tri", x2, "IDF", 2, 3, 1, weights=w),
        _tf("tfidf_weights_uni_bi_1d", x1, "TFIDF", 1, 2, 3, weights=w),
        # onnx's reference cannot weigh without weights (len(None)): onnxruntime is the reference there
        _tf("idf_plain_shared_cols", x2.astype(np.int32), "IDF", 1, 3, 0, indexes=[0, 1, 1, 2, 3, 5, 5, 6, 0], ref=False),
        _tf("tfidf_plain_tri", x2, "TFIDF", 3, 3, 4, ref=False),
    ]


def test_tfidf_matches_numpy_reference_and_onnxruntime(tmp_path):
    check_cases_ref(_cases(), tmp_path / "tfidf", TOL)


@pytest.mark.parametrize("attrs,err,match", [
    ({"mode": "BM25"}, ImportError_, "mode"),
    ({"min_gram_length": 3, "max_gram_length": 2}, ImportError_, "min_gram_length"),
    ({"weights": [1.0]}, ImportError_, "weights"),
    ({"ngram_counts": [0, 4, 3]}, ImportError_, "ascending"),
    ({"ngram_indexes": list(range(8)) + [1 << 40]}, UnsupportedOpError, "limit"),
])
def test_typed_errors(attrs, err, match):
    base = {"mode": "TF", "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 0, "ngram_counts": COUNTS,
            "ngram_indexes": list(range(9)), "pool_int64s": POOL}
    c = case("t", "TfIdfVectorizer", [In("x", ints((2, 5), 0, 5))], {**base, **attrs}, opset=9, infer=False)
    with pytest.raises(err, match=match) as e:
        ox.load(c.model)
    assert "(TfIdfVectorizer, opset 9)" in str(e.value)


def test_string_pool_is_refused():
    from onnx import TensorProto, helper
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                            max_skip_count=0, ngram_counts=[0], ngram_indexes=[0], pool_strings=["a"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(UnsupportedOpError, match="string"):
        ox.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]))
