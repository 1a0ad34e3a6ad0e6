"""The op catalogue as the op families use it: the table (aitgen.ir.opdef, re-exported here) and the
builders that add an op to the graph.

Builders (`aitgen.ops.relu`, ...) call `make_op`; the oracle, the verifier and the passes look an
op up in the table, so every op family needs only its own file.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..errors import ShapeError
from ..ir.op import Op, OpKind
from ..ir.opdef import (  # noqa: F401 - the table's API, for op families and passes
    Category, InferFn, OpDef, RefContext, RefFn, TensorType, get_opdef, infer_types, register,
    registered_kinds)
from ..ir.opdef import describe as _desc  # noqa: F401 - ops.view and ops.gather name operands with it
from ..ir.tensor import Tensor


def make_op(kind: OpKind, inputs: Sequence[Tensor], attrs: Any, name: Optional[str] = None) -> list[Tensor]:
    """Create an op and its output tensors, linked into the graph; returns the outputs."""
    types = infer_types(kind, inputs, attrs, name)
    outs = [Tensor(shape, dtype) for shape, dtype in types]
    op = Op(kind, list(inputs), outs, attrs, name=name)
    for o in outs:
        o.producer = op
    for t in op.inputs:
        if not any(u is op for u in t.users):
            t.users.append(op)
    return outs


def make_op1(kind: OpKind, inputs: Sequence[Tensor], attrs: Any, name: Optional[str] = None) -> Tensor:
    (out,) = make_op(kind, inputs, attrs, name)
    return out


def check(cond: bool, msg: str, err: type = ShapeError) -> None:
    """Raise `err(msg)` unless cond; used by inference functions."""
    if not cond:
        raise err(msg)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {ndim}")
    return axis % ndim if ndim else 0
