"""Shared by fuse_mm_elementwise and fuse_conv_elementwise (not a pass itself): an op whose result
y feeds element-wise ops absorbs them as its Epilogue (aitgen/ops/fused.py), so one kernel writes
the final value and y is never stored or read back.

What is absorbed is any DAG, not a list of patterns. From y the region R grows through every
element-wise reader whose result has y's shape (it may broadcast an operand, never y itself) and
whose other operands broadcast to y's shape: bias vectors, per-channel scales, residuals, scalars.
Then the cut: for each tensor z of R, D(z) = the ops of R that z depends on. D(z) is a valid
epilogue when every tensor it produces except z (and y) is read only inside D(z) and is no graph
output: an intermediate read outside would have to be stored after all, and fusing past it would
leave the reader without its value. The largest valid D(z) wins (greedy; ties go to the later z).
That rule also rules out cycles: an operand of D(z) computed from y would need a path from y
leaving D(z) before z, i.e. an intermediate read outside.

Operands are limited to MAX_EXTRA (a kernel argument list, not a rule of the math). An op with no
bias yet whose result's only reader is `y + v`, v of shape [N] (the output channels), takes v as
its bias operand: that is the op's own bias path (oneDNN adds it in the accumulator). An op that
already has an epilogue extends it, so running the pass twice is harmless.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..errors import AitgenError
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.fused import MAX_EXTRA, Epilogue, Expr, ExprNode, expr_shape_ok, split_operands
from ..ops.registry import Category, get_opdef, make_op1
from ._util import output_ids

MAX_REGION = 64  # element-wise ops explored past one result: bounds the quadratic cut search
_HAS_BIAS_SLOT = (OpKind.GEMM, OpKind.CONV2D, OpKind.CONV_TRANSPOSE2D)  # third own operand: a bias [N]


def absorb_epilogues(graph: Graph, kinds: tuple[OpKind, ...], widen: frozenset = frozenset()) -> Graph:
    """`widen`: kinds (Capabilities.epilogue_widen) whose bf16 result may leave the epilogue as
    float32; any other epilogue ends in the op's own dtype."""
    outs = output_ids(graph)
    pos = {id(op): i for i, op in enumerate(graph.ops)}
    dead: set[int] = set()
    for op in list(graph.ops):
        if op.kind in kinds and id(op) not in dead:
            _absorb(graph, op, outs, pos, dead, op.kind in widen)
    graph.sort()
    return graph


def _is_elementwise(op: Op) -> bool:
    try:
        cat = get_opdef(op.kind).category
    except AitgenError:
        return False
    # A fused group has several outputs and an Expr of its own; fuse_elementwise runs later anyway.
    return cat is Category.ELEMENTWISE and op.kind is not OpKind.FUSED_ELEMENTWISE and len(op.outputs) == 1


def _region(y: Tensor, dead: set[int]) -> list[Op]:
    """Element-wise ops reachable from y that could sit in its epilogue, in discovery order."""
    inside: set[int] = {id(y)}
    found: list[Op] = []
    seen: set[int] = set()
    queue = [y]
    while queue and len(found) < MAX_REGION:
        t = queue.pop(0)
        for u in t.users:
            if id(u) in seen or id(u) in dead or not _is_elementwise(u):
                continue
            seen.add(id(u))
            out = u.outputs[0]
            if tuple(out.shape) != tuple(y.shape):
                continue
            others = [x.shape for x in u.inputs if id(x) not in inside]
            if not expr_shape_ok(y.shape, others):
                continue
            found.append(u)
            inside.add(id(out))
            queue.append(out)
            if len(found) >= MAX_REGION:
                break
    return found


def _cut(y: Tensor, region: list[Op], outs: set[int], pos: dict[int, int],
         room: int, widen: bool = False) -> Optional[tuple[list[Op], Tensor, list[Tensor]]]:
    """The largest valid D(z): (ops in schedule order, z, extra operands), or None."""
    in_region = {id(op.outputs[0]): op for op in region}
    best = None
    for op in sorted(region, key=lambda o: pos.get(id(o), 0)):
        z = op.outputs[0]
        if z.dtype != y.dtype and not (widen and y.dtype is DType.bfloat16 and z.dtype is DType.float32):
            continue  # the kernel stores the epilogue's result in the op's own type (or bf16's float32)
        members: dict[int, Op] = {}
        stack = [z]
        while stack:  # ancestors of z inside the region
            p = in_region.get(id(stack.pop()))
            if p is not None and id(p) not in members:
                members[id(p)] = p
                stack.extend(p.inputs)
        produced = {id(y)} | {id(p.outputs[0]) for p in members.values()}
        valid = True
        for t in [y] + [p.outputs[0] for p in members.values()]:
            if t is z:
                continue
            if id(t) in outs or any(id(u) not in members for u in t.users):
                valid = False
                break
        if not valid:
            continue
        extras: list[Tensor] = []
        for p in members.values():
            for x in p.inputs:
                if id(x) not in produced and not any(x is e for e in extras):
                    extras.append(x)
        if len(extras) > room:
            continue
        ops_d = sorted(members.values(), key=lambda o: pos.get(id(o), 0))
        if best is None or len(ops_d) >= len(best[0]):
            best = (ops_d, z, extras)
    return best


def _bias_candidate(anchor: Op, y: Tensor, ops_d: list[Op]) -> Optional[tuple[Op, Tensor]]:
    """(the add, v) when `y + v` can become the op's bias operand."""
    if anchor.kind not in _HAS_BIAS_SLOT or len(anchor.inputs) != 2 or len(y.users) != 1:
        return None
    u = y.users[0]
    if u is not ops_d[0] or u.kind is not OpKind.ADD:
        return None
    a, b = u.inputs
    v = b if a is y else a if b is y else None
    if v is None or v is y or v.dtype != y.dtype or len(v.shape) != 1 or v.shape[0] != y.shape[-1]:
        return None
    return u, v


def _absorb(graph: Graph, anchor: Op, outs: set[int], pos: dict[int, int], dead: set[int],
            widen: bool = False) -> None:
    if len(anchor.outputs) != 1:
        return
    y = anchor.outputs[0]
    if id(y) in outs or not y.dtype.is_float:
        return
    old: Optional[Epilogue] = getattr(anchor.attrs, "epilogue", None)
    own, old_extras = split_operands(anchor.inputs, anchor.attrs)
    region = _region(y, dead)
    if not region:
        return
    found = _cut(y, region, outs, pos, MAX_EXTRA - len(old_extras), widen)
    if found is None:
        return
    ops_d, z, extras = found
    extras = [e for e in extras if not any(e is x for x in old_extras)]  # already an operand
    acc = y  # what slot 0 holds: y, or y + v when v becomes the bias
    bias = _bias_candidate(anchor, y, ops_d) if old is None else None
    if bias is not None:
        add, v = bias
        ops_d = ops_d[1:]
        acc = add.outputs[0]
        own = own + [v]
        if not any(v is i for x in ops_d for i in x.inputs):  # v read by the add alone
            extras = [e for e in extras if e is not v]
    epilogue = _build_expr(old, old_extras, acc, ops_d, z, extras) if ops_d else old
    inputs = own + old_extras + (extras if ops_d else [])
    attrs = dataclasses.replace(anchor.attrs, epilogue=epilogue)
    views = getattr(anchor.attrs, "operand_views", None)
    if views is not None:  # the new operands are read as they are
        attrs = dataclasses.replace(attrs, operand_views=tuple(views) + (None,) * (len(inputs) - len(views)))
    new = make_op1(anchor.kind, inputs, attrs, name=anchor.name)
    new.name = z.name if z.name is not None else y.name
    for op in [anchor] + ops_d + ([bias[0]] if bias else []):
        dead.add(id(op))
        for t in op.inputs:  # later anchors must not see these ops among the readers
            t.users = [u for u in t.users if u is not op]
    if id(z) in outs:
        outs.discard(id(z))
        outs.add(id(new))
    graph.replace_all_uses(z, new)


def _build_expr(old: Optional[Epilogue], old_extras: list[Tensor], acc: Tensor, ops_d: list[Op], z: Tensor,
                extras: list[Tensor]) -> Epilogue:
    """Slot 0 = acc, then the old epilogue's operands, then the new ones; old nodes, then new."""
    num_inputs = 1 + len(old_extras) + len(extras)
    slot: dict[int, int] = {id(acc): 0}
    for i, t in enumerate(old_extras + extras, start=1):
        slot.setdefault(id(t), i)
    nodes: list[ExprNode] = []
    if old is not None:
        shift = num_inputs - old.expr.num_inputs  # old node slots move past the new operands
        for n in old.expr.nodes:
            args = tuple(a if a < old.expr.num_inputs else a + shift for a in n.args)
            nodes.append(ExprNode(n.kind, n.attrs, args, n.dtype))
        slot[id(acc)] = old.expr.outputs[0] + (shift if old.expr.outputs[0] >= old.expr.num_inputs else 0)
    for op in ops_d:
        nodes.append(ExprNode(op.kind, op.attrs, tuple(slot[id(t)] for t in op.inputs), op.outputs[0].dtype))
        slot[id(op.outputs[0])] = num_inputs + len(nodes) - 1
    return Epilogue(Expr(num_inputs, tuple(nodes), (slot[id(z)],)))
