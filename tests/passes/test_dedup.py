"""dedup: duplicate computations and identical constants merge, and nothing that only looks alike."""
from __future__ import annotations

import numpy as np

import aitgen as ag
from aitgen import ops
from aitgen.ir import Graph
from aitgen.passes import dedup
from pass_equivalence import check_pass


def _kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def test_duplicate_subexpressions_merge():
    x = ag.Tensor([2, 3], name="x")
    a = ops.tanh(ops.relu(x))
    b = ops.tanh(ops.relu(x))
    out = check_pass(dedup, Graph.from_outputs({"y": ops.add(a, b)}), exact=True)
    assert _kinds(out) == ["relu", "tanh", "add"]


def test_commutative_ops_merge_in_either_order_others_do_not():
    x, y = ag.Tensor([3], name="x"), ag.Tensor([3], name="y")
    g = Graph.from_outputs({"o": ops.mul(x, y) + ops.mul(y, x) + ops.sub(x, y) + ops.sub(y, x)})
    out = check_pass(dedup, g, exact=True)
    assert _kinds(out).count("mul") == 1 and _kinds(out).count("sub") == 2


def test_identical_constants_merge_and_so_do_their_readers():
    x = ag.Tensor([3], name="x")
    c1 = ag.constant(np.array([1.0, 2.0, 3.0], np.float32), name="l1.bias")
    c2 = ag.constant(np.array([1.0, 2.0, 3.0], np.float32), name="l2.bias")
    out = check_pass(dedup, Graph.from_outputs({"y": ops.relu(x + c1) * ops.relu(x + c2)}), exact=True)
    assert [t.name for t in out.constants] == ["l1.bias"]
    assert _kinds(out) == ["add", "relu", "mul"]
    assert out.annotations["constant_aliases"] == {"l2.bias": "l1.bias"}


def test_look_alikes_stay_apart():
    x = ag.Tensor([4], name="x")
    pz, nz = ag.constant(np.zeros(4, np.float32)), ag.constant(np.full(4, -0.0, np.float32))
    g = Graph.from_outputs({
        "zeros": ops.maximum(x, pz) + ops.maximum(x, nz),                     # equal values, other bytes
        "clamp": ops.clamp(x, min=0.0) + ops.clamp(x, min=-0.0),              # attrs equal under ==
        "gelu": ops.gelu(x) + ops.gelu(x, approximate="tanh"),
        # the same (zero) bytes under two dtypes
        "dtype": ops.cast(ops.cast(x, "int32") * ag.constant(np.zeros(4, np.int32)), "float32")
                 + x * ag.constant(np.zeros(4, np.float32)),
    })
    before = len(g.ops)
    out = check_pass(dedup, g, exact=True)
    assert len(out.ops) == before


def test_duplicates_returned_under_two_names_are_kept():
    x = ag.Tensor([4], name="x")
    out = check_pass(dedup, Graph.from_outputs({"a": ops.relu(x), "b": ops.relu(x)}), exact=True)
    assert len(out.ops) == 2 and out.outputs["a"] is not out.outputs["b"]


def test_a_duplicate_of_an_output_feeds_from_the_output():
    x = ag.Tensor([4], name="x")
    out = check_pass(dedup, Graph.from_outputs({"a": ops.relu(x), "b": ops.neg(ops.relu(x))}), exact=True)
    assert _kinds(out) == ["relu", "neg"]


def test_low_precision_constants_merge():
    # bfloat16 arrays (ml_dtypes) refuse the buffer protocol: hashing must go through bytes.
    for dtype in ("float16", "bfloat16"):
        x = ag.Tensor([3], dtype=dtype, name="x")
        c1, c2 = (ag.constant(np.array([1.0, 2.0, 3.0], np.float32), dtype=dtype) for _ in range(2))
        s = ag.constant(np.float32(2.0), dtype=dtype)
        out = check_pass(dedup, Graph.from_outputs({"y": (x * c1) * (x * c2) + s}), exact=True)
        assert len(out.constants) == 2 and _kinds(out) == ["mul", "mul", "add"]
