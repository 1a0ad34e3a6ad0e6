"""sink_reshapes: an element-wise op that reads a reshape runs on the reshape's input instead, and
the reshape moves after it.

    z = E(reshape(y, S'), r)   ->   z = reshape(E(y, reshape(r, ...)), S')

A reshape is a view (the same bytes under another shape), and an element-wise op computes each
element on its own, so the result is the same bytes in the same order: the op may as well run in
y's coordinates. The point is what the next passes then see. `gemm -> reshape -> add/gelu` has the
element-wise ops directly on the GEMM's result, where fuse_mm_elementwise takes them into the
epilogue; `relu -> reshape -> add` is one connected element-wise group for fuse_elementwise.
Repeated, a reshape sinks through a whole chain.

The other operands are read in y's coordinates. The reshape maps groups of consecutive dims of y
onto groups of the reshaped shape with equal products (as polynomials, so symbolic dims work); an
operand that is, in each group, either whole or broadcast (size 1 throughout) becomes an operand
of the same bytes in y's groups (a reshape, itself a view, or the operand as it is). An operand
broadcast in part of a group (a [3, 1] bias against a reshape [6] -> [3, 2] ... of a [6] result)
has no such form, and the op stays where it is. So does an op whose result is larger than the
reshape's (the reshaped tensor broadcast into it).

Only reshapes of a computed result sink (an op's output: what can absorb an epilogue or join an
element-wise group); the op's result keeps its name and shape for every reader. Exact: the same
element-wise math on the same values. Runs after fuse_memory_ops (which folds reshapes around
attention into strided views first) and before the epilogue and element-wise fusions it feeds.
Skipped when opts.fusion is False.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..errors import AitgenError
from ..ir.dims import Dim, IntImm, prod
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.registry import Category, get_opdef, make_op, make_op1
from ..ops.view import ReshapeAttrs
from ..options import CompileOptions


def sink_reshapes(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    work = [op for op in graph.ops if op.kind is OpKind.RESHAPE]
    changed = False
    while work:
        r = work.pop(0)
        y, yr = r.inputs[0], r.outputs[0]
        if y.producer is None:
            continue
        for u in list(yr.users):
            made = _sink_through(graph, u, y, yr)
            if made:
                work.extend(made)
                changed = True
    if changed:
        graph.sort()
    return graph


def _elementwise(op: Op) -> bool:
    try:
        return get_opdef(op.kind).category is Category.ELEMENTWISE
    except AitgenError:
        return False


def _sink_through(graph: Graph, u: Op, y: Tensor, yr: Tensor) -> list[Op]:
    """Rewrite u (reading yr = reshape(y)) to run in y's coordinates; the new reshapes after it."""
    if not _elementwise(u) or any(tuple(o.shape) != tuple(yr.shape) for o in u.outputs) \
            or getattr(u.attrs, "operand_views", None) is not None:
        return []  # (an operand read through a view has the view's shape, not its tensor's)
    groups = dim_groups(yr.shape, y.shape)
    if groups is None:
        return []
    inputs: list[Tensor] = []
    for t in u.inputs:
        if t is yr:
            inputs.append(y)
            continue
        m = _operand_in(t, yr.shape, y.shape, groups)
        if m is None:
            return []
        inputs.append(m)
    try:
        new_outs = make_op(u.kind, inputs, u.attrs, u.name)
    except AitgenError:
        return []  # an operand form the op rejects (it should not happen): leave it
    made = []
    for old, new in zip(u.outputs, new_outs):
        back = make_op1(OpKind.RESHAPE, [new], ReshapeAttrs(tuple(old.shape)), u.name and u.name + "_reshape")
        back.name = old.name
        graph.replace_all_uses(old, back)
        made.append(back.producer)
        # A reshape reading the one just made reads `new` instead (or is `new`, shapes equal):
        # no reshape chain is left for merge_view_chains, which ran before, to find next time.
        for v in [v for v in back.users if v.kind is OpKind.RESHAPE]:
            vout = v.outputs[0]
            back.users = [x for x in back.users if x is not v]  # v is dead (graph.sort drops it)
            if tuple(vout.shape) == tuple(new.shape):
                graph.replace_all_uses(vout, new)
                continue
            direct = make_op1(OpKind.RESHAPE, [new], ReshapeAttrs(tuple(vout.shape)), v.name)
            direct.name = vout.name
            graph.replace_all_uses(vout, direct)
            made.append(direct.producer)
    for t in u.inputs:  # u is dead: readers must not list it (graph.sort drops it)
        t.users = [x for x in t.users if x is not u]
    return made


Groups = list[tuple[tuple[int, int], tuple[int, int]]]


def dim_groups(src: Sequence[Dim], dst: Sequence[Dim]) -> Optional[Groups]:
    """Consecutive dims of src and dst with equal products: [((a0, a1), (b0, b1)), ...] so that
    prod(src[a0:a1]) == prod(dst[b0:b1]); the finest such split (a size-1 dim may pair with an
    empty range). None when the element counts differ."""
    n, m = len(src), len(dst)
    if prod(src) != prod(dst) or any(d.is_static and d.value == 0 for d in tuple(src) + tuple(dst)):
        return None  # an empty tensor: every split matches, none means anything
    pre_dst = [prod(dst[:b]) for b in range(m + 1)]
    bounds = [(0, 0)]
    for a in range(1, n + 1):
        p = prod(src[:a])
        hit = next((j for j in range(bounds[-1][1], m + 1) if pre_dst[j] == p), None)
        if hit is not None:
            bounds.append((a, hit))
    if bounds[-1] != (n, m):  # trailing 1s of dst
        bounds.append((n, m))
    return [((a0, a1), (b0, b1)) for (a0, b0), (a1, b1) in zip(bounds, bounds[1:])]


def _operand_in(t: Tensor, src: Sequence[Dim], dst: Sequence[Dim], groups: Groups) -> Optional[Tensor]:
    """t (broadcasting to src) as an operand broadcasting to dst the same way, or None."""
    padded = (IntImm(1),) * (len(src) - len(t.shape)) + tuple(t.shape)
    shape: list[Dim] = []
    for (a0, a1), (b0, b1) in groups:
        if all(padded[i] == src[i] for i in range(a0, a1)):
            shape += list(dst[b0:b1])
        elif all(padded[i] == 1 for i in range(a0, a1)):
            shape += [IntImm(1)] * (b1 - b0)
        else:
            return None
    while shape and shape[0] == 1 and len(shape) > len(t.shape):
        shape.pop(0)  # leading 1s are implied by broadcasting
    if tuple(shape) == tuple(t.shape):
        return t
    # A reshape of a reshape reads the first one's input (a view of a view is a view of the base),
    # and the same operand sunk through twice takes one reshape: so the pipeline leaves no chain
    # or twin for merge_view_chains or dedup, which ran before, to find on a second run.
    while t.producer is not None and t.producer.kind is OpKind.RESHAPE:
        t = t.producer.inputs[0]
    if tuple(shape) == tuple(t.shape):
        return t
    for user in t.users:
        if user.kind is OpKind.RESHAPE and tuple(user.outputs[0].shape) == tuple(shape):
            return user.outputs[0]
    return make_op1(OpKind.RESHAPE, [t], ReshapeAttrs(tuple(shape)))
