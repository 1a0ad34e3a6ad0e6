"""remove_unused: dead-code elimination.

An op is live when one of its outputs is read, transitively, by a graph output. Graph.sort()
rebuilds the op and tensor lists from the outputs and unlinks every other op from the user lists
of the tensors it read, which is exactly that. No live tensor keeps a dead user, which matters
because later passes count readers to decide whether a rewrite is safe (fold_batchnorm folds
only into an op that the batchnorm alone reads).

Graph inputs stay even when nothing reads them any more: they are the model's signature, and a
caller that feeds them must not be told they vanished. Constants nothing reads disappear with
their last reader, since the graph lists only reachable tensors.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..options import CompileOptions


def remove_unused(graph: Graph, opts: CompileOptions) -> Graph:
    graph.sort()
    return graph
