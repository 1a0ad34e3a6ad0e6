"""plan_memory(graph, caps) -> MemoryPlan: every intermediate tensor gets an offset in one arena.

The stage after the pass pipeline (compile_model calls it on the final graph, whose schedule and
names it needs); lowering and the program read the plan it returns. The method is in this
package's docstring; the offsets' heuristics are in offsets.py, concats placed in place in
concat.py, and check_plan (check.py) verifies a plan from the graph alone.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..capabilities import Capabilities
from ..errors import AitgenError, MemoryPlanError, op_label
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.registry import Category, get_opdef
from ..ops.operand_views import is_constant_prefix
from .concat import place_children, place_concat_parts, span, strided_writer
from .offsets import best_offsets

ALIGN = 64  # without a target's capabilities: a cache line, one AVX-512 vector


@dataclasses.dataclass(eq=False)  # identity: the planner removes merged buffers by identity
class Buffer:
    """One arena allocation: a root tensor, its views, and the results written over it in place."""
    tensors: list[Tensor]  # tensors[0] is the owner; every member has the same offset
    size: int              # bytes, a multiple of the plan's alignment
    start: int             # first step that writes it
    end: int               # last step that reads any member
    offset: int = 0
    parent: "Optional[Buffer]" = None  # a concat's slice: it lives in parent's bytes at delta
    delta: int = 0
    children: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class MemoryPlan:
    """Where each intermediate lives. Keys are the graph's own Tensor objects (hashed by identity);
    offsets_by_name() gives the name-keyed view that code generation writes out."""
    offsets: dict[Tensor, int]
    arena_bytes: int
    lower_bound_bytes: int   # max over steps of the bytes live at once (shared storage counted once)
    naive_bytes: int         # one buffer per root tensor (views are not buffers), no reuse at all
    in_place: list[tuple[str, Tensor, Tensor]]  # (op name, operand taken over, result written there)
    aliases: dict[Tensor, Tensor]  # tensor -> the tensor whose storage it uses (views; user buffers)
    view_copies: list[str]   # views that must copy: a second user buffer in one view class
    buffers: list[Buffer]
    strategy: str            # the heuristic that gave the arena
    arena_by_strategy: dict[str, int]
    # concat output -> {operand index: byte offset in it} for the parts its producers write in
    # place (the concat's kernel copies only the others); their tensors' offsets say the same.
    concat_in_place: dict[Tensor, dict[int, int]] = dataclasses.field(default_factory=dict)
    # a part of an inner-axis concat -> its element strides there (its producer writes it so)
    strided_writes: dict[Tensor, tuple] = dataclasses.field(default_factory=dict)
    alignment: int = ALIGN   # every offset and buffer size is a multiple of it (caps.alignment)

    def offsets_by_name(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t, off in self.offsets.items():
            if t.name is None or t.name in out:
                raise MemoryPlanError(f"tensor {t!r} has no unique name; run name_graph before codegen")
            out[t.name] = off
        return out

    def external(self, t: Tensor) -> Optional[Tensor]:
        """The user buffer (input, constant or output) a non-arena tensor lives in, else None."""
        return None if t in self.offsets else self.aliases.get(t, t)


def align(n: int, alignment: int = ALIGN) -> int:
    return -(-n // alignment) * alignment


def is_view(op: Op) -> bool:
    """Whether op's result is its operand's bytes (no kernel): a reshape, or a constant's prefix."""
    return _category(op) is Category.VIEW or is_constant_prefix(op)


def _category(op: Op) -> Optional[Category]:
    try:
        return get_opdef(op.kind).category
    except AitgenError:  # an op kind without a definition neither aliases nor works in place
        return None


# -- lifetimes --------------------------------------------------------------------------------

def schedule(graph: Graph) -> tuple[dict[int, int], set[int]]:
    return {id(op): i for i, op in enumerate(graph.ops)}, {id(t) for t in graph.outputs.values()}


def lifetime(t: Tensor, step: dict[int, int]) -> tuple[int, int]:
    born = step[id(t.producer)]
    # A result nobody reads (a split part, a dead second output) is still written: one step.
    return born, max([step[id(u)] for u in t.users if id(u) in step] + [born])


def is_internal(t: Tensor, step: dict[int, int], outs: set[int]) -> bool:
    return t.producer is not None and id(t.producer) in step and id(t) not in outs


def view_classes(graph: Graph) -> dict[int, list[Tensor]]:
    """id(root) -> [root, views of it...] in schedule order, for every tensor the graph holds."""
    root: dict[int, Tensor] = {}
    classes: dict[int, list[Tensor]] = {}
    for t in graph.tensors:
        if t.producer is None:
            root[id(t)] = t
            classes[id(t)] = [t]
    for op in graph.ops:  # toposorted: a view's input has its root already
        for o in op.outputs:
            r = root.get(id(op.inputs[0]), op.inputs[0]) if is_view(op) else o
            root[id(o)] = r
            classes.setdefault(id(r), []).append(o)
    return classes


# -- planning ---------------------------------------------------------------------------------

def plan_memory(graph: Graph, caps: Optional[Capabilities] = None) -> MemoryPlan:
    """The plan of a graph after the pipeline. With the target's capabilities, the parts of
    inner-axis concats whose producers its kernels write at strides (caps.strided_output) are
    placed in the output too; without them those concats copy every part."""
    alignment = caps.alignment if caps is not None else ALIGN
    step, outs = schedule(graph)
    aliases: dict[Tensor, Tensor] = {}
    view_copies: list[str] = []
    buf_of: dict[int, Buffer] = {}  # id(tensor) -> its arena buffer
    buffers: list[Buffer] = []
    for members in view_classes(graph).values():
        ext = [t for t in members if not is_internal(t, step, outs)]
        if ext:
            # The class lives in a user buffer: the root's if it is one (an input, a constant, an
            # output), else the first output among the views. Any other user buffer in the class
            # is a separate allocation the caller owns, so the view producing it must copy.
            anchor = ext[0]
            for t in members:
                if t in ext and t is not anchor:
                    view_copies.append(t.producer.name or op_label(t.producer))
                elif t is not anchor:
                    aliases[t] = anchor
            continue
        spans = [lifetime(t, step) for t in members]
        b = Buffer(list(members), max(align(t.nbytes_upper(), alignment) for t in members),
                   min(s for s, _ in spans), max(e for _, e in spans))
        buffers.append(b)
        for t in members:
            buf_of[id(t)] = b
            if t is not members[0]:
                aliases[t] = members[0]
    naive = sum(b.size for b in buffers)
    writer = strided_writer(caps) if caps is not None else None
    concat_in_place, strided = place_concat_parts(graph, buf_of, alignment, writer)

    in_place: list[tuple[str, Tensor, Tensor]] = []
    for i, op in enumerate(graph.ops):
        storage = lambda t: id(buf_of[id(t)]) if id(t) in buf_of else id(t)  # noqa: E731 - views share one
        for operands, o, excluded in in_place_candidates(op, storage):
            bo = buf_of.get(id(o))
            if bo is None or bo.parent is not None or bo.children:
                continue
            for x in operands:
                bx = buf_of.get(id(x))
                if id(x) in excluded:
                    continue
                # bx.end == i: this op is the last reader of x and of every view sharing x's bytes.
                # A concat's buffer or slice keeps its bytes: the concat's reader sees them all.
                if (bx is None or bx is bo or bx.end != i or bx.size < bo.size or bx.parent is not None
                        or bx.children or x.nbytes_upper() != o.nbytes_upper() or tuple(x.shape) != tuple(o.shape)):
                    continue
                bx.tensors += bo.tensors
                bx.end = bo.end
                for t in bo.tensors:
                    buf_of[id(t)] = bx
                buffers.remove(bo)
                in_place.append((op.name or op_label(op), x, o))
                break

    roots = [b for b in buffers if b.parent is None]
    for b in roots:  # a root holds its slices' bytes from the first one's write on
        b.start, b.end = span(b)
    lower = _lower_bound(roots, len(graph.ops))
    arena, strategy, tried = best_offsets(roots)
    for b in roots:
        place_children(b)
    offsets = {t: b.offset for b in buffers for t in b.tensors}
    return MemoryPlan(offsets, arena, lower, naive, in_place, aliases, view_copies, roots,
                      strategy, tried, concat_in_place, strided, alignment)


def _viewed(inputs, attrs) -> set[int]:
    """ids of the operands read through a strided view (attrs.operand_views)."""
    views = getattr(attrs, "operand_views", None) or ()
    return {id(t) for t, v in zip(inputs, views) if v is not None}


def in_place_candidates(op: Op, storage=id) -> list[tuple[list[Tensor], Tensor, set[int]]]:
    """(operands, result, ids of operands it may not overwrite) for each element-wise result of op
    that could be written over one of its operands: a single-output element-wise op, or each
    single-output member of a grouped element-wise op. Excluded: operands read through a view
    (element i is not where result element i goes) and, in a group, operands another member reads
    too (the members run in one loop, so that member may read the element after it is overwritten).
    `storage(t)` names the bytes t lives in: the planner passes its buffers, so that a member reading
    a reshape view of another member's operand counts as reading that operand (a Det expansion
    once lost a term to this)."""
    if _category(op) is Category.ELEMENTWISE and len(op.outputs) == 1:
        return [(list(op.inputs), op.outputs[0], _viewed(op.inputs, op.attrs))]
    if op.kind is not OpKind.GROUPED or op.attrs.kind is not OpKind.FUSED_ELEMENTWISE:
        return []
    a = op.attrs
    reads: dict[int, int] = {}
    for ins in a.split(op.inputs):
        for k in {storage(t) for t in ins}:
            reads[k] = reads.get(k, 0) + 1
    out = []
    for m, ins, outs in zip(a.members, a.split(op.inputs), a.split(op.outputs, outputs=True)):
        if len(outs) == 1:
            shared = {id(t) for t in ins if reads[storage(t)] > 1}
            out.append((ins, outs[0], _viewed(ins, m.attrs) | shared))
    return out


def _lower_bound(buffers: list[Buffer], steps: int) -> int:
    delta = [0] * (steps + 2)
    for b in buffers:
        delta[b.start] += b.size
        delta[b.end + 1] -= b.size
    best = live = 0
    for d in delta:
        live += d
        best = max(best, live)
    return best
