"""Graph: toposorted ops and tensors, named inputs and outputs, constants.

A Graph owns its tensors and ops. `Graph.from_outputs` copies the DAG a user built, so passes may
rewrite the copy freely while the user's tensors (and the oracle's view of them) stay as written.
Constant arrays are shared, never copied: passes make new arrays instead of writing into old ones.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Union

from ..errors import GraphError, op_label
from .names import check_name
from .op import Op
from .tensor import Tensor

Outputs = Union[Tensor, list, tuple, Mapping[str, Tensor]]


def normalize_outputs(outputs: Outputs) -> dict[str, Tensor]:
    """A Tensor, a list of Tensors or a dict name -> Tensor, as a dict."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    if isinstance(outputs, Mapping):
        items = list(outputs.items())
    elif isinstance(outputs, (list, tuple)):
        items = [(t.name if isinstance(t, Tensor) and t.name else f"output_{i}", t) for i, t in enumerate(outputs)]
    else:
        raise GraphError(f"outputs must be a Tensor, a list or a dict of Tensors, got {type(outputs).__name__}")
    out: dict[str, Tensor] = {}
    for name, t in items:
        # A key is the output's name in run()'s results and in the C tables: "y\x00a" and
        # "y\x00b" would both read back as "y" there, so such a key is refused, not mangled.
        check_name(name, "output name")
        if not isinstance(t, Tensor):
            raise GraphError(f"output '{name}' is a {type(t).__name__}, not a Tensor")
        if name in out:
            raise GraphError(f"two outputs are named '{name}'")
        out[name] = t
    return out


def topo_order(outputs: Iterable[Tensor]) -> tuple[list[Op], list[Tensor]]:
    """Ops and tensors reachable from `outputs`, each after everything it reads.

    Iterative post-order DFS (deep graphs would overflow Python's recursion limit); inputs are
    visited in operand order, so the order is deterministic. A cycle (an op that reads, through
    any chain, its own result: made by editing `op.inputs` by hand or by a broken rewrite) has no
    such order, and the walk would revisit it forever: GraphError naming the ops on it.
    """
    ops: list[Op] = []
    tensors: list[Tensor] = []
    seen_t: set[int] = set()
    seen_op: set[int] = set()
    # The ops being expanded, outermost first: each is a consumer of the next. The non-recursive
    # walk finishes them in reverse, so a list works as the path of the recursive version.
    path: list[Op] = []
    on_path: set[int] = set()
    for root in outputs:
        stack: list[tuple[Tensor, bool]] = [(root, False)]
        while stack:
            t, expanded = stack.pop()
            if id(t) in seen_t:
                continue
            op = t.producer
            if op is None:
                seen_t.add(id(t))
                tensors.append(t)
                continue
            if expanded or id(op) in seen_op:
                if id(op) not in seen_op:
                    seen_op.add(id(op))
                    ops.append(op)
                    on_path.discard(id(op))
                    path.pop()
                    for o in op.outputs:
                        if id(o) not in seen_t:
                            seen_t.add(id(o))
                            tensors.append(o)
                continue
            if id(op) in on_path:
                raise GraphError(_cycle_message(path, op))
            path.append(op)
            on_path.add(id(op))
            stack.append((t, True))
            for inp in reversed(op.inputs):
                if id(inp) not in seen_t:
                    stack.append((inp, False))
    return ops, tensors


def _check_input_names(inputs: list[Tensor]) -> None:
    # run() takes inputs by name, and the compiled model lists them by name: two distinct inputs
    # under one name would reach it as one, and the model would read a pointer it was never given.
    seen: set[str] = set()
    for t in inputs:
        if t.name is not None:
            if t.name in seen:
                raise GraphError(f"two graph inputs are named '{t.name}'; give each input its own name")
            seen.add(t.name)


def _cycle_message(path: list[Op], op: Op) -> str:
    cycle = path[next(k for k, o in enumerate(path) if o is op):] + [op]
    return "the graph has a cycle (an op reads its own result): " + " -> ".join(op_label(o) for o in cycle)


class Graph:
    def __init__(self, outputs: Mapping[str, Tensor], inputs: Optional[list[Tensor]] = None,
                 name: str = "model"):
        self.name = check_name(name, "model name")
        self.outputs: dict[str, Tensor] = dict(outputs)
        self.ops: list[Op] = []
        self.tensors: list[Tensor] = []
        self.inputs: list[Tensor] = list(inputs) if inputs is not None else []
        self._explicit_inputs = inputs is not None
        self.sort()
        _check_input_names(self.inputs)
        # Results of later stages (memory plan, kernel specs) are attached here by their passes.
        self.annotations: dict[str, object] = {}

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def from_outputs(cls, outputs: Outputs, inputs: Optional[list[Tensor]] = None,
                     name: str = "model") -> "Graph":
        """Copy the DAG reachable from `outputs` into a new Graph."""
        outs = normalize_outputs(outputs)
        _, tensors = topo_order(outs.values())
        found = [t for t in tensors if t.is_input]
        if inputs is None:
            inputs = found
        else:
            missing = [t for t in found if not any(t is i for i in inputs)]
            if missing:
                raise GraphError(f"input '{missing[0].name}' is used but not listed among the graph inputs")
        mapping = _copy_dag(list(outs.values()) + list(inputs))
        for k, t in outs.items():  # an unnamed output takes its output name (printing, C names)
            if mapping[id(t)].name is None and t.producer is not None:
                mapping[id(t)].name = k
        return cls({k: mapping[id(t)] for k, t in outs.items()},
                   [mapping[id(t)] for t in inputs], name=name)

    def copy(self) -> "Graph":
        mapping = _copy_dag(list(self.outputs.values()) + self.inputs)
        g = Graph({k: mapping[id(t)] for k, t in self.outputs.items()},
                  [mapping[id(t)] for t in self.inputs], name=self.name)
        g.annotations = dict(self.annotations)
        return g

    # -- maintenance ------------------------------------------------------------------------
    def sort(self) -> "Graph":
        """Recompute the op and tensor order from the outputs, drop dead ops from user lists."""
        self.ops, self.tensors = topo_order(self.outputs.values())
        live = {id(op) for op in self.ops}
        for t in self.tensors:
            t.users = [u for u in t.users if id(u) in live]
            t.is_output = False
        for t in self.outputs.values():
            t.is_output = True
        have = {id(t) for t in self.tensors}
        if not self._explicit_inputs:
            self.inputs = self.inputs or [t for t in self.tensors if t.is_input]
        for t in self.inputs:  # an input no op reads any more is still part of the signature
            if id(t) not in have:
                self.tensors.insert(0, t)
                t.users = [u for u in t.users if id(u) in live]
        return self

    def replace_all_uses(self, old: Tensor, new: Tensor) -> None:
        """Make every reader of `old` (ops and graph outputs) read `new` instead."""
        if old is new:
            return
        for op in list(old.users):
            op.replace_input(old, new)
        for k, t in self.outputs.items():
            if t is old:
                self.outputs[k] = new
                old.is_output, new.is_output = False, True

    # -- views ------------------------------------------------------------------------------
    @property
    def constants(self) -> list[Tensor]:
        return [t for t in self.tensors if t.is_constant]

    def input(self, name: str) -> Tensor:
        for t in self.inputs:
            if t.name == name:
                return t
        raise GraphError(f"graph has no input named '{name}'")

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.kind.value] = counts.get(op.kind.value, 0) + 1
        return dict(sorted(counts.items()))

    def __str__(self) -> str:
        from .printer import format_graph
        return format_graph(self)

    def __repr__(self) -> str:
        return f"Graph('{self.name}', {len(self.inputs)} inputs, {len(self.ops)} ops, {len(self.outputs)} outputs)"


def _copy_dag(roots: list[Tensor]) -> dict[int, Tensor]:
    """Copy every tensor and op reachable from roots; returns id(old tensor) -> new tensor."""
    ops, tensors = topo_order(roots)
    mapping: dict[int, Tensor] = {}
    for t in tensors:
        if t.producer is None:
            n = Tensor(t.shape, t.dtype, name=t.name)
            n._value = t._value
            mapping[id(t)] = n
    for op in ops:
        new_outs = []
        for o in op.outputs:
            n = Tensor(o.shape, o.dtype, name=o.name)
            mapping[id(o)] = n
            new_outs.append(n)
        new_op = Op(op.kind, [mapping[id(i)] for i in op.inputs], new_outs, op.attrs, name=op.name)
        for n in new_outs:
            n.producer = new_op
        for i in new_op.inputs:
            if not any(u is new_op for u in i.users):
                i.users.append(new_op)
    return mapping
