"""ONNX reductions: ReduceSum/Mean/Max/Min/Prod on the IR's reduce ops; ReduceL1/L2/SumSquare/
LogSum/LogSumExp decomposed over them and element-wise ops; ArgMax/ArgMin on the IR's argmax;
CumSum/CumProd on the IR's scans; TopK on the IR's top_k; Det on the IR's det (ops/linalg.py).

Axes are an attribute before opset 18 (ReduceSum: 13) and an optional input from it on; no axes
reduce everything unless noop_with_empty_axes makes the node an identity. A reduction over a
statically empty axis has a known answer whatever the data (0 for sums, 1 for a product, -inf
for a max, ...): it becomes an import-time constant, as ONNX defines it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import IntImm, prod
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from . import _dynamic
from .ops_nn import norm_axis
from .registry import NodeContext, onnx_op

_SIMPLE = {"ReduceSum": ops.reduce_sum, "ReduceMean": ops.reduce_mean, "ReduceMax": ops.reduce_max,
           "ReduceMin": ops.reduce_min, "ReduceProd": ops.reduce_prod}
_DECOMPOSED = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
# Opset from which axes are an input rather than an attribute.
_AXES_INPUT = {"ReduceSum": 13}


def _axes(ctx: NodeContext, x: Tensor) -> Optional[list[int]]:
    """The reduced axes, normalised and sorted; None means the node is an identity."""
    if ctx.opset >= _AXES_INPUT.get(ctx.op_type, 18):
        axes = ctx.ints(1, "axes")
        noop = bool(ctx.attr("noop_with_empty_axes", 0))
    else:
        a = ctx.attr("axes", None)
        axes, noop = (None if a is None else list(a)), False
    if not axes:
        return None if noop else list(range(x.ndim))
    out = sorted({norm_axis(ctx, a, x.ndim, "axes entry") for a in axes})
    if len(out) != len(axes):
        raise ctx.malformed(f"axes {axes} repeats an axis")
    return out


def _empty_result(ctx: NodeContext, x: Tensor, axes: list[int], keep: bool):
    """The value of a reduction over an empty axis, when the output shape is static."""
    shape = [IntImm(1) if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
    if not all(d.is_static for d in shape):
        raise ctx.unsupported("a reduction over an empty axis with a dynamic output shape")
    arr = np.full([d.value for d in shape], _empty_value(ctx, x), dtype=x.dtype.np if not x.dtype.is_float else np.float32)
    return ctx.constant_value(arr.astype(x.dtype.np) if x.dtype.is_float else arr)


def _empty_value(ctx: NodeContext, x: Tensor):
    """What the node's reduction of no elements is."""
    dt = x.dtype.np if not x.dtype.is_float else np.float32
    kind = ctx.op_type
    if kind == "ReduceMax":
        val = -np.inf if x.dtype.is_float else np.iinfo(dt).min
    elif kind == "ReduceMin":
        val = np.inf if x.dtype.is_float else np.iinfo(dt).max
    elif kind == "ReduceProd":
        val = 1
    elif kind in ("ReduceLogSum", "ReduceLogSumExp"):
        val = -np.inf
    elif kind == "ReduceMean":
        val = np.nan
    else:
        val = 0
    return val


def _drop(y: Tensor, axes: list[int], keep: bool) -> Tensor:
    return y if keep else ops.squeeze(y, axes)


@onnx_op(*_SIMPLE, *_DECOMPOSED, min_opset=1)
def _reduce(ctx: NodeContext):
    x = ctx.input(0, "data")
    keep = bool(ctx.attr("keepdims", 1))
    if ctx.opset >= _AXES_INPUT.get(ctx.op_type, 18) and _dynamic.run_time(ctx, 1):
        if prod(_dynamic.sizes_operand(ctx, 1, "axes").shape).value == 0:  # no axes: nothing to read
            return x if ctx.attr("noop_with_empty_axes", 0) else _reduce_static(ctx, x, list(range(x.ndim)), keep)
        # Axes fed as data: reduce a view whose reduced axes are static (_dynamic.reduce_input).
        y, axes, out = _dynamic.reduce_input(ctx, x, 1, keep)
        if any(d.is_static and d.value == 0 for d in x.shape):
            # No elements: the result is empty, or (the empty axis reduced) the reduction's value
            # of nothing everywhere; a sum of y (0 everywhere) carries the shape the run binds.
            boolean = x.dtype == DType.bool
            val = (ctx.op_type == "ReduceMin") if boolean else _empty_value(ctx, x)
            zero = ops.reduce_sum(ops.cast(y, DType.int32) if boolean else y, axes, keepdims=False)
            dt = zero.dtype
            fill = ops.cast(constant(np.asarray(val, np.float64 if dt.is_float else dt.np)), dt)
            z = ops.add(ops.mul(zero, ops.cast(constant(np.zeros((), np.int32)), dt)), fill)
            z = ops.cast(z, DType.bool) if boolean else z
        else:
            z = _reduce_static(ctx, y, axes, False)
        return z if out is None else _dynamic.view(z, out, ctx.name)
    axes = _axes(ctx, x)
    if axes is None:
        return x
    return _reduce_static(ctx, x, axes, keep)


def _reduce_static(ctx: NodeContext, x: Tensor, axes: list[int], keep: bool):
    if x.dtype == DType.bool:
        # max over bools is any(), min is all(): exact on 0/1 integers.
        if ctx.op_type not in ("ReduceMax", "ReduceMin"):
            raise ctx.unsupported(f"{ctx.op_type} over bool")
        if any(x.shape[a].is_static and x.shape[a].value == 0 for a in axes):
            shape = [1 if i in axes else d.value for i, d in enumerate(x.shape) if keep or i not in axes]
            return ctx.constant_value(np.full(shape, ctx.op_type == "ReduceMin", dtype=bool))
        y = _SIMPLE[ctx.op_type](ops.cast(x, DType.int32), axes, keepdims=keep)
        return ops.cast(y, DType.bool)
    if any(x.shape[a].is_static and x.shape[a].value == 0 for a in axes):
        return _empty_result(ctx, x, axes, keep)
    kind = ctx.op_type
    if kind in _SIMPLE:
        if kind == "ReduceMean" and not x.dtype.is_float:
            raise ctx.unsupported(f"ReduceMean over {x.dtype} (integer division) is not supported")
        return _SIMPLE[kind](x, axes, keepdims=keep)
    if kind == "ReduceL1":
        return ops.reduce_sum(ops.abs(x), axes, keepdims=keep)
    if kind == "ReduceSumSquare":
        return ops.reduce_sum(ops.mul(x, x), axes, keepdims=keep)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{kind} over {x.dtype}")
    if kind == "ReduceL2":
        return ops.sqrt(ops.reduce_sum(ops.mul(x, x), axes, keepdims=keep))
    if kind == "ReduceLogSum":
        return ops.log(ops.reduce_sum(x, axes, keepdims=keep))
    # LogSumExp: max + log(sum(exp(x - max))), which neither overflows nor underflows to -inf.
    m = ops.reduce_max(x, axes, keepdims=True)
    s = ops.reduce_sum(ops.exp(ops.sub(x, m)), axes, keepdims=True)
    return _drop(ops.add(ops.log(s), m), axes, keep)


@onnx_op("ArgMax", "ArgMin", min_opset=1)
def _arg(ctx: NodeContext):
    x = ctx.input(0, "data")
    if x.dtype == DType.bool:
        raise ctx.unsupported(f"{ctx.op_type} over bool")
    if x.ndim == 0:
        raise ctx.malformed("data must have rank >= 1")
    axis = norm_axis(ctx, ctx.attr("axis", 0), x.ndim)
    keep = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    n = x.shape[axis]
    if n.is_static and n.value == 0:
        raise ctx.malformed(f"{ctx.op_type} over the empty axis {axis}")
    fn = ops.argmax if ctx.op_type == "ArgMax" else ops.argmin
    return fn(x, axis, keepdims=keep, select_last_index=last)


@onnx_op("CumSum", min_opset=11)
@onnx_op("CumProd", min_opset=26)
def _cumulative(ctx: NodeContext):
    x = ctx.input(0, "x")
    if x.dtype == DType.bool:
        raise ctx.unsupported(f"{ctx.op_type} over bool")
    fn = ops.cumsum if ctx.op_type == "CumSum" else ops.cumprod
    if _dynamic.run_time(ctx, 1) and x.ndim >= 1:
        # The axis fed as data: the scan runs along the middle of an [outer, n, inner] view.
        y = fn(_dynamic.along_axis(ctx, x, 1), 1, exclusive=bool(ctx.attr("exclusive", 0)),
               reverse=bool(ctx.attr("reverse", 0)))
        return _dynamic.view(y, list(x.shape), ctx.name)
    axis = ctx.require_const(1, "axis")
    if axis.size != 1 or axis.dtype.kind not in "iu":
        raise ctx.malformed(f"axis must be one integer, got {axis.tolist()}")
    if x.ndim == 0:
        raise ctx.malformed("x must have rank >= 1")
    a = norm_axis(ctx, int(axis.reshape(-1)[0]), x.ndim)
    fn = ops.cumsum if ctx.op_type == "CumSum" else ops.cumprod
    return fn(x, a, exclusive=bool(ctx.attr("exclusive", 0)), reverse=bool(ctx.attr("reverse", 0)))


@onnx_op("TopK", min_opset=1)
def _top_k(ctx: NodeContext):
    # k: an attribute before opset 10, then a 1-element int64 input that must be known at import
    # time (it sets the output shape). `sorted=0` leaves the order to the runtime: sorted is one.
    x = ctx.input(0, "X")
    if x.dtype == DType.bool:
        raise ctx.unsupported("TopK over bool")
    if x.ndim == 0:
        raise ctx.malformed("X must have rank >= 1")
    if ctx.opset >= 10 and _dynamic.run_time(ctx, 1):  # K known only to the run: a produced size
        axis = norm_axis(ctx, ctx.attr("axis", -1), x.ndim)
        y, k = _dynamic.top_k_input(ctx, x, axis)
        return list(ops.top_k(y, k, axis, largest=bool(ctx.attr("largest", 1)) if ctx.opset >= 11 else True))
    if ctx.opset >= 10:
        k = ctx.require_const(1, "K")
        if k.size != 1 or k.dtype.kind not in "iu":
            raise ctx.malformed(f"K must be one integer, got {k.tolist()}")
        k = int(k.reshape(-1)[0])
    else:
        k = int(ctx.attr("k"))
    axis = norm_axis(ctx, ctx.attr("axis", -1), x.ndim)
    n = x.shape[axis]
    if k < 0 or (n.is_static and k > n.value):
        raise ctx.malformed(f"K={k} is outside [0, {n}] (axis {axis} of X)")
    if k > n.lower:
        raise ctx.unsupported(f"K={k} exceeds the smallest size {n.lower} that the dynamic axis {axis} ({n}) may take")
    return list(ops.top_k(x, k, axis, largest=bool(ctx.attr("largest", 1)) if ctx.opset >= 11 else True))


@onnx_op("Det", min_opset=11)
def _det(ctx: NodeContext):
    x = ctx.input(0, "X")
    if not x.dtype.is_float:
        raise ctx.unsupported(f"Det over {x.dtype}: float inputs only")
    if x.ndim < 2 or not x.shape[-1].is_static or x.shape[-1] != x.shape[-2]:
        raise ctx.malformed(f"X must be [..., n, n] with a static n, got {[str(d) for d in x.shape]}")
    return ops.det(x, name=ctx.name)
