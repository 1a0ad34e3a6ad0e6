"""fuse_elementwise: maximal connected groups of element-wise ops become one FUSED_ELEMENTWISE op.

A group is a set of element-wise ops (broadcasting ones, ops with several readers and earlier
fused groups included) joined by producer -> consumer edges, and it becomes one kernel that reads
each operand once and writes only what leaves the group (aitgen/ops/fused.py, Expr). Groups are
found by partition_subgraphs, greedily along the edges in schedule order, under four rules:

1. One output shape per group (the partition by shape). A producer whose result a consumer
   broadcasts (a [1, N] scale feeding an [M, N] add) stays in a group of its own shape: inside
   the larger group it would be recomputed M times, and its own operands re-read M times.
2. Nothing is recomputed: an intermediate that is still read outside the group, or is a graph
   output, becomes an extra output of the fused op.
3. The group graph stays acyclic: two groups are not merged when a path leaves one and comes
   back into the other through an op outside both (gemm(t) + t with t = relu(x): relu and add
   cannot be one kernel, the gemm runs between them).
4. At most MAX_OPERANDS distinct operands (a kernel's argument list, not a rule of the math).

Why this never raises memory traffic: with (1) every op of a group iterates over the same
elements, and with (2) no element is computed twice, so the fused kernel reads each distinct
operand once (the unfused ops read it at least once) and writes each exported tensor once (the
unfused ops write every intermediate, exported or not). Traffic only drops: by the round trip of
every intermediate that stays inside, and by repeated reads of shared operands.
tests/passes/test_fuse_elementwise.py checks the byte count before and after on every graph.

Single-op groups stay as they are (wrapping one op gains nothing). Runs after the epilogue passes
(fuse_mm_elementwise, fuse_conv_elementwise), so what a GEMM or conv can absorb goes there first.
Skipped when opts.fusion is False.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..errors import AitgenError
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.fused import Expr, ExprNode, fused_elementwise
from ..ops.registry import Category, get_opdef
from ..options import CompileOptions
from ._util import output_ids

MAX_OPERANDS = 32


def fuse_elementwise(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    for group in partition_subgraphs(graph):
        fuse_group(graph, group)
    graph.sort()
    return graph


def is_fusible(op: Op) -> bool:
    try:
        category = get_opdef(op.kind).category
    except AitgenError:
        return False
    # A group reading strided views (fuse_memory_ops, on a second run of the pipeline) keeps them:
    # inlined into another group, its operands would be read as the tensors they view.
    return category is Category.ELEMENTWISE and all(tuple(o.shape) == tuple(op.outputs[0].shape)
                                                    for o in op.outputs) \
        and getattr(op.attrs, "operand_views", None) is None


def partition_subgraphs(graph: Graph, fusible: Callable[[Op], bool] = is_fusible,
                        max_operands: int = MAX_OPERANDS) -> list[list[Op]]:
    """Groups of two or more fusible ops (each in schedule order, groups by their first op) under
    rules 1, 3 and 4 of the module docstring."""
    ops = graph.ops
    pos = {id(op): i for i, op in enumerate(ops)}  # of a group's root: one of its ops
    parent = {id(op): id(op) for op in ops}
    members: dict[int, list[Op]] = {id(op): [op] for op in ops}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def succ(root: int) -> set[int]:
        return {find(id(u)) for m in members[root] for o in m.outputs for u in o.users
                if id(u) in parent} - {root}

    def reaches(src: int, dst: int, now: int) -> bool:
        """A path src -> X -> ... -> dst through some X outside both groups. Ops are merged in
        schedule order, so while the op at position `now` is merged every group holds ops at or
        before it, and an op after it is alone: paths through it only go further (edges run
        forward) and never come back to a group. The search stops there, which keeps it local."""
        stack = [n for n in succ(src) if n != dst and pos[n] <= now]
        seen = set(stack) | {src}
        while stack:
            for m in succ(stack.pop()):
                if m == dst:
                    return True
                if m not in seen and pos[m] <= now:
                    seen.add(m)
                    stack.append(m)
        return False

    def operand_count(a: int, b: int) -> int:
        inside = {id(m) for m in members[a] + members[b]}
        return len({id(t) for m in members[a] + members[b] for t in m.inputs
                    if t.producer is None or id(t.producer) not in inside})

    for now, op in enumerate(ops):
        if not fusible(op):
            continue
        shape = tuple(op.outputs[0].shape)
        for t in op.inputs:
            p = t.producer
            if p is None or id(p) not in parent or not fusible(p) or tuple(t.shape) != shape:
                continue
            a, b = find(id(p)), find(id(op))
            if (a == b or operand_count(a, b) > max_operands or reaches(a, b, now)
                    or reaches(b, a, now)):
                continue
            parent[b] = a
            members[a] += members.pop(b)
    groups = [sorted(members[r], key=lambda m: pos[id(m)]) for r in members if find(r) == r
              and len(members[r]) > 1]
    return sorted(groups, key=lambda g: pos[id(g[0])])


def fuse_group(graph: Graph, group: list[Op]) -> Optional[Op]:
    """Replace `group` (in schedule order) by one FUSED_ELEMENTWISE op; None if nothing it
    computes is read (a dead group is left for graph.sort to drop)."""
    inside = {id(m) for m in group}
    outs = output_ids(graph)
    operands: list[Tensor] = []
    slot: dict[int, int] = {}
    for m in group:
        for t in m.inputs:
            if (t.producer is None or id(t.producer) not in inside) and id(t) not in slot:
                slot[id(t)] = len(operands)
                operands.append(t)
    n_in = len(operands)
    nodes: list[ExprNode] = []
    for m in group:
        if m.kind is OpKind.FUSED_ELEMENTWISE:  # an earlier group: inline its expression
            e = m.attrs.expr
            local = [slot[id(t)] for t in m.inputs]
            for n in e.nodes:
                nodes.append(ExprNode(n.kind, n.attrs, tuple(local[a] for a in n.args), n.dtype))
                local.append(n_in + len(nodes) - 1)
            for o, s in zip(m.outputs, e.outputs):
                slot[id(o)] = local[s]
        else:
            nodes.append(ExprNode(m.kind, m.attrs, tuple(slot[id(t)] for t in m.inputs), m.outputs[0].dtype))
            slot[id(m.outputs[0])] = n_in + len(nodes) - 1
    exported = [o for m in group for o in m.outputs
                if id(o) in outs or any(id(u) not in inside for u in o.users)]
    if not exported:
        return None
    expr = Expr(n_in, tuple(nodes), tuple(slot[id(o)] for o in exported))
    last = group[-1]
    new = fused_elementwise(operands, expr, name=f"fused_{last.name}" if last.name else None)
    for old, t in zip(exported, new):
        t.name = old.name
        graph.replace_all_uses(old, t)
    return new[0].producer
