"""Memory planning: every intermediate tensor gets an offset in one activation arena.

Over the schedule (graph.ops in order; step i runs graph.ops[i]) each tensor lives from the step
that writes it to the last step that reads it, both inclusive: an op reads its operands while it
writes its results, so an operand that dies at step i still overlaps the results born there.

Storage is shared in three ways before any offset is chosen:
- views: a RESHAPE moves no data, so its output lives in its input's bytes; chains of views resolve
  to the first tensor (the root), and the root's buffer lives until the last read of any view.
  A view class that touches a user buffer (graph input, constant, graph output) is not in the arena.
- in place: an element-wise op may write its result over an operand that dies at that op when the
  operand is not broadcast (same shape, same byte size), so element i is read before it is written.
  So may each member of a grouped element-wise op, over an operand no other member reads; never
  over an operand read through a strided view (element i of it is elsewhere).
- concat in place: when a concat's output Y is an intermediate whose parts are contiguous slices
  (every dim before the axis is a static 1, every part but the last has a static size, and each
  slice starts ALIGN-aligned), a computed part X_i gets no buffer of its own: its producer
  writes it straight into Y's bytes at its slice, and the concat copies only the other parts
  (graph inputs, constants, a part that is a view of a user buffer or already a slice of another
  concat), or nothing at all. Y's buffer then lives from the first of its parts' writes;
  concats nest (a part that is itself a concat places its own parts at its slice). In
  _concat_in_place.py.

Buffers are sized at the upper bound of every dynamic dim, rounded up to ALIGN bytes, so every
offset is ALIGN-aligned. Offsets come from several greedy heuristics (greedy by size first, as in
TFLite's and Pisarchyk & Lee's "greedy by size for offset calculation"); the smallest arena wins.
The result is graph.annotations["memory_plan"], a MemoryPlan; check_plan verifies one from the
graph alone, without trusting the planner's own bookkeeping.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from ..errors import AitgenError, MemoryPlanError, op_label
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.registry import Category, get_opdef
from ..options import CompileOptions
from ._concat_in_place import (class_strides, concat_slices, place_children, place_concat_parts, span,
                               strided_slices, strided_writer)

ALIGN = 64  # a cache line, and enough for AVX-512 and every GPU vector load


@dataclasses.dataclass(eq=False)  # identity: the planner removes merged buffers by identity
class Buffer:
    """One arena allocation: a root tensor, its views, and the results written over it in place."""
    tensors: list[Tensor]  # tensors[0] is the owner; every member has the same offset
    size: int              # bytes, a multiple of ALIGN
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


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def is_view(op: Op) -> bool:
    return _category(op) is Category.VIEW


def _category(op: Op) -> Optional[Category]:
    try:
        return get_opdef(op.kind).category
    except AitgenError:  # an op kind without a definition neither aliases nor works in place
        return None


# -- lifetimes --------------------------------------------------------------------------------

def _schedule(graph: Graph) -> tuple[dict[int, int], set[int]]:
    return {id(op): i for i, op in enumerate(graph.ops)}, {id(t) for t in graph.outputs.values()}


def _lifetime(t: Tensor, step: dict[int, int]) -> tuple[int, int]:
    born = step[id(t.producer)]
    # A result nobody reads (a split part, a dead second output) is still written: one step.
    return born, max([step[id(u)] for u in t.users if id(u) in step] + [born])


def _is_internal(t: Tensor, step: dict[int, int], outs: set[int]) -> bool:
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

def memory_planning(graph: Graph, opts: CompileOptions) -> Graph:
    """Plan the activation arena; the result is graph.annotations["memory_plan"]. Runs last:
    any pass after it that adds, removes or reorders ops would invalidate the plan."""
    graph.annotations["memory_plan"] = plan_memory(graph, opts.target)
    return graph


def plan_memory(graph: Graph, target: Optional[str] = None) -> MemoryPlan:
    """The plan; with a target, the parts of inner-axis concats whose producers the target's
    kernels write at strides are placed in the output too (else those concats copy every part)."""
    step, outs = _schedule(graph)
    aliases: dict[Tensor, Tensor] = {}
    view_copies: list[str] = []
    buf_of: dict[int, Buffer] = {}  # id(tensor) -> its arena buffer
    buffers: list[Buffer] = []
    for members in view_classes(graph).values():
        ext = [t for t in members if not _is_internal(t, step, outs)]
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
        spans = [_lifetime(t, step) for t in members]
        b = Buffer(list(members), max(align(t.nbytes_upper()) for t in members),
                   min(s for s, _ in spans), max(e for _, e in spans))
        buffers.append(b)
        for t in members:
            buf_of[id(t)] = b
            if t is not members[0]:
                aliases[t] = members[0]
    naive = sum(b.size for b in buffers)
    concat_in_place, strided = place_concat_parts(graph, buf_of, ALIGN, strided_writer(target) if target else None)

    in_place: list[tuple[str, Tensor, Tensor]] = []
    for i, op in enumerate(graph.ops):
        for operands, o, excluded in in_place_candidates(op):
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
    arena, strategy, tried = _best_offsets(roots)
    for b in roots:
        place_children(b)
    offsets = {t: b.offset for b in buffers for t in b.tensors}
    return MemoryPlan(offsets, arena, lower, naive, in_place, aliases, view_copies, roots,
                      strategy, tried, concat_in_place, strided)


def _viewed(inputs, attrs) -> set[int]:
    """ids of the operands read through a strided view (attrs.operand_views)."""
    views = getattr(attrs, "operand_views", None) or ()
    return {id(t) for t, v in zip(inputs, views) if v is not None}


def in_place_candidates(op: Op) -> list[tuple[list[Tensor], Tensor, set[int]]]:
    """(operands, result, ids of operands it may not overwrite) for each element-wise result of op
    that could be written over one of its operands: a single-output element-wise op, or each
    single-output member of a grouped element-wise op. Excluded: operands read through a view
    (element i is not where result element i goes) and, in a group, operands another member reads
    too (the members run in one loop, so that member may read the element after it is overwritten)."""
    if _category(op) is Category.ELEMENTWISE and len(op.outputs) == 1:
        return [(list(op.inputs), op.outputs[0], _viewed(op.inputs, op.attrs))]
    if op.kind is not OpKind.GROUPED or op.attrs.kind is not OpKind.FUSED_ELEMENTWISE:
        return []
    a = op.attrs
    reads: dict[int, int] = {}
    for ins in a.split(op.inputs):
        for t in {id(t) for t in ins}:
            reads[t] = reads.get(t, 0) + 1
    out = []
    for m, ins, outs in zip(a.members, a.split(op.inputs), a.split(op.outputs, outputs=True)):
        if len(outs) == 1:
            shared = {id(t) for t in ins if reads[id(t)] > 1}
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


# -- offsets ----------------------------------------------------------------------------------

Order = Callable[[list[Buffer]], list[int]]


def _by_size(bufs: list[Buffer]) -> list[int]:
    # Ties: the longer-lived buffer first, it constrains more of the schedule.
    return sorted(range(len(bufs)), key=lambda i: (-bufs[i].size, bufs[i].start - bufs[i].end, bufs[i].start))


def _by_breadth(bufs: list[Buffer]) -> list[int]:
    """Pisarchyk & Lee's greedy by breadth: the steps with the most live bytes first, and within a
    step its buffers largest first, so the peak is packed before anything fragments it."""
    steps = max((b.end for b in bufs), default=-1) + 1
    live: list[list[int]] = [[] for _ in range(steps)]
    for i, b in enumerate(bufs):
        for s in range(b.start, b.end + 1):
            live[s].append(i)
    width = [sum(bufs[i].size for i in ids) for ids in live]
    order: list[int] = []
    seen: set[int] = set()
    for s in sorted(range(steps), key=lambda s: (-width[s], s)):
        for i in sorted(live[s], key=lambda i: (-bufs[i].size, bufs[i].start)):
            if i not in seen:
                seen.add(i)
                order.append(i)
    return order


def _by_start(bufs: list[Buffer]) -> list[int]:
    # Allocation order, as a runtime allocator would see it: good when sizes are all alike.
    return sorted(range(len(bufs)), key=lambda i: (bufs[i].start, -bufs[i].size))


def _by_area(bufs: list[Buffer]) -> list[int]:
    return sorted(range(len(bufs)), key=lambda i: (-bufs[i].size * (bufs[i].end - bufs[i].start + 1), i))


ORDERS: dict[str, Order] = {"size": _by_size, "breadth": _by_breadth, "start": _by_start, "area": _by_area}


def _place(bufs: list[Buffer], order: list[int], best_fit: bool) -> list[int]:
    """Offsets for bufs, placed in `order`: each at the lowest gap (or, best_fit, the tightest gap)
    left by the already placed buffers whose lifetimes overlap it."""
    offsets = [0] * len(bufs)
    placed: list[int] = []
    for i in order:
        b = bufs[i]
        if b.size == 0:
            continue  # an empty tensor occupies no bytes; offset 0 overlaps nothing
        busy = sorted((offsets[j], offsets[j] + bufs[j].size) for j in placed
                      if bufs[j].start <= b.end and b.start <= bufs[j].end)
        cursor, pick, pick_gap = 0, None, None
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= b.size and (pick is None or gap < pick_gap):
                pick, pick_gap = cursor, gap
                if not best_fit:
                    break
            cursor = max(cursor, hi)
        offsets[i] = cursor if pick is None else pick
        placed.append(i)
    return offsets


def _best_offsets(bufs: list[Buffer]) -> tuple[int, str, dict[str, int]]:
    """Try every order with first and best fit; keep the smallest arena (ties: the earlier try).
    "sequential" (no reuse) is tried last so the arena never exceeds the naive sum."""
    tried: dict[str, int] = {}
    best: Optional[tuple[int, str, list[int]]] = None
    candidates = [(f"{name}/{fit}", order, fit == "best_fit") for name, order in ORDERS.items()
                  for fit in ("first_fit", "best_fit")]
    for label, order, best_fit in candidates + [("sequential", None, False)]:
        if order is None:
            offs, end = [], 0
            for b in bufs:
                offs.append(end)
                end += b.size
        else:
            offs = _place(bufs, order(bufs), best_fit)
        arena = max((o + b.size for o, b in zip(offs, bufs)), default=0)
        tried[label] = arena
        if best is None or arena < best[0]:
            best = (arena, label, offs)
    arena, label, offs = best
    for b, o in zip(bufs, offs):
        b.offset = o
    return arena, label, tried


# -- verification -----------------------------------------------------------------------------

def check_plan(graph: Graph, plan: MemoryPlan) -> None:
    """Raise MemoryPlanError unless `plan` is safe for `graph`.

    Recomputes lifetimes and view classes from the graph; from the plan it takes only offsets,
    sizes it claims and the in-place records, each of which it re-validates. Two view classes may
    share bytes while both live only when an in-place record hands one to the other at its last step.
    """
    step, outs = _schedule(graph)
    in_graph = {id(t) for t in graph.tensors}

    def fail(msg: str) -> None:
        raise MemoryPlanError(msg)

    for t, off in plan.offsets.items():
        if id(t) not in in_graph or not _is_internal(t, step, outs):
            fail(f"{t!r} is in the arena but is not an intermediate of this graph")
        if off < 0 or off % ALIGN:
            fail(f"{t!r} has offset {off}, not a non-negative multiple of {ALIGN}")
        if off + align(t.nbytes_upper()) > plan.arena_bytes:
            fail(f"{t!r} ends at {off + align(t.nbytes_upper())}, past the arena ({plan.arena_bytes} bytes)")

    units = []  # (members, offset, size, start, end) per view class in the arena
    unit_of: dict[int, int] = {}
    for members in view_classes(graph).values():
        placed = [t for t in members if t in plan.offsets]
        internal = all(_is_internal(t, step, outs) for t in members)
        if internal and len(placed) != len(members):
            missing = next(t for t in members if t not in plan.offsets)
            fail(f"intermediate {missing!r} has no offset in the arena")
        if not internal:
            if placed:
                fail(f"{placed[0]!r} is in the arena but is a view sharing a user buffer")
            continue
        if len({plan.offsets[t] for t in members}) != 1:
            fail(f"views of {members[0]!r} do not share its offset: " +
                 ", ".join(f"{t.name}@{plan.offsets[t]}" for t in members))
        spans = [_lifetime(t, step) for t in members]
        for t in members:
            unit_of[id(t)] = len(units)
        units.append((members, plan.offsets[members[0]], max(align(t.nbytes_upper()) for t in members),
                      min(s for s, _ in spans), max(e for _, e in spans)))

    # Concat slices: a part's unit lies at its slice of the output's unit and lives in its bytes.
    parent: dict[int, int] = {}
    for y, parts in plan.concat_in_place.items():
        op = y.producer
        if op is None or id(op) not in step or op.kind is not OpKind.CONCAT or id(y) not in unit_of:
            fail(f"concat record for {y!r}: not the output of a concat in the arena")
        deltas = concat_slices(op, ALIGN)
        layout = None
        if deltas is None and strided_slices(op, ALIGN) is not None:
            layout, deltas = strided_slices(op, ALIGN)
        for i, delta in parts.items():
            x = op.inputs[i] if 0 <= i < len(op.inputs) else None
            if deltas is None or x is None or deltas[i] != delta or id(x) not in unit_of:
                fail(f"concat {op_label(op)}: part {i} is not a contiguous aligned slice at byte {delta}")
            if layout is not None:
                members = units[unit_of[id(x)]][0]
                want = class_strides(members, x, op, layout)
                if want is None or any(plan.strided_writes.get(t) != st for t, st in want.items()):
                    fail(f"concat {op_label(op)}: part {i} ({x!r}) is not written alone at the output's strides")
            u, v = unit_of[id(x)], unit_of[id(y)]
            if u in parent or u == v:
                fail(f"concat {op_label(op)}: part {i} ({x!r}) is placed twice")
            if units[u][1] != units[v][1] + delta or units[u][1] + units[u][2] > units[v][1] + units[v][2]:
                fail(f"concat {op_label(op)}: part {i} ({x!r}) is not at its slice of {y!r}")
            parent[u] = v
    placed = {id(t) for y, parts in plan.concat_in_place.items() for i in parts
              for t in units[unit_of[id(y.producer.inputs[i])]][0]}
    for x in plan.strided_writes:
        if id(x) not in placed:
            fail(f"{x!r} is recorded as written at strides but is no concat part placed in place")

    def root(u: int) -> int:
        while u in parent:
            u = parent[u]
        return u

    life: dict[int, tuple[int, int]] = {}  # root unit -> first write, last read of it and its slices
    for u, unit in enumerate(units):
        r = root(u)
        lo, hi = life.get(r, (unit[3], unit[4]))
        life[r] = (min(lo, unit[3]), max(hi, unit[4]))
    units = [(m, off, size, *life[u]) if u not in parent else (m, off, 0, st, en)
             for u, (m, off, size, st, en) in enumerate(units)]  # a slice is checked through its root

    handoffs: set[tuple[int, int]] = set()
    for name, frm, to in plan.in_place:
        op = to.producer  # names are not unique before name_graph; the result knows its op
        if op is None or id(op) not in step or (op.name or op_label(op)) != name or \
                not any(o is to and any(x is frm for x in ins) and id(frm) not in excl
                        for ins, o, excl in in_place_candidates(op)):
            fail(f"in-place record ({name}, {frm!r}, {to!r}) is not an element-wise op writing over its operand")
        if id(frm) not in unit_of or id(to) not in unit_of:
            fail(f"in-place record ({name}): {frm!r} or {to!r} is not in the arena")
        a, b = unit_of[id(frm)], unit_of[id(to)]
        if tuple(frm.shape) != tuple(to.shape) or frm.nbytes_upper() != to.nbytes_upper():
            fail(f"in-place op {name}: {frm!r} is broadcast or differs in size from {to!r}")
        if units[a][4] != step[id(op)]:
            fail(f"in-place op {name}: {frm!r} (or a view of it) is still read at step {units[a][4]}")
        if units[a][1] != units[b][1]:
            fail(f"in-place op {name}: {to!r} is not at the offset of {frm!r}")
        handoffs.add((a, b))

    # Sweep by start step: a unit can only clash with units that started before it and live on.
    order = sorted(range(len(units)), key=lambda u: units[u][3])
    active: list[int] = []
    for u in order:
        mu, ou, su, start, end = units[u]
        active = [v for v in active if units[v][4] >= start]
        for v in active:
            mv, ov, sv = units[v][0], units[v][1], units[v][2]
            if su and sv and ou < ov + sv and ov < ou + su and (v, u) not in handoffs:
                fail(f"{mu[0]!r} at [{ou}, {ou + su}) and {mv[0]!r} at [{ov}, {ov + sv}) overlap in memory "
                     f"while both are live (steps {start}..{end} and {units[v][3]}..{units[v][4]})")
        active.append(u)
    if not plan.lower_bound_bytes <= plan.arena_bytes:
        fail(f"arena {plan.arena_bytes} is below the claimed lower bound {plan.lower_bound_bytes}")
