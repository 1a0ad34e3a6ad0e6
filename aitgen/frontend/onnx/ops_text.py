"""ONNX TfIdfVectorizer over integer tokens, as n-gram comparisons, sums and one GEMM.

onnx's reference (and onnxruntime) count, for every pool n-gram of a size in [min_gram_length,
max_gram_length], the starts i with x[i + j * d] == gram[j] for all j, for each skip distance d in
1 .. max_skip_count + 1 (unigrams once, at d = 1). That is, per (size n, distance d): n shifted
slices of x compared with the pool's column j (broadcast over the pool's n-grams of that size),
AND-ed, summed over the starts. The counts [..., grams] times a constant 0/1 matrix send each
n-gram to its output column (ngram_indexes); the mode weights (TF, IDF, TFIDF) follow
element-wise. Strings (pool_strings) have no IR dtype: refused. The sequence length must be static.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import IntImm
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from .registry import NodeContext, check_constant_size, onnx_op

_MODES = ("TF", "IDF", "TFIDF")


def _f(v) -> Tensor:
    return constant(np.asarray(v, np.float32), dtype=DType.float32)


@onnx_op("TfIdfVectorizer", min_opset=9)
def _tfidf(ctx: NodeContext):
    x = ctx.input(0, "X")
    if ctx.has_attr("pool_strings"):
        raise ctx.unsupported("pool_strings: aitgen has no string dtype (integer tokens only)")
    if x.dtype not in (DType.int32, DType.int64):
        raise ctx.unsupported(f"X has dtype {x.dtype}; aitgen's TfIdfVectorizer takes int32 or int64 tokens")
    if x.ndim not in (1, 2) or not x.shape[-1].is_static:
        raise ctx.malformed(f"X must be [L] or [N, L] with a static L, got [{', '.join(map(str, x.shape))}]")
    mode = ctx.attr("mode", "TF")
    lo, hi, skip = ctx.attr("min_gram_length", 1), ctx.attr("max_gram_length", 1), ctx.attr("max_skip_count", 0)
    pool = [int(v) for v in ctx.attr("pool_int64s", [0])] if ctx.has_attr("pool_int64s") else None
    counts_at = [int(v) for v in ctx.attr("ngram_counts", [0])]
    indexes = [int(v) for v in ctx.attr("ngram_indexes", [0])]
    weights = [float(v) for v in ctx.attr("weights", [0.0])] if ctx.has_attr("weights") else None
    if mode not in _MODES or pool is None or not 1 <= lo <= hi or skip < 0 or not indexes or min(indexes) < 0:
        raise ctx.malformed(f"mode {mode!r} (one of {list(_MODES)}), pool_int64s, 1 <= min_gram_length {lo} <= "
                            f"max_gram_length {hi}, max_skip_count {skip} >= 0 and ngram_indexes >= 0 are needed")
    if any(b < a for a, b in zip(counts_at, counts_at[1:] + [len(pool)])) or (counts_at and counts_at[0] < 0):
        raise ctx.malformed(f"ngram_counts {counts_at} must be ascending start offsets into the pool")
    n_out = max(indexes) + 1
    check_constant_size(ctx, len(indexes) * n_out, f"the n-gram to column matrix ({n_out} columns)")
    if weights is not None and len(weights) != n_out:
        raise ctx.malformed(f"weights has {len(weights)} entries, the output {n_out} columns")
    length = x.shape[-1].value
    xs = x if x.ndim == 2 else ops.unsqueeze(x, [0])  # [B, L]
    gram_id, parts, columns = 0, [], []
    for size, start in enumerate(counts_at, start=1):
        end = counts_at[size] if size < len(counts_at) else len(pool)
        if (end - start) % size:
            raise ctx.malformed(f"the pool's {size}-grams ({end - start} ints) are not a multiple of {size}")
        grams = np.array(pool[start:end], dtype=x.dtype.np).reshape(-1, size)
        ids = range(gram_id, gram_id + len(grams))
        gram_id += len(grams)
        if not (lo <= size <= hi) or not len(grams):
            continue
        if max(ids) >= len(indexes):
            raise ctx.malformed(f"ngram_indexes has {len(indexes)} entries, the pool {gram_id}+ n-grams")
        total = None
        for d in (range(1, 2) if size == 1 else range(1, skip + 2)):
            starts = length - (size - 1) * d
            if starts <= 0:
                continue
            hit = None
            for j in range(size):  # [B, starts, 1] == [grams] -> [B, starts, grams]
                sl = ops.slice(xs, [j * d], [j * d + starts], axes=[1])
                eq = ops.equal(ops.unsqueeze(sl, [2]), constant(np.ascontiguousarray(grams[:, j]), dtype=x.dtype))
                hit = eq if hit is None else ops.logical_and(hit, eq)
            c = ops.reduce_sum(ops.cast(hit, DType.float32), [1])  # [B, grams]
            total = c if total is None else ops.add(total, c)
        if total is not None:
            parts.append(total)
            columns.extend(indexes[i] for i in ids)
    if not parts:
        y = ops.mul(ops.reduce_sum(ops.cast(xs, DType.float32), [1], keepdims=True), _f(np.zeros(n_out)))
    else:
        counts = parts[0] if len(parts) == 1 else ops.concat(parts, axis=1)
        scatter = np.zeros((len(columns), n_out), np.float32)
        scatter[np.arange(len(columns)), columns] = 1.0
        y = ops.gemm(counts, _f(scatter))
    if mode == "IDF":
        present = ops.cast(ops.greater(y, _f(0.0)), DType.float32)
        y = present if weights is None else ops.mul(present, _f(weights))
    elif mode == "TFIDF" and weights is not None:
        y = ops.mul(y, _f(weights))
    return y if x.ndim == 2 else ops.reshape(y, [IntImm(n_out)])
