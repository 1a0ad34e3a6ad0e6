"""square_pow: x ** 2 with a constant exponent becomes x * x.

Exporters write a square as Pow(x, 2.0): LLaMA's and T5's RMS norms (x.pow(2).mean(-1)), the
variance of a layer norm written out op by op, L2 penalties. Every backend computes POW through
std::pow, a libm call that keeps the element-wise loop scalar (LLaMA's 24 norms spent 9 ms per
run in it on a 2-core Zen 4, 6% of the model); a product vectorises and costs one instruction.

Exact: x * x is the correctly rounded square, which pow(x, 2) approximates (glibc's powf is within
1 ulp), and numpy's power computes a float square as x * x too. Only float dtypes, and only an
exponent whose every element is exactly 2 and that broadcasts to nothing larger than x (the
result must keep pow's shape). Other exponents (0.5, 3, -1) stay pow: their rewrites differ from
numpy's result for -0.0, infinities or by rounding.

Runs after remove_no_ops (x ** 1 is gone by then) and before dedup, so two squares of one tensor
merge; match_norms, earlier, takes either form.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.op import OpKind
from ..ops import elementwise as ew
from ..options import CompileOptions


def square_pow(graph: Graph, opts: CompileOptions) -> Graph:
    changed = False
    for op in list(graph.ops):
        if op.kind is not OpKind.POW or len(op.inputs) != 2:
            continue
        x, e = op.inputs
        (out,) = op.outputs
        if not x.dtype.is_float or not e.is_constant or np.asarray(e.value).size == 0:
            continue
        if not np.all(np.asarray(e.value, np.float64) == 2.0):
            continue
        if tuple(x.shape) != tuple(out.shape) or x.dtype != out.dtype:
            continue  # the exponent broadcasts x up, or pow promotes: the product would not match
        sq = ew.mul(x, x, name=op.name)
        sq.name = out.name
        graph.replace_all_uses(out, sq)
        changed = True
    if changed:
        graph.sort()
    return graph
