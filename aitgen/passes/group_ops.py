"""group_ops: independent ops of one kind become one GROUPED op, one kernel (horizontal fusion).

A multi-tower model runs several GEMMs that do not depend on each other (each tower's first
Linear, then each second one), a multi-branch block several layernorms or element-wise groups.
Each is a launch of its own; as a group they are one (aitgen/ops/grouped.py): a grouped GEMM, one
parallel loop over every member's rows (layernorm) or elements (element-wise).

What groups (the class of an op; only ops of one class group):
- GEMM: the same dtype, layout, bias or not, epilogue expression, and M (the rows: the leading
  dims' product, the same polynomial), the problem size that varies at run time; K and N may
  differ. The epilogue's operands are each member's own.
- LAYERNORM / RMSNORM without a prologue: the same dtype, weight and bias or not; any row count
  and length, any eps.
- element-wise ops and fused element-wise groups: any (each member keeps its expression; a lone
  op joins as a one-node expression).

Independence: two members may share no path in the DAG, and the graph with each group contracted
to one node must stay acyclic (two groups whose members feed each other crosswise would be a
cycle although each group's members are independent). Candidates are taken in schedule order and
join the first group of their class they can; ancestor bitsets rule out the dependent pairs
cheaply, and a search in the contracted graph confirms the rest.

Memory traffic does not change: each member reads its operands and writes its results once, as
it did alone; only the launch is shared. (Lifetimes may: the members now run at one step.)

A backend renders a group only for the member kinds its GROUPED lowering declares
(opts.caps.grouped); for any other kind, or with opts.fusion False, the
pass changes nothing. Runs after every vertical fusion (the groups are of final kernels, and a
grouped op absorbs no epilogue or prologue) and before name_graph.
"""
from __future__ import annotations

from typing import Hashable, Optional

from ..capabilities import caps_of
from ..errors import AitgenError
from ..ir.dims import prod
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ops.fused import FusedElementwiseAttrs, single_op_expr
from ..ops.grouped import MAX_MEMBERS, grouped
from ..ops.registry import Category, get_opdef
from ..options import CompileOptions

ELEMENTWISE = OpKind.FUSED_ELEMENTWISE  # the member kind of element-wise groups


def group_class(op: Op) -> Optional[tuple[OpKind, Hashable]]:
    """(member kind, class key) of an op that may be grouped, else None."""
    try:
        category = get_opdef(op.kind).category
    except AitgenError:
        return None
    if op.kind is OpKind.GEMM:
        a, out = op.attrs, op.outputs[0]
        m = prod(out.shape[:-1])
        ep = getattr(a, "epilogue", None)
        return OpKind.GEMM, (out.dtype, a.trans_a, a.trans_b, len(op.inputs) - (ep.num_extra if ep else 0),
                             str(ep) if ep else None, str(m))
    if op.kind in (OpKind.LAYERNORM, OpKind.RMSNORM):
        if getattr(op.attrs, "prologue", None) is not None:
            return None
        return op.kind, (op.outputs[0].dtype, len(op.inputs))
    if category is Category.ELEMENTWISE:
        return ELEMENTWISE, ()
    return None


def group_ops(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    renders = caps_of(opts).grouped
    classes: dict[tuple, list[Op]] = {}
    for op in graph.ops:
        c = group_class(op)
        if c is not None and c[0] in renders:
            classes.setdefault(c, []).append(op)
    candidates = [ops for ops in classes.values() if len(ops) > 1]
    if not candidates:
        return graph
    groups = partition_independent(graph, candidates)
    for (kind, _), members in groups:
        _replace(graph, kind, members)
    graph.sort()
    return graph


def partition_independent(graph: Graph, classes: list[list[Op]]) -> list[tuple[tuple, list[Op]]]:
    """Groups of two or more ops of one class (each class in schedule order) such that no member
    reaches another and the graph with every group contracted stays acyclic."""
    ops = graph.ops
    index = {id(op): i for i, op in enumerate(ops)}
    anc = [0] * len(ops)  # bit j set: ops[j] is an ancestor (a path ops[j] -> ... -> op exists)
    for i, op in enumerate(ops):
        bits = 0
        for t in op.inputs:
            p = t.producer
            if p is not None and id(p) in index:
                j = index[id(p)]
                bits |= anc[j] | (1 << j)
        anc[i] = bits
    parent = list(range(len(ops)))
    members: dict[int, list[int]] = {i: [i] for i in range(len(ops))}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # Per group: its members' readers (op indices; the union on a merge) and, as bitsets, its
    # members and their ancestors. Recomputing these from the member lists on every step of the
    # search made a long chain (an unrolled RNN: thousands of ops, two independent directions)
    # cubic: 400 s for a 256-step bidirectional LSTM.
    readers: dict[int, set[int]] = {
        i: {index[id(u)] for o in op.outputs for u in o.users if id(u) in index} for i, op in enumerate(ops)}
    writers: dict[int, set[int]] = {
        i: {index[id(t.producer)] for t in op.inputs if t.producer is not None and id(t.producer) in index}
        for i, op in enumerate(ops)}
    member_bits: dict[int, int] = {i: 1 << i for i in range(len(ops))}
    member_anc: dict[int, int] = dict(enumerate(anc))

    def succ(root: int) -> set[int]:
        return {find(j) for j in readers[root]} - {root}

    def pred(root: int) -> set[int]:
        return {find(j) for j in writers[root]} - {root}

    def closure(start: int, step) -> set[int]:
        """The groups reachable from `start` along `step` (one edge or more)."""
        stack, seen = list(step(start)), set()
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(step(n))
        return seen

    found: list[tuple[tuple, list[int]]] = []
    for cls in classes:
        key = group_class(cls[0])
        open_groups: list[int] = []  # roots
        for op in cls:
            i = index[id(op)]
            linked = None  # groups with a path to or from i; the graph changes only on a merge, then we stop
            for g in open_groups:
                if len(members[g]) >= MAX_MEMBERS:
                    continue
                if anc[i] & member_bits[g] or member_anc[g] >> i & 1:
                    continue  # a path in the graph as it was: never independent
                if linked is None:
                    linked = closure(i, succ) | closure(i, pred)
                if g in linked:
                    continue  # a path through groups formed before
                parent[i] = g
                members[g] += members.pop(i)
                readers[g] |= readers.pop(i)
                writers[g] |= writers.pop(i)
                member_bits[g] |= member_bits.pop(i)
                member_anc[g] |= member_anc.pop(i)
                break
            else:
                open_groups.append(i)
        found += [(key, members[g]) for g in open_groups if len(members[g]) > 1]
    return [(key, sorted((ops[m] for m in ms), key=lambda o: index[id(o)])) for key, ms in found]


def _replace(graph: Graph, kind: OpKind, group: list[Op]) -> None:
    spec = []
    for op in group:
        attrs = op.attrs
        if kind is ELEMENTWISE and op.kind is not OpKind.FUSED_ELEMENTWISE:
            attrs = FusedElementwiseAttrs(single_op_expr(op))
        spec.append((op.inputs, attrs))
    first = group[0]
    results = grouped(kind, spec, name=f"grouped_{first.name}" if first.name else None)
    for op, new in zip(group, results):
        for old, t in zip(op.outputs, new):
            t.name = old.name
            graph.replace_all_uses(old, t)
    for op in group:  # dead now: readers must not list them (graph.sort drops them)
        for t in op.inputs:
            t.users = [u for u in t.users if u is not op]
