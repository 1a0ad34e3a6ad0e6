"""toposort: a deterministic topological order of ops and tensors, or GraphError on a cycle.

The order is graph.sort()'s: a post-order DFS from the outputs in their dict order, visiting
operands in operand order, so the same graph always prints, schedules and names the same way.
A cycle (a rewrite that made an op read its own result) has no order: ir.graph.topo_order finds
it during the same walk and names the ops on it.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..options import CompileOptions


def toposort(graph: Graph, opts: CompileOptions) -> Graph:
    graph.sort()
    return graph
