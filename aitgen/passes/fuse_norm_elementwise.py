"""fuse_norm_elementwise: layernorm, rmsnorm and softmax (last axis) absorb the element-wise op
that computes their input, as a prologue (aitgen/ops/prologue.py).

layernorm(x + r) reads x and r and writes y: one kernel, and the sum is never stored and read
back (two passes over memory saved: the add's write and the norm's read). Likewise a BERT
embedding sum feeding its layernorm, and softmax(s * scale + mask) where the attention pattern was
not recognised. The producer may be one element-wise op or a FUSED_ELEMENTWISE group (this pass
runs after fuse_elementwise, so a whole chain comes in at once). It is absorbed when:
- the norm's input is the producer's only result read anywhere, by the norm alone, and is no
  graph output (another reader would need the value stored after all: no saving, no fusion);
- one of the producer's operands has the input's full shape (it becomes slot 0) and the others
  are, along the row, whole or one value (what a row kernel reads cheaply), at most MAX_EXTRA;
- the norm has no prologue yet and its input is float.

Runs after fuse_elementwise (whole groups) and after fuse_mm_elementwise (a residual add that a
GEMM takes into its epilogue costs nothing there either). Skipped when opts.fusion is False.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..errors import AitgenError
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ops.fused import Expr, ExprNode
from ..ops.prologue import MAX_EXTRA, prologue_operand_ok
from ..ops.registry import Category, get_opdef, make_op1
from ..options import CompileOptions
from ._util import output_ids

_ROW_OPS = (OpKind.LAYERNORM, OpKind.RMSNORM, OpKind.SOFTMAX)


def fuse_norm_elementwise(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    for op in list(graph.ops):
        if op.kind in _ROW_OPS:
            _absorb(graph, op)
    graph.sort()
    return graph


def _row_dims(op: Op) -> Optional[int]:
    if op.kind is OpKind.SOFTMAX:
        return 1 if op.inputs[0].ndim >= 1 and op.attrs.axis == op.inputs[0].ndim - 1 else None
    return op.attrs.num_axes


def _producer_expr(p: Op) -> Optional[Expr]:
    """The producer as an expression with one output, or None."""
    try:
        if get_opdef(p.kind).category is not Category.ELEMENTWISE:
            return None
    except AitgenError:
        return None
    if p.kind is OpKind.FUSED_ELEMENTWISE:
        e = p.attrs.expr
        return e if len(e.outputs) == 1 and p.attrs.operand_views is None else None
    n = len(p.inputs)
    return Expr(n, (ExprNode(p.kind, p.attrs, tuple(range(n)), p.outputs[0].dtype),), (n,))


def _absorb(graph: Graph, op: Op) -> None:
    x = op.inputs[0]
    k = _row_dims(op)
    p = x.producer
    if (k is None or p is None or getattr(op.attrs, "prologue", None) is not None or not x.dtype.is_float
            or id(x) in output_ids(graph) or [u for u in x.users] != [op] or op.inputs.count(x) != 1):
        return
    expr = _producer_expr(p)
    if expr is None:
        return
    full = [i for i, t in enumerate(p.inputs) if tuple(t.shape) == tuple(x.shape)]
    if not full or len(p.inputs) - 1 > MAX_EXTRA:
        return
    first = full[0]
    order = [first] + [i for i in range(len(p.inputs)) if i != first]  # new slot -> old slot
    extras = [p.inputs[i] for i in order[1:]]
    if not all(prologue_operand_ok(x.shape, t.shape, k) for t in extras):
        return
    expr = _reorder_inputs(expr, order)
    attrs = dataclasses.replace(op.attrs, prologue=expr)
    out = make_op1(op.kind, [p.inputs[first], *op.inputs[1:], *extras], attrs, name=op.name)
    out.name = op.outputs[0].name
    graph.replace_all_uses(op.outputs[0], out)


def _reorder_inputs(expr: Expr, order: list[int]) -> Expr:
    """The same expression with its input slots permuted: new slot j reads old slot order[j]."""
    n = expr.num_inputs
    new_of = {old: new for new, old in enumerate(order)}
    remap = lambda s: new_of[s] if s < n else s  # noqa: E731 - node slots keep their numbers
    nodes = tuple(dataclasses.replace(nd, args=tuple(remap(a) for a in nd.args)) for nd in expr.nodes)
    return Expr(n, nodes, tuple(remap(o) for o in expr.outputs))
