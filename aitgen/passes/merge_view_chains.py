"""merge_view_chains: a chain of reshapes and permutes becomes at most reshape -> permute -> reshape.

Importers write layout changes as the source framework spelt them, and a pair that undoes itself
across a reshape survives sink_permutes (which cancels permutes that meet directly). ViT exported
to ONNX is the common case: the importer's NHWC -> NCHW permute after the patch conv, then
flatten(2) and transpose(1, 2):

    conv [B,h,w,E] -> permute(0,3,1,2) -> reshape [B,E,h*w] -> permute(0,2,1) -> [B,h*w,E]

which moves every element back where it was: the whole chain is reshape(conv, [B,h*w,E]), a view
that costs nothing, as in the zoo's native ViT. nn.MultiheadAttention's q/k/v split exported to
ONNX (reshape, unsqueeze, a 5-D transpose, squeeze) becomes one 3-D permute between reshapes.

How: the chain's input dims are cut into *atoms*, the finest pieces that every reshape in the
chain only groups or splits (a reshape [B,E,h*w] of [B,E,h,w] merges atoms h and w; one of
[B,48] to [B,3,16] splits atom 48). Each permute reorders atoms, each reshape regroups them, so
the chain's result is the input's atoms in some order, grouped: reshape(permute(reshape(x, atoms),
order), result shape). Atoms that stay neighbours in the same order are merged. The other
candidate is the chain itself with consecutive reshapes (and permutes) as one: torch's MHA head
split, slice -> reshape [S, B*H, D] -> reshape [S, B, H, D] -> permute, then becomes a reshape
that fuse_memory_ops can compose with the slice's strides (the middle shape has none). The chain
is rewritten as the candidate with the fewest permutes, then ops, when it beats the original. Size-1 dims carry no atom.
Sizes may be symbolic (dims.exact_div splits B*16 into B and 16 exactly). A reshape that would
cut an atom unevenly (reshape [6, 4] -> [4, 6] around a permute) leaves the chain as it is.

Only chains whose inner tensors have one reader (and are not outputs) are merged. Exact: the
same elements in the same places.

Runs after fuse_attention, which matches the head split/merge permutes where the model put them,
and before sink_reshapes and fuse_memory_ops, which fold what is left into strided reads.
"""
from __future__ import annotations

from typing import Optional

from ..ir.dims import Dim, IntImm
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops import view as view_ops
from ..options import CompileOptions
from ._util import output_ids

_VIEWS = (OpKind.RESHAPE, OpKind.PERMUTE)


def merge_view_chains(graph: Graph, opts: CompileOptions) -> Graph:
    outs = output_ids(graph)
    changed = False
    for op in list(graph.ops):
        if op.kind not in _VIEWS or _inner(op.outputs[0], outs):
            continue  # not the end of a chain
        chain = [op]
        while True:
            src = chain[0].inputs[0]
            if src.producer is None or src.producer.kind not in _VIEWS or not _inner(src, outs):
                break
            chain.insert(0, src.producer)
        if len(chain) < 2:
            continue
        if _rewrite(graph, chain, outs):
            changed = True
    if changed:
        graph.sort()
    return graph


def _inner(t: Tensor, outs: set[int]) -> bool:
    """t is read by exactly one view op and is no graph output: the chain goes on past it."""
    return len(t.users) == 1 and t.users[0].kind in _VIEWS and id(t) not in outs


def _rewrite(graph: Graph, chain: list[Op], outs: set[int]) -> bool:
    x, z = chain[0].inputs[0], chain[-1].outputs[0]
    old = [(o.kind, o.attrs.perm if o.kind is OpKind.PERMUTE else tuple(o.outputs[0].shape)) for o in chain]
    best = old
    for steps in (_atom_steps(x, z, chain), _collapsed(x, old)):  # on a tie, the atoms (lower rank)
        if steps is not None and _cost(steps) < _cost(best):
            best = steps
    if best is old:
        return False
    name = chain[-1].name
    t = x
    for kind, arg in best:
        if kind is OpKind.PERMUTE:
            t = view_ops.permute(t, list(arg), name=name)
        else:
            t = view_ops.reshape(t, list(arg), name=name)
    if t is x and id(z) in outs and x.producer is None:
        return False  # an output may not become an input or a constant (the runtime copies those)
    if t is not x:
        t.name = z.name
    graph.replace_all_uses(z, t)
    if id(z) in outs:
        outs.discard(id(z))
        outs.add(id(t))
    return True


def _cost(steps) -> tuple[int, int]:
    """Permutes first (each a copy unless a later pass folds it), then ops."""
    return sum(k is OpKind.PERMUTE for k, _ in steps), len(steps)


def _collapsed(x: Tensor, steps):
    """The chain with consecutive reshapes as one, consecutive permutes as one, and no-op steps
    dropped, until nothing changes. Fewer reshapes also give fuse_memory_ops fewer intermediate
    shapes, each of which must be a view of its source: slice -> reshape [S, B*H, D] -> reshape
    [S, B, H, D] (torch's MHA) has a middle shape no strides describe, the direct reshape has one."""
    while True:
        out: list = []
        cur = tuple(x.shape)
        for kind, arg in steps:
            if kind is OpKind.PERMUTE:
                nxt = tuple(cur[i] for i in arg)
                if out and out[-1][0] is OpKind.PERMUTE:  # permute(permute(x, p1), p2) = permute(x, p1[p2])
                    prev = out.pop()[1]
                    arg = tuple(prev[i] for i in arg)
                if list(arg) == list(range(len(arg))):
                    cur = nxt
                    continue
            else:
                nxt = tuple(arg)
                if out and out[-1][0] is OpKind.RESHAPE:
                    out.pop()
            out.append((kind, arg))
            cur = nxt
        # a reshape to the shape its input already has is nothing
        kept, cur = [], tuple(x.shape)
        for kind, arg in out:
            nxt = tuple(cur[i] for i in arg) if kind is OpKind.PERMUTE else tuple(arg)
            if not (kind is OpKind.RESHAPE and _same(nxt, cur)):
                kept.append((kind, arg))
            cur = nxt
        if kept == list(steps):
            return kept
        steps = kept


def _atom_steps(x: Tensor, z: Tensor, chain: list[Op]):
    plan = _atoms(x, chain)
    if plan is None:
        return None
    shape, order = plan
    if order == list(range(len(order))):
        return [] if _same(x.shape, z.shape) else [(OpKind.RESHAPE, tuple(z.shape))]
    steps = []
    if not _same(shape, x.shape):
        steps.append((OpKind.RESHAPE, tuple(shape)))
    steps.append((OpKind.PERMUTE, tuple(order)))
    if not _same([shape[i] for i in order], z.shape):
        steps.append((OpKind.RESHAPE, tuple(z.shape)))
    return steps


def _same(a, b) -> bool:
    return len(a) == len(b) and all(p == q for p, q in zip(a, b))


def _atoms(x: Tensor, chain: list[Op]) -> Optional[tuple[list[Dim], list[int]]]:
    """(grouped atom shape of x, permutation of those groups) that the chain amounts to, or None."""
    size: list[Dim] = []
    base: list[int] = []      # x's atoms in memory order
    axes: list[list[int]] = []  # the current tensor's atoms, per axis

    def new(d: Dim) -> int:
        size.append(d)
        return len(size) - 1

    for d in x.shape:
        if d.is_static and d.value == 1:
            axes.append([])
        else:
            a = new(d)
            base.append(a)
            axes.append([a])
    for op in chain:
        if op.kind is OpKind.PERMUTE:
            axes = [axes[i] for i in op.attrs.perm]
            continue
        flat = [a for ax in axes for a in ax]
        axes, ptr = [], 0
        for target in op.outputs[0].shape:
            if target.is_static and target.value == 1:
                axes.append([])
                continue
            group: list[int] = []
            got: Dim = IntImm(1)
            while not got == target:
                need = target.exact_div(got)
                if need is None or ptr >= len(flat):
                    return None
                a = flat[ptr]
                if need.exact_div(size[a]) is not None:      # the whole atom fits
                    group.append(a)
                    got = got * size[a]
                    ptr += 1
                    continue
                lo = size[a].exact_div(need)
                if lo is None:
                    return None  # the reshape cuts the atom unevenly
                hi_id, lo_id = new(need), new(lo)             # split: outer part first
                i = base.index(a)
                base[i:i + 1] = [hi_id, lo_id]
                flat[ptr:ptr + 1] = [hi_id, lo_id]
            axes.append(group)
        if ptr != len(flat):
            return None
    final = [a for ax in axes for a in ax]
    if sorted(final) != sorted(base):
        return None
    # Merge atoms that are neighbours, in the same order, both in x and in the result.
    where = {a: i for i, a in enumerate(final)}
    groups: list[list[int]] = []
    for a in base:
        if groups and where[a] == where[groups[-1][-1]] + 1:
            groups[-1].append(a)
        else:
            groups.append([a])
    shape: list[Dim] = []
    for g in groups:
        d: Dim = IntImm(1)
        for a in g:
            d = d * size[a]
        shape.append(d)
    order = sorted(range(len(groups)), key=lambda i: where[groups[i][0]])
    return shape, order
