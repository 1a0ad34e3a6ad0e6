"""Readable, stable text for a graph (golden tests compare it byte for byte)."""
from __future__ import annotations

import dataclasses
import enum

from .dims import shape_str


def _fmt_value(v) -> str:
    if isinstance(v, enum.Enum):
        return str(v.value)
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt_value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def format_attrs(attrs) -> str:
    if not dataclasses.is_dataclass(attrs):
        return ""
    # An optional field left at None (a gemm without an epilogue, an open clamp end) says nothing;
    # nor does a field declared repr=False (a LOOP's memory plan of its body: a later stage's result).
    parts = [f"{f.name}={_fmt_value(getattr(attrs, f.name))}" for f in dataclasses.fields(attrs)
             if f.repr and not (getattr(attrs, f.name) is None and f.default is None)]
    return "[" + ", ".join(parts) + "]" if parts else ""


def format_graph(graph) -> str:
    names: dict[int, str] = {}
    counter = 0

    def name(t) -> str:
        nonlocal counter
        if id(t) not in names:
            if t.name:
                names[id(t)] = t.name
            else:
                names[id(t)] = f"%{counter}"
                counter += 1
        return names[id(t)]

    ty = lambda t: f"{t.dtype.short}{shape_str(t.shape)}"  # noqa: E731
    lines = [f"graph {graph.name}("]
    for t in graph.inputs:
        lines.append(f"  {name(t)}: {ty(t)},")
    lines.append(") {")
    for t in graph.constants:
        small = f" = {t.value.tolist()}" if t.value.size <= 4 else ""  # scalars read better inline
        lines.append(f"  {name(t)} = constant {ty(t)}{small}")
    for op in graph.ops:
        outs = ", ".join(name(o) for o in op.outputs)
        ins = ", ".join(name(i) for i in op.inputs)
        types = ", ".join(ty(o) for o in op.outputs)
        label = f"  # {op.name}" if op.name else ""
        lines.append(f"  {outs} = {op.kind.value}{format_attrs(op.attrs)}({ins}) : {types}{label}")
    rets = ", ".join(f"{k}: {name(t)}" for k, t in graph.outputs.items())
    lines.append(f"  return {{{rets}}}")
    lines.append("}")
    return "\n".join(lines) + "\n"
