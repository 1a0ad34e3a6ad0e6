"""merge_view_chains: reshape/permute chains become at most reshape -> permute -> reshape.
Exact (the same elements in the same places): check_pass compares bit for bit."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir import Graph, IntVar, Tensor
from aitgen.passes import PIPELINE, run_pipeline
from aitgen.passes.merge_view_chains import merge_view_chains
from pass_equivalence import check_pass
from pass_zoo import ZOO, zoo_graph


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _run(y, **extra) -> Graph:
    return check_pass(merge_view_chains, Graph.from_outputs({"y": ops.relu(y), **extra}), exact=True)


def test_vit_patch_flatten_from_onnx_is_a_reshape():
    # conv result [B, h, w, E] -> importer's NCHW permute -> flatten(2) -> transpose(1, 2)
    x = Tensor([2, 4, 4, 8], name="x")
    y = ops.permute(ops.reshape(ops.permute(x, [0, 3, 1, 2]), [2, 8, 16]), [0, 2, 1])
    g = _run(y)
    assert kinds(g) == ["reshape", "relu"] and tuple(g.ops[0].outputs[0].shape) == (2, 16, 8)


def test_symbolic_batch_and_a_split_dim():
    b = IntVar("b", 1, 4)
    x = Tensor([b, 4, 4, 8], name="x")
    y = ops.permute(ops.reshape(ops.permute(x, [0, 3, 1, 2]), [b, 8, 16]), [0, 2, 1])
    assert kinds(_run(y)) == ["reshape", "relu"]
    # B*S rows split back into [B, S] around a permute of the last two dims
    z = ops.reshape(Tensor([b, 6, 8], name="z"), [b * 6, 8])
    y = ops.permute(ops.reshape(ops.permute(ops.reshape(z, [b, 6, 8]), [0, 2, 1]), [b, 8, 2, 3]), [0, 1, 3, 2])
    g = _run(y)
    assert kinds(g).count("permute") == 1


def test_mha_onnx_qkv_split_is_one_small_permute():
    # [S, B, 3E] -> [S, B, 3, E] -> unsqueeze -> transpose(0, -2) -> squeeze -> [3, S, B, E]
    x = Tensor([5, 2, 48], name="x")
    u = ops.reshape(ops.reshape(x, [5, 2, 3, 16]), [1, 5, 2, 3, 16])
    y = ops.reshape(ops.permute(u, [3, 1, 2, 0, 4]), [3, 5, 2, 16])
    g = _run(y)
    perm = [op for op in g.ops if op.kind.value == "permute"]
    assert len(perm) == 1 and perm[0].attrs.perm == (1, 0, 2) and perm[0].inputs[0].ndim == 3


def test_torch_mha_head_split_collapses_to_one_reshape_and_one_permute():
    # slice -> view [S, B*H, D] -> view [S, B, H, D] -> permute -> transpose (k): the middle
    # shape is no view of the slice, the collapsed reshape is; the two permutes are one.
    x = Tensor([5, 2, 3, 16], name="x")
    part = ops.slice(x, [1], [2], axes=[2])
    k = ops.permute(ops.permute(ops.reshape(ops.reshape(part, [5, 4, 8]), [5, 2, 2, 8]), [1, 2, 3, 0]), [0, 1, 3, 2])
    g = _run(k)
    assert kinds(g) == ["slice", "reshape", "permute", "relu"]
    assert tuple(g.ops[1].outputs[0].shape) == (5, 2, 2, 8) and g.ops[2].attrs.perm == (1, 2, 0, 3)


def test_chains_that_are_already_minimal_or_cut_unevenly_stay():
    x = Tensor([2, 3, 4, 5], name="x")
    head_split = ops.permute(ops.reshape(Tensor([2, 3, 20], name="t"), [2, 3, 4, 5]), [0, 2, 1, 3])
    assert kinds(_run(head_split)) == ["reshape", "permute", "relu"]
    uneven = ops.reshape(ops.permute(ops.reshape(Tensor([24], name="u"), [6, 4]), [1, 0]), [6, 4])
    assert kinds(_run(uneven)) == ["reshape", "permute", "reshape", "relu"]   # 4 cuts 6 unevenly
    shared = ops.permute(x, [0, 2, 1, 3])    # an inner tensor with two readers ends the chain
    g = _run(ops.permute(shared, [0, 2, 1, 3]), s=ops.relu(shared))
    assert kinds(g).count("permute") == 2


@pytest.mark.parametrize("seed", range(12))
def test_random_chains(seed):
    # Random chains of splits, merges and permutes over a static shape: the result is exact and
    # has at most one permute.
    rng = np.random.default_rng(seed)
    x = Tensor([2, 3, 4, 2], name="x")
    t = x
    for _ in range(4):
        if rng.random() < 0.5:
            t = ops.permute(t, list(rng.permutation(t.ndim)))
        else:
            dims = [d.value for d in t.shape]
            i = int(rng.integers(0, len(dims) - 1))
            merged = dims[:i] + [dims[i] * dims[i + 1]] + dims[i + 2:]
            t = ops.reshape(t, merged if rng.random() < 0.5 or len(dims) < 3 else dims + [1])
    g = _run(t)
    assert kinds(g).count("permute") <= 1


def test_output_is_kept_when_the_chain_is_the_identity():
    x = Tensor([2, 3], name="x")
    g = Graph.from_outputs({"y": ops.permute(ops.permute(x, [1, 0]), [1, 0])})
    out = check_pass(merge_view_chains, g, exact=True)
    assert out.outputs["y"].producer is not None   # an output may not become the input itself


def test_zoo_exact():
    for name in ZOO:
        stop = PIPELINE.index(merge_view_chains)
        g = run_pipeline(zoo_graph(name), compile_options(), PIPELINE[:stop])
        check_pass(merge_view_chains, g, exact=True)
