"""Fused element-wise expressions: the DAG that fusion passes build and every backend renders once.

An `Expr` is a small SSA program over slots: slots 0..num_inputs-1 are its operands, then one slot
per node, in order. It is used two ways:
- FUSED_ELEMENTWISE: a group of element-wise ops as one op (one pass over memory); its outputs are
  the slots listed in `outputs` (an intermediate still read outside the group is an extra output).
- an `Epilogue` on GEMM / BMM / CONV2D: slot 0 is the op's own result (bias included), the other
  slots are extra operands appended after the op's own (residual, per-channel scale, ...).
The reference evaluates each node with its op's own numpy reference in the compute type the
kernels use (float32 for every float type, no rounding between nodes).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.dims import Dim
from ..ir.dtype import DType, compute_dtype
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .elementwise import broadcast_shapes
from .registry import Category, RefContext, get_opdef, make_op, register

MAX_EXTRA = 8  # epilogue operands beyond the op's own

__all__ = ["ExprNode", "Expr", "FusedElementwiseAttrs", "Epilogue", "fused_elementwise"]


@dataclasses.dataclass(frozen=True)
class ExprNode:
    kind: OpKind           # an element-wise kind
    attrs: Any             # that kind's attrs dataclass
    args: tuple[int, ...]  # slots read
    dtype: DType           # the node's result type


@dataclasses.dataclass(frozen=True)
class Expr:
    num_inputs: int
    nodes: tuple[ExprNode, ...]
    outputs: tuple[int, ...]  # slots that leave the expression

    def slot_dtypes(self, input_dtypes: Sequence[DType]) -> list[DType]:
        return list(input_dtypes) + [n.dtype for n in self.nodes]

    def kinds(self) -> list[OpKind]:
        return [n.kind for n in self.nodes]

    def evaluate(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """numpy: every node through its op's reference; float slots stay float32 (float64 ones
        float64), as the oracle computes each op."""
        slots: list[np.ndarray] = [np.asarray(a) for a in args]
        for n in self.nodes:
            operands = [slots[i] for i in n.args]
            shape = np.broadcast_shapes(*[o.shape for o in operands])
            (v,) = get_opdef(n.kind).reference(operands, n.attrs, RefContext((shape,), {}))
            v = np.asarray(v)
            slots.append(v.astype(compute_dtype(n.dtype), copy=False))
        return [slots[i] for i in self.outputs]

    def __str__(self) -> str:
        """Readable and stable for golden files: {s2 = mul(s0, s1); s3 = tanh(s2) -> s2, s3}."""
        from ..ir.printer import format_attrs
        body = [f"s{self.num_inputs + i} = {n.kind.value}{format_attrs(n.attrs)}("
                + ", ".join(f"s{a}" for a in n.args) + ")" for i, n in enumerate(self.nodes)]
        return "{" + "; ".join(body) + " -> " + ", ".join(f"s{o}" for o in self.outputs) + "}"

    def validate(self) -> None:
        for i, n in enumerate(self.nodes):
            if get_opdef(n.kind).category is not Category.ELEMENTWISE:
                raise ShapeError(f"expression node {i} is {n.kind.value}, not an element-wise op")
            if any(a < 0 or a >= self.num_inputs + i for a in n.args):
                raise ShapeError(f"expression node {i} reads a slot that is not defined before it")
        if not self.outputs or any(o < 0 or o >= self.num_inputs + len(self.nodes) for o in self.outputs):
            raise ShapeError("expression outputs name undefined slots")


@dataclasses.dataclass(frozen=True)
class FusedElementwiseAttrs:
    expr: Expr
    # per operand: None, or a strided window of it read instead (ops/operand_views.py)
    operand_views: Optional[tuple[Any, ...]] = None


def _infer_fused(inputs, attrs: FusedElementwiseAttrs):
    from .operand_views import logical_inputs
    inputs = logical_inputs(inputs, attrs)
    e = attrs.expr
    e.validate()
    if len(inputs) != e.num_inputs:
        raise ShapeError(f"expression takes {e.num_inputs} operands, got {len(inputs)}")
    shape = broadcast_shapes(*[t.shape for t in inputs])
    dtypes = e.slot_dtypes([t.dtype for t in inputs])
    return [(shape, dtypes[o]) for o in e.outputs]


def _ref_fused(args, attrs: FusedElementwiseAttrs, ctx):
    if attrs.operand_views is not None:
        from .attention import _read
        args = [_read(a, v, ctx.env) for a, v in zip(args, attrs.operand_views)]
    outs = attrs.expr.evaluate(args)
    return [np.broadcast_to(o, s).copy() for o, s in zip(outs, ctx.out_shapes)]


register(OpKind.FUSED_ELEMENTWISE, Category.ELEMENTWISE, FusedElementwiseAttrs, _infer_fused, _ref_fused,
         num_inputs=(1, 64))


def fused_elementwise(inputs: Sequence[Tensor], expr: Expr, name: Optional[str] = None) -> list[Tensor]:
    return make_op(OpKind.FUSED_ELEMENTWISE, list(inputs), FusedElementwiseAttrs(expr), name)


def single_op_expr(op) -> Expr:
    """A lone element-wise op as an expression of one node (the fused path takes it as it is)."""
    n = len(op.inputs)
    return Expr(n, (ExprNode(op.kind, op.attrs, tuple(range(n)), op.outputs[0].dtype),), (n,))


# -- epilogues on GEMM / BMM / CONV2D -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Epilogue:
    """expr(slot 0 = the op's result incl. bias, slots 1.. = the extra operands) -> one output."""
    expr: Expr

    def __str__(self) -> str:
        return str(self.expr)

    @property
    def num_extra(self) -> int:
        return self.expr.num_inputs - 1


def split_operands(inputs: Sequence, attrs) -> tuple[list, list]:
    """(the op's own operands, the epilogue's extra operands)."""
    ep: Optional[Epilogue] = getattr(attrs, "epilogue", None)
    n = ep.num_extra if ep is not None else 0
    return list(inputs[:len(inputs) - n]), list(inputs[len(inputs) - n:])


def with_epilogue_infer(infer: Callable) -> Callable:
    """Wrap an op's inference: the epilogue's extras must broadcast to the result's shape."""
    def wrapped(inputs, attrs):
        own, extra = split_operands(inputs, attrs)
        ((shape, dtype),) = infer(own, attrs)
        ep: Optional[Epilogue] = getattr(attrs, "epilogue", None)
        if ep is None:
            return [(shape, dtype)]
        ep.expr.validate()
        if len(ep.expr.outputs) != 1:
            raise ShapeError("an epilogue has exactly one output")
        for t in extra:
            if broadcast_shapes(shape, t.shape) != tuple(shape):
                raise ShapeError(f"epilogue operand '{t.name}' {list(t.shape)} does not broadcast to the "
                                 f"result {list(shape)}")
        dtypes = ep.expr.slot_dtypes([dtype] + [t.dtype for t in extra])
        return [(tuple(shape), dtypes[ep.expr.outputs[0]])]
    return wrapped


def with_epilogue_reference(ref: Callable) -> Callable:
    def wrapped(args, attrs, ctx):
        own, extra = split_operands(args, attrs)
        ep: Optional[Epilogue] = getattr(attrs, "epilogue", None)
        if ep is None:
            return ref(own, attrs, ctx)
        (acc,) = ref(own, attrs, ctx)
        acc = np.asarray(acc)
        (out,) = ep.expr.evaluate([acc if acc.dtype == np.float64 else acc.astype(np.float32)] + list(extra))
        return [np.broadcast_to(out, ctx.out_shapes[0]).copy()]
    return wrapped


def expr_shape_ok(shape: Sequence[Dim], operand_shapes: Sequence[Sequence[Dim]]) -> bool:
    """Every operand broadcasts to `shape` without enlarging it."""
    try:
        return all(tuple(broadcast_shapes(shape, s)) == tuple(shape) for s in operand_shapes)
    except (ShapeError, DTypeError):
        return False
