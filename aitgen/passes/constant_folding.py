"""constant_folding: evaluate, at compile time, every op whose operands are all constants.

Ops are evaluated in topological order with the oracle's own eval_op, so a folded value is bit
for bit what the oracle computes for the unfolded graph (float16/bfloat16 included: eval_op rounds
to the storage type after each op, as it does at run time). A whole constant subgraph folds in one
sweep: an op whose operands were folded earlier in the sweep is foldable too. Only the frontier
becomes a new constant, i.e. folded tensors that an unfolded op still reads; values inside a
folded subgraph live only during the pass.

Limits:
- opts.fold_constants False: nothing is folded (the user wants weights settable at run time).
- opts.constant_fold_max_bytes: an op with an output larger than this stays a computation, and so
  does everything downstream of it; compile-time memory stays bounded by it too.
- An op whose output is a graph output is not folded (its operands may be): an output turned into
  a constant would have no kernel that writes it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.graph import Graph
from ..ir.tensor import Tensor
from ..options import CompileOptions
from ..reference import eval_op
from ._util import new_constant, output_ids, static_shape


def constant_folding(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fold_constants:
        return graph
    limit = opts.constant_fold_max_bytes
    outs = output_ids(graph)
    values: dict[int, np.ndarray] = {}
    folded_ops: set[int] = set()
    folded: list[Tensor] = []

    def value_of(t: Tensor) -> Optional[np.ndarray]:
        return t.value if t.is_constant else values.get(id(t))

    for op in graph.ops:
        if not op.inputs or any(id(o) in outs for o in op.outputs):
            continue
        args = [value_of(t) for t in op.inputs]
        if any(a is None for a in args):
            continue
        if any(static_shape(o) is None or o.nbytes_upper() > limit for o in op.outputs):
            continue
        # Static output shapes from constant operands bind no IntVar, hence the empty env.
        for o, v in zip(op.outputs, eval_op(op, args, {})):
            values[id(o)] = v
            folded.append(o)
        folded_ops.add(id(op))

    for t in folded:
        if all(id(u) in folded_ops for u in t.users):
            continue  # read only inside the folded subgraph: never materialised
        # The folded tensor vanishes from the graph, so its name (a user's, often) passes on;
        # an unnamed one is named after the op that computed it, the next best clue to its origin.
        name = t.name or (t.producer.name if t.producer is not None else None)
        graph.replace_all_uses(t, new_constant(values[id(t)], t.dtype, name=name))
    graph.sort()
    return graph
