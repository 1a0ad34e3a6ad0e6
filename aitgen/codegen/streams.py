"""Multi-stream scheduling of the run sequence (CUDA, `compile_model(..., streams=N)`, off by default).

Kernel calls that touch disjoint bytes may run at once: independent branches of a multi-tower or
Inception-like model, parallel attention groups. Each call gets one of N streams; a call that must
follow a call on another stream waits on an event recorded after it.

Dependencies are between bytes, not tensors: call j depends on an earlier call i when one of j's
operand ranges overlaps one of i's and either writes it (read after write, write after read,
write after write). The memory plan reuses arena bytes for tensors whose lifetimes do not overlap
in the sequential order; a reuse is then a write-after-read dependency, so two kernels never use
the same bytes at once, whatever the plan did, at the price of some concurrency where it reused.
User buffers (inputs, outputs, constants) count as whole buffers.

Assignment, in sequence order: a call continues the stream whose last call it depends on (the
latest such, so a chain stays on one stream and needs no event); a call that continues none takes
a stream that has had no call yet, else the one whose last call is earliest. Waits are pruned by
vector clocks: a wait already implied by an earlier wait is not emitted.

Stream 0 is the runtime's own stream; the run starts the others after it (fork) and ends with
stream 0 waiting for each of them (join), so a run is still complete when it returns.
"""
from __future__ import annotations

import dataclasses
from typing import Hashable, Optional, Sequence

# Tests set it to plant a missing wait in the next builds (tests/backends/cuda/mock/test_mock_streams.py).
PLANT_DROP_WAIT = False

# (buffer, first byte, end byte, written)
Access = tuple[Hashable, int, int, bool]


@dataclasses.dataclass
class Schedule:
    stream: list[int]              # per call
    waits: list[list[int]]         # per call: event ids to wait on before it
    record: list[Optional[int]]    # per call: event id to record after it, or None
    num_streams: int
    num_events: int


def _conflict(a: Sequence[Access], b: Sequence[Access]) -> bool:
    for buf, lo, hi, w in a:
        for buf2, lo2, hi2, w2 in b:
            if buf == buf2 and lo < hi2 and lo2 < hi and (w or w2):
                return True
    return False


def schedule(accesses: Sequence[Sequence[Access]], num_streams: int, drop_wait: bool = False) -> Schedule:
    """Streams and events for calls whose byte accesses are `accesses` (in sequence order).
    `drop_wait`: leave out the first cross-stream wait -- a planted fault for the mock device's
    race check (tests only)."""
    n = len(accesses)
    deps: list[list[int]] = []
    for j in range(n):
        deps.append([i for i in range(j) if _conflict(accesses[i], accesses[j])])
    stream = [0] * n
    tail: list[int] = []                        # last call of each stream used so far
    clock: list[list[int]] = []                 # per call: the last call of each stream ordered before it
    events: dict[int, int] = {}                 # call -> event id
    waits: list[list[int]] = [[] for _ in range(n)]
    dropped = False
    for j in range(n):
        tails = [s for s, t in enumerate(tail) if t in deps[j]]
        if tails:
            s = max(tails, key=lambda k: tail[k])
        elif len(tail) < num_streams:
            s = len(tail)
            tail.append(-1)
        else:
            s = min(range(len(tail)), key=lambda k: tail[k])
        known = list(clock[tail[s]]) if tail[s] >= 0 else [-1] * num_streams
        for i in sorted(deps[j], reverse=True):   # the latest first: it implies more
            t = stream[i]
            if t == s or known[t] >= i:
                continue
            if drop_wait and not dropped:
                dropped = True
                continue
            e = events.setdefault(i, len(events))
            waits[j].append(e)
            known = [max(a, b) for a, b in zip(known, clock[i])]
        known[s] = j
        clock.append(known)
        stream[j] = s
        tail[s] = j
    record = [events.get(j) for j in range(n)]
    return Schedule(stream, waits, record, max(len(tail), 1), len(events))
