"""fuse_parallel_gemms: GEMMs that read the same activation with constant weights become one GEMM.

BERT's query, key and value Linears all read the layer input: one GEMM on the weights
concatenated along N ([3*768, 768]) does the same work in one launch, with a wider N that keeps
more of the machine busy and reads the activation once. Its [..., M, N1 + N2 + ...] result is
split back into the parts, and the parts are read through strided views: fuse_memory_ops (which
runs after this pass) folds the split, the head reshapes and the head permutes into the
attention kernel's reads, so no copy survives.

A GEMM joins a group only when that will happen (every reader of its result is a chain of memory
ops that fuse_memory_ops folds into an attention operand, or into the rows a following GEMM reads,
as in two towers on one input): a split that stays would be a copy of the whole result, more
memory traffic than the launches it saves. A part read by element-wise ops does not pack: alone,
its GEMM takes them as its epilogue, which saves more than the launch. Members must agree on layout
and dtype, carry no epilogue (this pass runs before the epilogue fusion), and hold constant
weights and biases; a member without a bias gets zeros when another member has one.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..capabilities import Capabilities, caps_of
from ..ir.dims import IntImm
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.gemm import GemmAttrs
from ..ops.registry import make_op, make_op1
from ..ops.view import SplitAttrs
from ..options import CompileOptions
from ._util import new_constant, output_ids
from .fuse_memory_ops import READ_CHAIN, View, apply_read, gemm_reads, reads_views


def _candidate(op: Op) -> bool:
    if op.kind is not OpKind.GEMM or op.attrs.epilogue is not None or op.attrs.trans_a:
        return False
    w = op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) == 3 else None
    return w.is_constant and (bias is None or bias.is_constant) and len(op.inputs) <= 3


def _read_through_views(t: Tensor, view: View, outs: set[int], caps: Capabilities) -> bool:
    """Whether t (a part of the packed result, seen as `view`) is read by one chain of
    single-reader memory ops ending in an operand that fuse_memory_ops will fold: an attention
    operand (the composed view keeps a unit stride along q/k/v's last dim) or a GEMM's A operand
    (a window of rows, where the target's GEMM reads views)."""
    if id(t) in outs or len(t.users) != 1:  # fuse_memory_ops folds single-reader chains only
        return False
    cur, v, user = t, view, t.users[0]
    while user.kind in READ_CHAIN and user.kind is not OpKind.SPLIT:
        out = user.outputs[0]
        v = apply_read(user, out, v)
        if v is None or len(out.users) != 1 or id(out) in outs:
            return False
        cur, user = out, out.users[0]
    slot = next(i for i, x in enumerate(user.inputs) if x is cur)
    if user.kind is OpKind.GEMM:  # another GEMM reading the part as its rows (a second layer)
        return slot == 0 and user.inputs.count(cur) == 1 and slot in reads_views(user, caps) \
            and gemm_reads(v)
    if user.kind is not OpKind.ATTENTION or user.attrs.operand_views is not None:
        return False
    return slot == 3 or v.shape[-1] == 1 or v.strides[-1] == 1


def _part_views(members: list[Op]) -> list[View]:
    """Each member's result as a window of the packed [..., M, sum N] result."""
    shape = members[0].outputs[0].shape
    total = sum((m.outputs[0].shape[-1] for m in members[1:]), members[0].outputs[0].shape[-1])
    packed = View.dense(shape[:-1] + (total,))
    views, at = [], IntImm(0)
    for m in members:
        n = m.outputs[0].shape[-1]
        views.append(View(shape[:-1] + (n,), packed.strides, at))
        at = at + n
    return views


def _fuse(graph: Graph, members: list[Op]) -> None:
    trans_b = members[0].attrs.trans_b
    a = members[0].inputs[0]
    weights = [m.inputs[1].value for m in members]
    w = np.concatenate(weights, axis=0 if trans_b else 1)  # [sum N, K] (rcr) or [K, sum N] (rrr)
    inputs = [a, new_constant(w, members[0].inputs[1].dtype, name=_packed_name(m.inputs[1] for m in members))]
    with_bias = [m for m in members if len(m.inputs) == 3]
    if with_bias:
        bias_dtype = with_bias[0].inputs[2].dtype
        biases = [m.inputs[2].value if len(m.inputs) == 3 else
                  np.zeros(m.outputs[0].shape[-1].value, bias_dtype.np) for m in members]
        inputs.append(new_constant(np.concatenate(biases), bias_dtype,
                                   name=_packed_name(m.inputs[2] for m in with_bias)))
    name = _packed_name(members)
    packed = make_op1(OpKind.GEMM, inputs, GemmAttrs(False, trans_b), name)
    packed.name = name and name + "_out"
    axis = len(packed.shape) - 1
    parts = make_op(OpKind.SPLIT, [packed], SplitAttrs(axis, tuple(m.outputs[0].shape[-1] for m in members)),
                    (name or "gemm") + "_split")
    for m, part in zip(members, parts):
        part.name = m.outputs[0].name
        graph.replace_all_uses(m.outputs[0], part)


def _packed_name(items) -> Optional[str]:
    """The first member's name + "_packed" (name_graph makes it unique)."""
    names = [x.name for x in items if x.name]
    return names[0] + "_packed" if names else None


def fuse_parallel_gemms(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    caps = caps_of(opts)
    outs = output_ids(graph)
    groups: dict[tuple, list[Op]] = {}
    for op in graph.ops:
        if _candidate(op):
            w = op.inputs[1]
            # N must be static (the weights are constants, so it is); K is shared through A.
            key = (id(op.inputs[0]), op.attrs.trans_b, w.dtype, op.outputs[0].dtype)
            groups.setdefault(key, []).append(op)
    changed = False
    for members in groups.values():
        if len(members) < 2:
            continue
        keep = list(members)
        while len(keep) >= 2:  # dropping a member moves the others' windows: check again
            ok = [m for m, v in zip(keep, _part_views(keep))
                  if _read_through_views(m.outputs[0], v, outs, caps)]
            if len(ok) == len(keep):
                break
            keep = ok
        if len(keep) < 2:
            continue
        _fuse(graph, keep)
        changed = True
    if changed:
        graph.sort()
    return graph
