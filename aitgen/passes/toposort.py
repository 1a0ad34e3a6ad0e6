"""toposort: a deterministic topological order of ops and tensors, after proving there is no cycle.

The order is graph.sort()'s: a post-order DFS from the outputs in their dict order, visiting
operands in operand order, so the same graph always prints, schedules and names the same way.
graph.sort() itself would loop forever on a cycle (a rewrite that made an op read its own
result), so this pass checks for one first and names the ops on it.
"""
from __future__ import annotations

from ..errors import GraphError, op_label
from ..ir.graph import Graph
from ..ir.op import Op
from ..options import CompileOptions

_GREY, _BLACK = 1, 2


def toposort(graph: Graph, opts: CompileOptions) -> Graph:
    _check_acyclic(graph)
    graph.sort()
    return graph


def _check_acyclic(graph: Graph) -> None:
    """Raise GraphError naming the ops of a cycle reachable from the outputs, if there is one."""
    colour: dict[int, int] = {}
    for root in graph.outputs.values():
        if root.producer is None or id(root.producer) in colour:
            continue
        # Iterative DFS over producers (deep models overflow Python's recursion limit).
        # Each frame is (op, index of the next operand to look at); the stack is the grey path.
        stack: list[tuple[Op, int]] = [(root.producer, 0)]
        colour[id(root.producer)] = _GREY
        while stack:
            op, i = stack[-1]
            if i == len(op.inputs):
                colour[id(op)] = _BLACK
                stack.pop()
                continue
            stack[-1] = (op, i + 1)
            prod = op.inputs[i].producer
            if prod is None:
                continue
            state = colour.get(id(prod))
            if state == _GREY:
                path = [o for o, _ in stack]
                cycle = path[next(k for k, o in enumerate(path) if o is prod):]
                names = " -> ".join(op_label(o) for o in cycle + [prod])
                raise GraphError(f"the graph has a cycle: {names}")
            if state is None:
                colour[id(prod)] = _GREY
                stack.append((prod, 0))
