"""The GROUPED lowering every backend registers: a group (group_ops' horizontal fusion) goes to
the lowering of its member kind, which the backend's grouped.py lists; the kinds listed are the
ones group_ops may form for that backend (Capabilities.grouped)."""
from __future__ import annotations

from typing import Callable

from ....errors import UnsupportedOpError
from ....ir.op import Op, OpKind
from ....ops.grouped import member_ops
from ...lower import LowerContext, lowering
from ...spec import KernelCall

MemberLowering = Callable[[Op, list, LowerContext], list[KernelCall]]


def register_grouped(backend: str, label: str, members: dict[OpKind, MemberLowering]) -> None:
    """Register `backend`'s GROUPED lowering over `members` (member kind -> its lowering); `label`
    names the backend in the error for any other kind."""
    @lowering(backend, OpKind.GROUPED, grouped=tuple(members))
    def lower_grouped(op: Op, ctx: LowerContext) -> list[KernelCall]:
        fn = members.get(op.attrs.kind)
        if fn is None:
            raise UnsupportedOpError(f"grouped op '{op.name}': no {label} kernel for groups of {op.attrs.kind.value}")
        return fn(op, member_ops(op), ctx)
