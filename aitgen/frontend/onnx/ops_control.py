"""ONNX control flow: If; OptionalHasElement / OptionalGetElement over tensors.

A condition known while importing inlines the branch it selects. A run-time condition runs both
branches and selects element-wise with where(), which is exact when the branches have the same
output shapes and compute nothing that can fail; branches of different shapes are refused.
Loop and Scan are in ops_loop.py.
"""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
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
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            raise ctx.unsupported(f"output {k}: the branches give {a.dtype}{[str(d) for d in a.shape]} and "
                                  f"{b.dtype}{[str(d) for d in b.shape]}; a run-time condition needs equal ones")
        out.append(ops.where(c, a, b))
    return out


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
