"""Bounds carried from kernel to kernel in one run (the CPU's guarded oneDNN post-ops).

A oneDNN conv with relu / clip / erf GELU post-ops proves, on every call, that the values those
post-ops read are finite (backends/cpu/include/aitgen/onednn_guard.h): |acc| <= max|x| * (the
weight's largest row L1 norm) + max|bias|, then through the post-op chain. Finding max|x| is a
pass over the input, a tenth of MobileNetV2's time on a 2-core Xeon. But the kernel that wrote x
already knew a bound on it: the one its own guard computed. So a kernel built with slots writes
that bound into a slot of the run (a double after the arena's tensors) and its readers take it
instead of scanning; where the bound is not finite enough they scan, as before.

Lowering puts BoundRef(t) after a kernel's pointers, one per pointer (the first for its output);
link_bounds turns each into a BoundSlot where the value it stands for is written by exactly one
earlier call of this run sequence that has slots, else None (a null pointer: scan).
"""
from __future__ import annotations

from .spec import BoundRef, BoundSlot, KernelCall


def _slotted(c: KernelCall) -> int:
    """The index of the call's first BoundRef (its output's), or -1."""
    for j, t in enumerate(c.ptrs):
        if isinstance(t, BoundRef):
            return j
    return -1


def link_bounds(calls: list[KernelCall]) -> int:
    """Resolve every BoundRef of `calls` (in place) and return how many slots the run needs.

    Linked only within this list, in order: a producer writes its slot on every call before any
    later call reads it (top-level calls all run; a LOOP body's calls are another list, and its
    BoundRefs, never linked, are null). A tensor written by more than one call (any pointer listed
    in `writes`) is never linked: its last writer may not be the one with the bound.
    """
    needs = _needs(calls)
    writers: dict[int, int] = {}
    for c in calls:
        for j in set(c.writes or [0]):
            if j < len(c.ptrs) and not isinstance(c.ptrs[j], (BoundRef, BoundSlot)):
                writers[id(c.ptrs[j])] = writers.get(id(c.ptrs[j]), 0) + 1
    producer: dict[int, int] = {}   # id(tensor) -> index of the call whose slot bounds it
    slot_of: dict[int, int] = {}    # call index -> its output's slot
    pending: list[tuple[int, int, int]] = []  # (call index, ptrs index, producer call index)
    for k, c in enumerate(calls):
        at = _slotted(c)
        if at < 0:
            continue
        for j in range(1, at if needs[k] else 1):  # readers first: a call never reads its own output's slot
            t = c.ptrs[j]
            src = producer.get(id(t))
            if src is not None and isinstance(c.ptrs[at + j], BoundRef) and c.ptrs[at + j].tensor is t:
                pending.append((k, at + j, src))
        out = c.ptrs[0]
        if c.ptrs[at].tensor is out and writers.get(id(out)) == 1:
            producer[id(out)] = k
    for k, j, src in pending:
        slot_of.setdefault(src, len(slot_of))
    for k, j, src in pending:
        calls[k].ptrs[j] = BoundSlot(slot_of[src])
    for k, c in enumerate(calls):
        at = _slotted(c)
        if at < 0:
            continue
        if k in slot_of:
            c.ptrs[at] = BoundSlot(slot_of[k])
            c.writes = sorted(set(c.writes or [0]) | {at})
        c.ptrs[at:] = [p if isinstance(p, BoundSlot) else None for p in c.ptrs[at:]]
    return len(slot_of)


def _guarded(c: KernelCall) -> bool:
    """Whether the kernel has guarded post-ops (kernels/cpu/epilogue.py): it bounds its operands."""
    return any(p.get("guard") for p in c.spec.param_dict().get("post_ops") or [])


def _needs(calls: list[KernelCall]) -> list[bool]:
    """Per call, whether a bound on its operands serves anyone: its own guard, or a later reader of
    its output that needs it in turn (so a kernel without a guard scans nothing for a bound only
    kernels without guards would read)."""
    readers: dict[int, list[int]] = {}
    for k, c in enumerate(calls):
        at = _slotted(c)
        for t in c.ptrs[1:at] if at > 0 else []:
            readers.setdefault(id(t), []).append(k)
    needs = [False] * len(calls)
    for k in range(len(calls) - 1, -1, -1):
        c = calls[k]
        if _slotted(c) > 0:
            needs[k] = _guarded(c) or any(r > k and needs[r] for r in readers.get(id(c.ptrs[0]), []))
    return needs


def bound_refs(ptrs: list) -> list:
    """The BoundRefs a kernel with slots appends to its pointers: its output's, then one per pointer."""
    return [BoundRef(t) for t in ptrs]
