"""Arena offsets for planned buffers: several greedy orders, first and best fit; the smallest arena wins."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from .plan import Buffer

Order = Callable[[list["Buffer"]], list[int]]


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


def best_offsets(bufs: list[Buffer]) -> tuple[int, str, dict[str, int]]:
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
