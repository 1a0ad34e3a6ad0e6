"""Grouped ops: several independent ops of one kind, run as one kernel (horizontal fusion).

group_ops (aitgen/passes/group_ops.py) replaces ops that do not depend on each other and share a
kind (GEMMs, layernorms, element-wise ops and fused element-wise groups) by one GROUPED op. Its
operands are the members' operands one member after the other, its results likewise; each
member keeps its own attrs, so a member is exactly the op it was (its epilogue, its expression),
and only the launch is shared. Element-wise kinds (single ops and FUSED_ELEMENTWISE groups, which
mix freely in one grouped kernel) are named by the member kind FUSED_ELEMENTWISE: a single
element-wise op joins as a one-node expression.

Inference and the reference run each member through its own kind's definition, so a grouped op
is correct exactly when its members are, and the oracle gives the same bits before and after
grouping.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from ..errors import ShapeError
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from .registry import Category, RefContext, get_opdef, infer_types, make_op, register

__all__ = ["GroupMember", "GroupedAttrs", "grouped", "member_ops"]

MAX_MEMBERS = 64  # one kernel's configuration table, not a rule of the math


@dataclasses.dataclass(frozen=True)
class GroupMember:
    """One op of a group: its attrs and how many of the group's operands and results are its own."""
    attrs: Any
    num_inputs: int
    num_outputs: int = 1

    def __str__(self) -> str:
        from ..ir.printer import format_attrs
        return f"{format_attrs(self.attrs) or '[]'}:{self.num_inputs}->{self.num_outputs}"


class Members(tuple):
    """The members as a tuple that also lists the kinds absorbed (graph pictures box them)."""
    kind: OpKind = OpKind.GROUPED

    def kinds(self) -> list[OpKind]:
        out: list[OpKind] = []
        for m in self:
            expr = getattr(m.attrs, "expr", None)
            out += expr.kinds() if expr is not None and hasattr(expr, "kinds") else [self.kind]
        return out


@dataclasses.dataclass(frozen=True)
class GroupedAttrs:
    kind: OpKind                        # every member's kind
    members: tuple[GroupMember, ...]

    def __post_init__(self):
        ms = Members(self.members)
        ms.kind = self.kind
        object.__setattr__(self, "members", ms)

    def split(self, tensors: Sequence, outputs: bool = False) -> list[list]:
        """The group's operands (or results) cut into one list per member."""
        out, at = [], 0
        for m in self.members:
            n = m.num_outputs if outputs else m.num_inputs
            out.append(list(tensors[at:at + n]))
            at += n
        return out


def _check(inputs, attrs: GroupedAttrs) -> None:
    if attrs.kind is OpKind.GROUPED:
        raise ShapeError("a group's members cannot be groups themselves")
    if not 1 <= len(attrs.members) <= MAX_MEMBERS:
        raise ShapeError(f"a group has 1..{MAX_MEMBERS} members, got {len(attrs.members)}")
    want = sum(m.num_inputs for m in attrs.members)
    if want != len(inputs):
        raise ShapeError(f"the members take {want} operands in all, the group has {len(inputs)}")


def _infer(inputs, attrs: GroupedAttrs):
    _check(inputs, attrs)
    types = []
    for i, (m, own) in enumerate(zip(attrs.members, attrs.split(inputs))):
        t = infer_types(attrs.kind, own, m.attrs, f"member {i}")
        if len(t) != m.num_outputs:
            raise ShapeError(f"member {i} ({attrs.kind.value}) has {len(t)} results, the group says {m.num_outputs}")
        types += t
    return types


def _reference(args, attrs: GroupedAttrs, ctx: RefContext):
    ref = get_opdef(attrs.kind).reference
    outs = []
    shapes = attrs.split(ctx.out_shapes, outputs=True)
    for m, own, sh in zip(attrs.members, attrs.split(args), shapes):
        outs += list(ref(own, m.attrs, RefContext(tuple(sh), ctx.env)))
    return outs


register(OpKind.GROUPED, Category.GROUPED, GroupedAttrs, _infer, _reference, num_inputs=(1, 1 << 16))


def grouped(kind: OpKind, members: Sequence[tuple[Sequence[Tensor], Any]],
            name: Optional[str] = None) -> list[list[Tensor]]:
    """One GROUPED op over (operands, attrs) per member; returns each member's results."""
    ms, inputs = [], []
    for i, (own, attrs) in enumerate(members):
        n_out = len(infer_types(kind, list(own), attrs, f"member {i}"))
        ms.append(GroupMember(attrs, len(own), n_out))
        inputs += list(own)
    a = GroupedAttrs(kind, tuple(ms))
    return a.split(make_op(OpKind.GROUPED, inputs, a, name), outputs=True)


def member_ops(op: Op) -> list[Op]:
    """A GROUPED op's members as stand-alone Ops over its tensors (for lowering; they are not
    linked into the graph: no tensor lists them as its reader or producer)."""
    a: GroupedAttrs = op.attrs
    return [Op(a.kind, ins, outs, m.attrs, name=f"{op.name or 'grouped'}.{i}")
            for i, (m, ins, outs) in enumerate(zip(a.members, a.split(op.inputs), a.split(op.outputs, outputs=True)))]
