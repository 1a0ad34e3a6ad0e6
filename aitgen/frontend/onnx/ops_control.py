"""ONNX control flow: If; OptionalHasElement / OptionalGetElement over tensors.

A condition known while importing inlines the branch it selects. A run-time condition runs both
branches and selects element-wise with where(), which is exact when the branches compute nothing
that can fail. Outputs whose shapes differ between the branches (same rank and dtype, static
sizes) go through the data-dependent mechanism (aitgen/ops/dynamic.py): both flattened and padded
to the longer, selected, cut to the chosen branch's element count and viewed under its shape, the
differing dims being sizes the run binds. A rank that differs is refused (the IR's ranks are static).
Loop and Scan are in ops_loop.py.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dims import IntImm
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ...ops.dynamic import bind_dims, produced_var
from .registry import Folded, NodeContext, onnx_op


@onnx_op("If", min_opset=1)
def _if(ctx: NodeContext):
    c = ctx.const(0)
    if c is not None:
        if c.size != 1:
            raise ctx.malformed(f"the condition must hold one element, got shape {list(c.shape)}")
        return ctx.inline(ctx.attr("then_branch" if bool(c.reshape(-1)[0]) else "else_branch"))
    cond = ctx.input(0, "cond")
    if cond.dtype != DType.bool:
        raise ctx.malformed(f"the condition must be bool, got {cond.dtype}")
    then, other = ctx.inline(ctx.attr("then_branch")), ctx.inline(ctx.attr("else_branch"))
    if len(then) != len(other) or len(then) != ctx.num_outputs:
        raise ctx.malformed(f"the branches give {len(then)} and {len(other)} outputs for {ctx.num_outputs}")
    c = ops.reshape(cond, [])
    out = []
    for k, (a, b) in enumerate(zip(then, other)):
        a, b = _tensor(a), _tensor(b)
        if a is None or b is None:
            raise ctx.unsupported(f"output {k} of a branch is not a tensor aitgen computes")
        if tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype:
            out.append(ops.where(c, a, b))
            continue
        if a.ndim != b.ndim:
            # The IR's ranks are static, and a branch padded to the other's rank is another tensor
            # (its consumers would broadcast and reduce differently): no exact form exists.
            raise ctx.unsupported(f"output {k}: the branches give rank {a.ndim} {[str(d) for d in a.shape]} and "
                                  f"rank {b.ndim} {[str(d) for d in b.shape]}; under a run-time condition the "
                                  "ranks must agree (aitgen's ranks are fixed when it imports)")
        if a.dtype != b.dtype or not all(d.is_static for d in (*a.shape, *b.shape)):
            raise ctx.unsupported(f"output {k}: the branches give {a.dtype}{[str(d) for d in a.shape]} and "
                                  f"{b.dtype}{[str(d) for d in b.shape]}; under a run-time condition they "
                                  "need the same dtype and rank and static sizes")
        out.append(_select_shapes(ctx, c, a, b, k))
    return out


def _select_shapes(ctx: NodeContext, c: Tensor, a: Tensor, b: Tensor, k: int) -> Tensor:
    """where(c, a, b) for branch outputs of different static shapes (same rank)."""
    sa, sb = [d.value for d in a.shape], [d.value for d in b.shape]
    na, nb = int(np.prod(sa)), int(np.prod(sb))
    n = max(na, nb, 1)

    def flat(t: Tensor, m: int) -> Tensor:
        f = ops.reshape(t, [m])
        return f if m == n else ops.concat([f, constant(np.zeros([n - m], t.dtype.np), dtype=t.dtype)], 0)

    picked = ops.where(c, flat(a, na), flat(b, nb))
    count = produced_var(f"{ctx.name}:elements_{k}", n)
    cnt = ops.where(c, constant(np.array([na], np.int64)), constant(np.array([nb], np.int64)))
    one = bind_dims(constant(np.ones([1], np.int64)), [cnt], "values", [count], name=ctx.name)
    cut = ops.gather(picked, ops.cumsum(ops.expand(one, [count]), 0, exclusive=True), 0)
    shape = ops.where(c, constant(np.array(sa, np.int64)), constant(np.array(sb, np.int64)))
    dims = [IntImm(x) if x == y else produced_var(f"{ctx.name}:{k}:{j}", max(x, y)) for j, (x, y) in enumerate(zip(sa, sb))]
    return bind_dims(cut, [shape], "reshape", dims, shape=dims, known=[count], allowzero=True, name=ctx.name)


def _tensor(v):
    if isinstance(v, Folded):
        return None if v.value.dtype == object else constant(v.value)
    return v if isinstance(v, Tensor) else None




# Optional values: the IR has tensors only, so an optional-typed graph input or a sequence is
# refused where the model declares it; what remains is a tensor (present) or an omitted input.

@onnx_op("OptionalHasElement", min_opset=15)
def _optional_has_element(ctx: NodeContext):
    # An omitted input is an empty optional; any tensor aitgen holds is present.
    return ctx.constant_value(np.array(ctx.has_input(0)))


@onnx_op("OptionalGetElement", min_opset=15)
def _optional_get_element(ctx: NodeContext):
    # A tensor input is its own element (opset 18 allows tensors here); no input is malformed.
    return ctx.input(0, "input")
