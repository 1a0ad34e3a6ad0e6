"""sink_permutes: layout permutes move past element-wise ops until they meet and cancel.

The ONNX importer wraps every NHWC conv and pool in NCHW -> NHWC and NHWC -> NCHW permutes, so
a conv net imports as conv -> permute -> relu -> permute -> conv, and a residual block as
add(permute(a), permute(b)). Here

    E(permute(x, p), permute(z, p), c)   ->   permute(E(x, z, c'), p)

for an element-wise E whose operands are each a permute by the same p, a constant (c' is c
transposed by p's inverse, once, here), or a broadcast scalar (every dim 1). An element-wise op
computes each element on its own, so running it in x's layout and permuting after gives the same
values. The sunk permute then meets the next conv's permute, and
    permute(permute(x, p1), p2) = permute(x, p1[p2])     (the identity when they are inverses)
so the pair disappears and the convs read each other's NHWC results directly; conv -> relu is
then a conv with its epilogue. A layout permute that moves only size-1 dims ([N, 1, 1, C] ->
[N, C, 1, 1] after a global pool) moves no data: it becomes a reshape (a view).

A reduction sinks too: reduce(permute(x, p), axes) = permute(reduce(x, p[axes]), p) with keepdims
(without, the kept dims are permuted back, or not at all when their order is the same): a squeeze-
excite block's global average pool then reads the conv's NHWC result in place, where it first
transposed the whole activation to NCHW. Not bit-identical: the reduction kernel may add the same
elements in another order in the other layout (tested at rtol 1e-5).

Only layout permutes sink: those that move the channel dim between position 1 and the end
(NCHW <-> NHWC and their 3-D / 5-D kin). Other permutes (attention's head transposes, a matrix
transpose before a GEMM) are where their author put them for a reason: later passes fold them
into strided reads, and fuse_attention matches them as written.

Runs after constant_folding (the importer's permuted constant weights are constants by then) and
before fold_batchnorm (conv -> permute -> permute -> batchnorm must be conv -> batchnorm for the
fold) and the epilogue fusions. Element-wise sinking is exact: the same math on the same values.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..errors import AitgenError
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.registry import Category, get_opdef, make_op, make_op1
from ..ops.view import PermuteAttrs, ReshapeAttrs
from ..options import CompileOptions
from ._util import new_constant, output_ids


def sink_permutes(graph: Graph, opts: CompileOptions) -> Graph:
    outs = output_ids(graph)
    work = [op for op in graph.ops if op.kind is OpKind.PERMUTE and _layout(_perm(op))]
    changed = False
    while work:
        p = work.pop(0)
        y = p.outputs[0]
        for u in list(y.users):
            if u.kind is OpKind.PERMUTE:
                made = _compose(graph, p, u, outs)
            elif u.kind in _REDUCES:
                made = _sink_reduce(graph, u, p)
            else:
                made = _sink_through(graph, u, p)
            if made is not None:
                changed = True
                work.extend(made)
    if changed:
        graph.sort()  # the permutes made above join graph.ops
    outs = output_ids(graph)
    for op in list(graph.ops):
        live = op.outputs[0].users or id(op.outputs[0]) in outs
        if op.kind is OpKind.PERMUTE and live and _layout(_perm(op)) and _moves_only_ones(op):
            x, y = op.inputs[0], op.outputs[0]
            view = make_op1(OpKind.RESHAPE, [x], ReshapeAttrs(tuple(y.shape)), op.name)
            view.name = y.name
            graph.replace_all_uses(y, view)
            changed = True
    if changed:
        graph.sort()
    return graph


def _perm(op: Op) -> tuple[int, ...]:
    return tuple(op.attrs.perm)


def _layout(perm: tuple[int, ...]) -> bool:
    """Channels first -> last (0, 2, .., r-1, 1) or last -> first (0, r-1, 1, .., r-2), rank >= 3."""
    r = len(perm)
    return r >= 3 and perm in ((0, *range(2, r), 1), (0, r - 1, *range(1, r - 1)))


def _compose(graph: Graph, p: Op, q: Op, outs: set[int]) -> Optional[list[Op]]:
    """q(p(x)) as one permute of x, or x itself when the two cancel."""
    x, z = p.inputs[0], q.outputs[0]
    p1, p2 = _perm(p), _perm(q)
    total = tuple(p1[i] for i in p2)
    if total == tuple(range(len(total))):
        # An output may not become an input or a constant (the runtime copies those; a tensor
        # that is another output is fine): leave such a pair to remove_no_ops' rules.
        if id(z) in outs and x.producer is None:
            return None
        if id(z) in outs:
            outs.discard(id(z))
            outs.add(id(x))
        graph.replace_all_uses(z, x)
        return []
    new = make_op1(OpKind.PERMUTE, [x], PermuteAttrs(total), q.name)
    new.name = z.name
    graph.replace_all_uses(z, new)
    return [new.producer]


def _elementwise(op: Op) -> bool:
    if op.kind is OpKind.FUSED_ELEMENTWISE or getattr(op.attrs, "operand_views", None) is not None:
        return False
    try:
        return get_opdef(op.kind).category is Category.ELEMENTWISE
    except AitgenError:
        return False


def _sink_through(graph: Graph, u: Op, p: Op) -> Optional[list[Op]]:
    """u, reading p's result, rewritten to run before the permute; the new permutes after it."""
    perm = _perm(p)
    r = len(perm)
    # Operands may broadcast (a squeeze-excite scale [N, C, 1, 1] times [N, C, H, W]): both are
    # permutes by the same perm, so their dims stay aligned, and the result is permuted back.
    if not _elementwise(u) or any(o.ndim != r for o in u.outputs):
        return None  # (a result of another rank cannot be permuted back by perm)
    inverse = tuple(int(i) for i in np.argsort(perm))
    inputs: list[Tensor] = []
    for t in u.inputs:
        src = t.producer
        if src is not None and src.kind is OpKind.PERMUTE and _perm(src) == perm:
            inputs.append(src.inputs[0])
        elif all(d == 1 for d in t.shape) and t.ndim <= r:
            inputs.append(t)  # a broadcast scalar reads the same in any layout
        elif t.is_constant and t.ndim <= r:
            v = np.asarray(t.value).reshape((1,) * (r - t.ndim) + tuple(np.shape(t.value)))
            inputs.append(new_constant(np.ascontiguousarray(np.transpose(v, inverse)), t.dtype))
        else:
            return None
    try:
        new_outs = make_op(u.kind, inputs, u.attrs, u.name)
    except AitgenError:
        return None
    made = []
    for old, new in zip(u.outputs, new_outs):
        back = make_op1(OpKind.PERMUTE, [new], PermuteAttrs(perm), u.name and u.name + "_permute")
        back.name = old.name
        graph.replace_all_uses(old, back)
        made.append(back.producer)
    for t in u.inputs:  # u is dead: readers must not list it (graph.sort drops it)
        t.users = [x for x in t.users if x is not u]
    return made


_REDUCES = (OpKind.REDUCE_SUM, OpKind.REDUCE_MEAN, OpKind.REDUCE_MAX, OpKind.REDUCE_MIN, OpKind.REDUCE_VAR,
            OpKind.REDUCE_PROD)


def _sink_reduce(graph: Graph, u: Op, p: Op) -> Optional[list[Op]]:
    """reduce(permute(x, p), axes) as reduce(x, p[axes]) and a permute of the (smaller) result: the
    kept dims in the permuted order (with keepdims, p itself, which sinks on or is a view)."""
    x, perm = p.inputs[0], _perm(p)
    axes = tuple(sorted(perm[a] for a in u.attrs.axes))
    try:
        new = make_op1(u.kind, [x], dataclasses.replace(u.attrs, axes=axes), u.name)
    except AitgenError:
        return None
    old = u.outputs[0]
    if u.attrs.keepdims:
        back = perm
    else:  # the kept dims of x, in x's order, read back in the order the permute had put them
        kept = sorted(perm[i] for i in range(len(perm)) if i not in u.attrs.axes)
        back = tuple(kept.index(perm[i]) for i in range(len(perm)) if i not in u.attrs.axes)
    made = []
    if back != tuple(range(len(back))):
        new = make_op1(OpKind.PERMUTE, [new], PermuteAttrs(back), u.name and u.name + "_permute")
        if _layout(back):
            made.append(new.producer)
    new.name = old.name
    graph.replace_all_uses(old, new)
    y = p.outputs[0]
    y.users = [op for op in y.users if op is not u]  # u is dead: y's readers must not list it
    return made


def _moves_only_ones(op: Op) -> bool:
    """A permute that keeps the order of the dims that are not static 1s moves no data."""
    x = op.inputs[0]
    kept = [i for i in _perm(op) if not (x.shape[i].is_static and x.shape[i].value == 1)]
    return kept == sorted(kept)
