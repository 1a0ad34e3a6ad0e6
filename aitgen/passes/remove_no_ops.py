"""remove_no_ops: drop ops whose result equals one of their operands.

Identities by attributes: reshape/expand to the same shape, cast to the same dtype, the identity
permute, a whole-tensor slice with unit steps, padding by zero everywhere, clamp with no bounds,
concat of one tensor, split into one part. Identities by a constant operand: x*1, 1*x, x/1, x+0, 0+x, x-0, x**1, and
where() with an all-true or all-false condition. Pairs that cancel: permute after permute composing
to the identity, reshape after reshape back to the original shape, neg(neg(x)). The result must have
x's shape and dtype (x + zeros[4] broadcasting x[1] is not x). Dropout has no op (nn.Dropout
returns its input); an importer's inference-mode dropout arrives as x*1 or an identity
cast/reshape, which are covered.

All exact, except that x + 0 turns a -0.0 element of x into +0.0 and the rewrite keeps -0.0;
the two compare equal.

A graph output whose op would disappear in favour of a graph input, a constant or another graph
output keeps its op: each output needs its own buffer the kernels write (the copy stays).
Walking in topological order handles chains in one sweep: an op's operands are rewritten
before it is reached.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..options import CompileOptions
from ._util import output_ids, same_type


def remove_no_ops(graph: Graph, opts: CompileOptions) -> Graph:
    outs = output_ids(graph)
    for op in graph.ops:
        if len(op.outputs) != 1 or not op.inputs:
            continue
        (out,) = op.outputs
        src = _identity_source(op)
        if src is None or src is out or not same_type(src, out):
            continue
        if id(out) in outs and (src.producer is None or id(src) in outs):
            continue
        if id(out) in outs:
            outs.discard(id(out))
            outs.add(id(src))
        graph.replace_all_uses(out, src)
    graph.sort()
    return graph


def _identity_source(op: Op) -> Optional[Tensor]:
    """The operand that op's output equals, or None."""
    k, a = op.kind, op.attrs
    x = op.inputs[0]
    if k in (OpKind.RESHAPE, OpKind.EXPAND, OpKind.CAST):
        inner = x.producer
        if k == OpKind.RESHAPE and inner is not None and inner.kind == OpKind.RESHAPE \
                and same_type(inner.inputs[0], op.outputs[0]):
            return inner.inputs[0]  # a reshape undone by the next one
        return x  # the caller's same_type check is the whole condition
    if k == OpKind.PERMUTE:
        perm = tuple(a.perm)
        if perm == tuple(range(len(perm))):
            return x
        inner = x.producer
        if inner is not None and inner.kind == OpKind.PERMUTE:
            # y = permute(x0, p1): y[i] = x0[p1[i]]; z = permute(y, p2): z[i] = x0[p1[p2[i]]].
            p1 = tuple(inner.attrs.perm)
            if len(p1) == len(perm) and all(p1[perm[i]] == i for i in range(len(perm))):
                return inner.inputs[0]
        return None
    if k == OpKind.SLICE:
        whole = all(s == 0 and st == 1 for s, st in zip(a.starts, a.steps))
        return x if whole else None  # with start 0 and step 1, equal shapes mean the whole range
    if k == OpKind.PAD:
        return x if all(b == 0 and e == 0 for b, e in a.pads) else None
    if k == OpKind.CLAMP:
        return x if a.min is None and a.max is None else None
    if k in (OpKind.CONCAT, OpKind.SPLIT):
        return x if len(op.inputs) == 1 else None  # one operand, one result (checked by the caller)
    if k == OpKind.NEG:
        inner = x.producer
        return inner.inputs[0] if inner is not None and inner.kind == OpKind.NEG else None
    if k == OpKind.WHERE:
        cond = _const_fill(op.inputs[0])
        if cond is True or cond == 1:
            return op.inputs[1]
        if cond is False or cond == 0:
            return op.inputs[2]
        return None
    if len(op.inputs) == 2:
        return _binary_identity(k, op.inputs[0], op.inputs[1])
    return None


def _binary_identity(k: OpKind, a: Tensor, b: Tensor) -> Optional[Tensor]:
    if a.dtype == DType.bool:
        return None  # + and * on bools are logical or/and; not worth the special cases
    fa, fb = _const_fill(a), _const_fill(b)
    if k == OpKind.MUL:
        return a if fb == 1 else b if fa == 1 else None
    if k == OpKind.ADD:
        return a if fb == 0 else b if fa == 0 else None
    if k in (OpKind.SUB, OpKind.DIV, OpKind.POW):
        return a if fb == (0 if k == OpKind.SUB else 1) else None
    return None


def _const_fill(t: Tensor) -> Optional[float]:
    """The single value every element of a constant holds, or None."""
    if not t.is_constant:
        return None
    v = np.asarray(t.value)
    if v.size == 0:
        return None
    first = v.flat[0]
    if not np.all(v == first):
        return None
    return bool(first) if v.dtype == np.bool_ else float(first)
