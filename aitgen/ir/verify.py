"""IR invariants, checked after every pass in tests and debug mode."""
from __future__ import annotations

from ..errors import AitgenError, GraphError
from .graph import Graph
from .opdef import infer_types


def verify(graph: Graph) -> None:
    """Raise GraphError naming the first op or tensor that breaks an invariant."""
    defined: set[int] = set()
    for t in graph.inputs:
        if t.producer is not None:
            raise GraphError(f"graph input '{t.name}' has a producer ({t.producer.kind.value})")
        if t.value is not None:
            raise GraphError(f"graph input '{t.name}' holds a constant value")
        defined.add(id(t))
    in_graph = {id(op) for op in graph.ops}
    for op in graph.ops:
        label = f"{op.kind.value} '{op.name}'"
        for i, t in enumerate(op.inputs):
            if t.is_constant:
                defined.add(id(t))
            if id(t) not in defined:
                raise GraphError(f"{label}: operand {i} ('{t.name}') is used before it is defined "
                                 "(not toposorted, or an input missing from graph.inputs)")
            if not any(u is op for u in t.users):
                raise GraphError(f"{label}: operand {i} ('{t.name}') does not list the op among its users")
        for o in op.outputs:
            if o.producer is not op:
                raise GraphError(f"{label}: output '{o.name}' names another producer")
            if id(o) in defined:
                raise GraphError(f"{label}: output '{o.name}' is defined twice")
            defined.add(id(o))
        try:
            types = infer_types(op.kind, op.inputs, op.attrs, op.name)
        except AitgenError as e:
            raise GraphError(f"{label}: no longer type-checks: {e}") from None
        for o, (shape, dtype) in zip(op.outputs, types):
            if tuple(o.shape) != tuple(shape) or o.dtype != dtype:
                raise GraphError(f"{label}: output '{o.name}' is {o.dtype}{list(o.shape)} but the op "
                                 f"infers {dtype}{list(shape)}")
        if len(types) != len(op.outputs):
            raise GraphError(f"{label}: has {len(op.outputs)} outputs, infers {len(types)}")
    for t in graph.tensors:
        for u in t.users:
            if id(u) not in in_graph:
                raise GraphError(f"tensor '{t.name}' lists a user ({u.kind.value} '{u.name}') outside the graph")
        if t.is_constant:
            want = tuple(d.value for d in t.shape)
            if tuple(t.value.shape) != want or t.value.dtype != t.dtype.np:
                raise GraphError(f"constant '{t.name}' holds {t.value.dtype}{list(t.value.shape)}, "
                                 f"declared {t.dtype}{list(want)}")
    for k, t in graph.outputs.items():
        if id(t) not in defined and not t.is_constant:
            raise GraphError(f"output '{k}' is not computed by the graph")
    names = [t.name for t in graph.tensors if t.name]
    dup = {n for n in names if names.count(n) > 1} if len(names) != len(set(names)) else set()
    if dup and graph.annotations.get("named"):
        raise GraphError(f"tensor name '{sorted(dup)[0]}' is used twice after name_graph")
