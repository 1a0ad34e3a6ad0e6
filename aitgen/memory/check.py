"""check_plan: verify a MemoryPlan from the graph alone, without trusting the planner's bookkeeping."""
from __future__ import annotations

from ..errors import MemoryPlanError, op_label
from ..ir.graph import Graph
from ..ir.op import OpKind
from .concat import class_strides, concat_slices, strided_slices
from .plan import MemoryPlan, align, in_place_candidates, is_internal, lifetime, schedule, view_classes


def check_plan(graph: Graph, plan: MemoryPlan) -> None:
    """Raise MemoryPlanError unless `plan` is safe for `graph`.

    Recomputes lifetimes and view classes from the graph; from the plan it takes only offsets,
    sizes it claims and the in-place records, each of which it re-validates. Two view classes may
    share bytes while both live only when an in-place record hands one to the other at its last step.
    """
    step, outs = schedule(graph)
    in_graph = {id(t) for t in graph.tensors}

    def fail(msg: str) -> None:
        raise MemoryPlanError(msg)

    for t, off in plan.offsets.items():
        if id(t) not in in_graph or not is_internal(t, step, outs):
            fail(f"{t!r} is in the arena but is not an intermediate of this graph")
        if off < 0 or off % plan.alignment:
            fail(f"{t!r} has offset {off}, not a non-negative multiple of {plan.alignment}")
        end = off + align(t.nbytes_upper(), plan.alignment)
        if end > plan.arena_bytes:
            fail(f"{t!r} ends at {end}, past the arena ({plan.arena_bytes} bytes)")

    units = []  # (members, offset, size, start, end) per view class in the arena
    unit_of: dict[int, int] = {}
    for members in view_classes(graph).values():
        placed = [t for t in members if t in plan.offsets]
        internal = all(is_internal(t, step, outs) for t in members)
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
        spans = [lifetime(t, step) for t in members]
        for t in members:
            unit_of[id(t)] = len(units)
        units.append((members, plan.offsets[members[0]], max(align(t.nbytes_upper(), plan.alignment) for t in members),
                      min(s for s, _ in spans), max(e for _, e in spans)))

    # Concat slices: a part's unit lies at its slice of the output's unit and lives in its bytes.
    parent: dict[int, int] = {}
    for y, parts in plan.concat_in_place.items():
        op = y.producer
        if op is None or id(op) not in step or op.kind is not OpKind.CONCAT or id(y) not in unit_of:
            fail(f"concat record for {y!r}: not the output of a concat in the arena")
        deltas = concat_slices(op, plan.alignment)
        layout = None
        if deltas is None and strided_slices(op, plan.alignment) is not None:
            layout, deltas = strided_slices(op, plan.alignment)
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
    # a view and its base are one storage unit: a group member reading either reads the other's bytes
    storage = lambda t: ("unit", unit_of[id(t)]) if id(t) in unit_of else ("tensor", id(t))  # noqa: E731
    for name, frm, to in plan.in_place:
        op = to.producer  # names are not unique before name_graph; the result knows its op
        if op is None or id(op) not in step or (op.name or op_label(op)) != name or \
                not any(o is to and any(x is frm for x in ins) and id(frm) not in excl
                        for ins, o, excl in in_place_candidates(op, storage)):
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
