"""name_graph: a unique, valid C identifier for every tensor and op.

Generated code declares each tensor (and labels each op) by its name, so names must be C/C++
identifiers, distinct, and never reserved. Tensors and ops share one namespace: a kernel named
like a buffer would not compile in the same scope.

Who keeps a name, in order: graph inputs (the model's signature), graph outputs, constants (the
weights file and set_constants address them), other tensors, then ops. Names that are already
valid are claimed before any sanitised or generated one, so `x` keeps its name even when another
tensor's name sanitises to `x`. Every rename is listed in graph.annotations["renamed"]
(new -> old), so the runtime can still accept an input by the name the user gave it, and a
profile can be traced back to the module that built an op.
Running the pass twice changes nothing the second time.
"""
from __future__ import annotations

import re
from typing import Optional, Union

from ..ir.graph import Graph
from ..ir.op import Op
from ..ir.tensor import Tensor
from ..options import CompileOptions

# C11 and C++20 keywords plus names our generated sources define; a name equal to one gets a "_".
_RESERVED = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
    nullptr operator or or_eq private protected public register reinterpret_cast requires restrict
    return short signed sizeof static static_assert static_cast struct switch template this
    thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
    wchar_t while xor xor_eq _Bool _Complex _Imaginary main half bfloat16 size_t stream workspace
    constants inputs outputs model NULL
    abs exp log pow sqrt erf tanh max min fabs floor ceil round expf logf powf sqrtf erff tanhf
""".split())

_VALID = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_MAX_LEN = 200  # long dotted module paths stay readable; C compilers accept far more anyway

Named = Union[Tensor, Op]


def is_valid_name(name: Optional[str]) -> bool:
    """A C identifier that is not reserved: no leading underscore, no double underscore."""
    return (name is not None and len(name) <= _MAX_LEN and _VALID.match(name) is not None
            and "__" not in name and name not in _RESERVED)


def sanitize(name: str, prefix: str) -> str:
    """'layer1.0.conv1.weight' -> 'layer1_0_conv1_weight'; '0' -> prefix + '_0'; 'int' -> 'int_'."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    # Room for a dedup suffix keeps the result valid, so a second run renames nothing.
    s = re.sub(r"_+", "_", s).strip("_")[:_MAX_LEN - 16].rstrip("_")
    if not s:
        return prefix
    if not s[0].isalpha():
        s = f"{prefix}_{s}"
    if s in _RESERVED:
        s += "_"
    return s


def name_graph(graph: Graph, opts: CompileOptions) -> Graph:
    taken: set[str] = set()
    items = _in_priority_order(graph)
    # First round: every already-valid name, first claimant wins.
    pending: list[Named] = []
    for obj in items:
        if is_valid_name(obj.name) and obj.name not in taken:
            taken.add(obj.name)
        else:
            pending.append(obj)
    # Second round: the rest get a sanitised or generated name, suffixed until free.
    renamed: dict[str, str] = dict(graph.annotations.get("renamed", {}))  # type: ignore[arg-type]
    counters: dict[str, int] = {}
    for obj in pending:
        base = _base_name(obj, graph)
        new = _fresh(base, taken, counters)
        taken.add(new)
        if obj.name is not None:
            renamed[new] = renamed.pop(obj.name, obj.name)
        obj.name = new
    graph.annotations["renamed"] = renamed
    graph.annotations["named"] = True
    return graph


def _in_priority_order(graph: Graph) -> list[Named]:
    seen: set[int] = set()
    out: list[Named] = []

    def add(obj: Named) -> None:
        if id(obj) not in seen:
            seen.add(id(obj))
            out.append(obj)

    for t in graph.inputs:
        add(t)
    for t in graph.outputs.values():
        add(t)
    for t in graph.tensors:
        if t.is_constant:
            add(t)
    for t in graph.tensors:
        add(t)
    for op in graph.ops:
        add(op)
    return out


def _base_name(obj: Named, graph: Graph) -> str:
    if isinstance(obj, Op):
        return sanitize(obj.name, "op") if obj.name else obj.kind.value
    if obj.name:
        return sanitize(obj.name, "t")
    for key, t in graph.outputs.items():  # an unnamed output reads best under its output key
        if t is obj:
            return sanitize(key, "t")
    if obj.is_constant:
        return "constant"
    if obj.producer is not None:
        stem = sanitize(obj.producer.name, "t") if obj.producer.name else obj.producer.kind.value
        return f"{stem}_out"
    return "input"


def _fresh(base: str, taken: set[str], counters: dict[str, int]) -> str:
    if base not in taken and is_valid_name(base):
        return base
    # The counter per base makes naming linear in the number of clashes, not quadratic.
    n = counters.get(base, 0)
    while True:
        n += 1
        cand = f"{base}_{n}"
        if cand not in taken:
            counters[base] = n
            return cand
