"""Server-side batching shared by the engines: which requests may share one model call, and running
a list of requests as few calls as that allows.

Requests are stacked along the leading dim only where the model has one to stack along: every
input and every output starts with the same dynamic dim (an IntVar such as `batch`). Then requests
with the same signature (the rest of each input's shape) are concatenated, up to `max_rows` rows a
call, and the outputs split back by each request's row count. Any other model runs one request a
call. This assumes the rows of a batch are independent, as they are in inference graphs (no op
mixes rows); a model where that is not so is served with max_batch=1.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Optional, Union

import numpy as np

from .protocol import ModelSignature

Feeds = dict[str, np.ndarray]
Outcome = Union[Feeds, Exception]


@dataclasses.dataclass(frozen=True)
class BatchPolicy:
    batch_dim: Optional[str]   # the leading dim requests stack along; None: one request a call
    max_rows: int              # most rows (requests, when batch_dim is None) one call takes
    reason: str                # why the model batches or not, for the server's start-up line

    @property
    def batchable(self) -> bool:
        return self.batch_dim is not None


def policy(sig: ModelSignature, max_batch: int) -> BatchPolicy:
    """How `sig` batches with at most `max_batch` rows a call (1 turns batching off)."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    if max_batch == 1:
        return BatchPolicy(None, 1, "batching off (max_batch 1)")
    leads = {t.dims[0] if t.dims else None for t in sig.inputs.values()}
    dim = next(iter(leads)) if len(leads) == 1 else None
    if dim is None:
        return BatchPolicy(None, 1, "the inputs share no leading dim")
    first = next(iter(sig.inputs.values()))
    if first.min_shape[0] == first.max_shape[0]:
        return BatchPolicy(None, 1, f"the leading dim {dim!r} is static")
    lost = [n for n, t in sig.outputs.items() if not t.dims or t.dims[0] != dim]
    if lost:
        return BatchPolicy(None, 1, f"output '{lost[0]}' does not lead with {dim!r}")
    rows = min(max_batch, first.max_shape[0])
    return BatchPolicy(dim, rows, f"stacking requests along {dim!r}, up to {rows} rows a call")


def rows_of(feeds: Feeds, pol: BatchPolicy) -> int:
    return int(next(iter(feeds.values())).shape[0]) if pol.batchable and feeds else 1


def signature(feeds: Feeds, pol: BatchPolicy) -> tuple:
    """Requests with equal signatures can share a call (dtypes are the model's, checked already)."""
    return tuple((n, a.shape[1:] if pol.batchable else a.shape) for n, a in feeds.items())


def run_many(run: Callable[[Feeds], Feeds], items: Sequence[Feeds], pol: BatchPolicy,
             shared: Optional[list[int]] = None) -> list[Outcome]:
    """Outputs (or the exception) for each of `items`, in order, in as few `run` calls as the policy
    allows. One bad request never fails another: a stacked call that raises is retried one request
    at a time, so each gets its own answer. `shared`, when given, receives per item how many
    requests its answer's model call held (servers report it, for tuning max_batch)."""
    results: list[Optional[Outcome]] = [None] * len(items)
    together = [1] * len(items)
    groups: dict[tuple, list[int]] = {}
    for i, feeds in enumerate(items):
        groups.setdefault(signature(feeds, pol) if pol.batchable else ("single", i), []).append(i)
    for idxs in groups.values():
        for chunk in _chunks(idxs, items, pol):
            if len(chunk) == 1:
                results[chunk[0]] = _one(run, items[chunk[0]])
                continue
            stacked = _stacked(run, [items[i] for i in chunk], pol)
            if stacked is None:   # the joint call failed: each request on its own says why
                for i in chunk:
                    results[i] = _one(run, items[i])
            else:
                for i, out in zip(chunk, stacked):
                    results[i], together[i] = out, len(chunk)
    if shared is not None:
        shared[:] = together
    return results  # type: ignore[return-value]


def _chunks(idxs: list[int], items: Sequence[Feeds], pol: BatchPolicy) -> list[list[int]]:
    """Consecutive runs of requests whose rows add up to at most max_rows (a request larger than
    that on its own: it was checked against the model's bound, so it fits one call)."""
    out: list[list[int]] = []
    cur: list[int] = []
    total = 0
    for i in idxs:
        r = rows_of(items[i], pol)
        if cur and total + r > pol.max_rows:
            out.append(cur)
            cur, total = [], 0
        cur.append(i)
        total += r
    if cur:
        out.append(cur)
    return out


def _one(run: Callable[[Feeds], Feeds], feeds: Feeds) -> Outcome:
    try:
        return run(feeds)
    except Exception as e:  # noqa: BLE001 - handed back to that one request, which reports it
        return e


def _stacked(run: Callable[[Feeds], Feeds], group: list[Feeds], pol: BatchPolicy) -> Optional[list[Feeds]]:
    counts = [rows_of(f, pol) for f in group]
    total = sum(counts)
    joint = {n: np.concatenate([f[n] for f in group], axis=0) for n in group[0]}
    try:
        out = run(joint)
    except Exception:  # noqa: BLE001 - retried one by one by the caller
        return None
    if any(a.ndim == 0 or a.shape[0] != total for a in out.values()):
        return None   # the outputs do not carry the stacked rows: the policy was wrong for this model
    cuts = np.cumsum(counts)[:-1]
    parts = {n: np.split(a, cuts, axis=0) for n, a in out.items()}
    return [{n: parts[n][k] for n in out} for k in range(len(group))]
