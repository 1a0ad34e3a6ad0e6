"""dedup: common-subexpression elimination, and merging of identical constants.

Two ops are the same computation when they have the same kind, equal attributes and the same
operand tensors (in either order for the commutative kinds whose result is bit-identical either
way). Walking ops in topological order and redirecting each duplicate's readers to the first
op finds every duplicate in one sweep: an op's operands are already canonical when it is reached.

Constants merge when dtype, shape and bytes are equal (bytes, not values: -0.0 and 0.0 stay
apart, and two NaN payloads compare as what they are). Constants are merged first, so ops that
read two copies of the same weight are recognised as duplicates too. Merged constant names are
recorded in graph.annotations["constant_aliases"] (dropped name -> kept name) because setting
one of them at run time now sets both.

A duplicate is kept when it and its twin are both graph outputs: one tensor returned under two
names would need aliasing support from every backend's output handling.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
from typing import Any, Hashable, Optional

import numpy as np

from ..ir.dims import Dim
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..options import CompileOptions
from ._util import output_ids

# a op b == b op a bit for bit. Not maximum/minimum: which zero (or NaN payload) wins is operand order.
_COMMUTATIVE = frozenset({OpKind.ADD, OpKind.MUL, OpKind.EQUAL, OpKind.NOT_EQUAL,
                          OpKind.LOGICAL_AND, OpKind.LOGICAL_OR})


def dedup(graph: Graph, opts: CompileOptions) -> Graph:
    outs = output_ids(graph)
    _merge_constants(graph, outs)
    index: dict[int, int] = {id(t): i for i, t in enumerate(graph.tensors)}
    seen: dict[Hashable, Op] = {}
    for op in graph.ops:
        key = _op_key(op, index)
        if key is None:
            continue
        twin = seen.get(key)
        if twin is None:
            seen[key] = op
            continue
        if any(id(a) in outs and id(b) in outs for a, b in zip(op.outputs, twin.outputs)):
            continue
        for dup, keep in zip(op.outputs, twin.outputs):
            _redirect(graph, dup, keep, outs)
    graph.sort()
    return graph


def _merge_constants(graph: Graph, outs: set[int]) -> None:
    first: dict[tuple, Tensor] = {}
    aliases: dict[str, str] = dict(graph.annotations.get("constant_aliases", {}))  # type: ignore[arg-type]
    for t in graph.constants:
        value = t.value
        key = (t.dtype, value.shape, _digest(value))
        keep = first.get(key)
        if keep is None:
            first[key] = t
            continue
        # The digest only picks candidates; the bytes decide.
        if not _same_bytes(keep.value, value) or (id(t) in outs and id(keep) in outs):
            continue
        if t.name and keep.name and t.name != keep.name:
            for k, v in aliases.items():  # names merged into t earlier now point at keep
                if v == t.name:
                    aliases[k] = keep.name
            aliases[t.name] = keep.name
        _redirect(graph, t, keep, outs)
    if aliases:
        graph.annotations["constant_aliases"] = aliases


def _redirect(graph: Graph, dup: Tensor, keep: Tensor, outs: set[int]) -> None:
    if id(dup) in outs:
        outs.discard(id(dup))
        outs.add(id(keep))
    graph.replace_all_uses(dup, keep)


def _digest(value: np.ndarray) -> bytes:
    # As bytes: the buffer protocol refuses ml_dtypes' bfloat16, and 0-d arrays cannot be viewed.
    raw = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
    return hashlib.blake2b(raw, digest_size=16).digest()


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and \
        np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _op_key(op: Op, index: dict[int, int]) -> Optional[Hashable]:
    if any(id(t) not in index for t in op.inputs):
        return None  # an operand outside the sorted graph: nothing to compare it with safely
    operands = tuple(index[id(t)] for t in op.inputs)
    if op.kind in _COMMUTATIVE:
        operands = tuple(sorted(operands))
    attrs = _canon(op.attrs)
    if attrs is _UNHASHABLE:
        return None
    try:
        key = (op.kind, type(op.attrs), attrs, operands)
        hash(key)
    except TypeError:
        return None  # unhashable attrs: leave the op alone rather than guess at equality
    return key


def _canon(v: Any) -> Any:
    """A hashable stand-in for an attribute value whose equality is exact.

    Floats by repr: 0.0 == -0.0 in Python, but clamp(min=-0.0) and pad(value=-0.0) differ from
    their +0.0 versions in the sign of the zeros they produce.
    """
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        parts = tuple((f.name, _canon(getattr(v, f.name))) for f in dataclasses.fields(v))
        return _UNHASHABLE if any(p[1] is _UNHASHABLE for p in parts) else (type(v), parts)
    if isinstance(v, bool):
        return ("bool", v)  # True == 1 in Python; keepdims=True is not an axis of 1
    if v is None or isinstance(v, (int, str, enum.Enum, Dim)):
        return v
    if isinstance(v, float):
        return ("float", repr(v))
    if isinstance(v, (tuple, list)):
        items = tuple(_canon(x) for x in v)
        return _UNHASHABLE if any(x is _UNHASHABLE for x in items) else (type(v).__name__, items)
    try:
        hash(v)
    except TypeError:
        return _UNHASHABLE
    return v


_UNHASHABLE = object()
