"""Kernels that bind produced sizes during the run (aitgen/ops/dynamic.py, ops/nms.py): BIND_DIMS
(backends/cpu/templates/bind_dims.cpp.j2), NONZERO (nonzero.cpp.j2) and NMS (nms.cpp.j2). Each gets the run's dim
table (VARS_PTR) and the slot of each size it writes (VarSlot); a call made after it reads the
bound value, since a call's size arguments are evaluated when it is made."""
from __future__ import annotations

from ....ir.dims import IntImm, IntVar, prod
from ....ir.op import Op, OpKind
from ...cexpr import STORAGE, load
from ...lower import LowerContext, lowering
from ...spec import VARS_PTR, KernelCall, KernelSpec, VarSlot


@lowering("cpu", OpKind.BIND_DIMS)
def lower_bind_dims(op: Op, ctx: LowerContext) -> list[KernelCall]:
    a = op.attrs
    x, values, (out,) = op.inputs[0], op.inputs[1:], op.outputs
    # Where the rule reads values as floats (Range over float tensors) they load as double.
    vals = [{"t": STORAGE[t.dtype], "n": prod(t.shape).value, "is_float": t.dtype.is_float,
             "load": load(t.dtype, f"v{j}", "i"), "data": a.rule == "pad" and j == len(values) - 1}
            for j, t in enumerate(values)]
    slots = [{"bind": True, "lb": s.lb, "ub": s.ub} if isinstance(s, IntVar) and s.produced else {"bind": False}
             for s in a.slots]
    spec = KernelSpec.make(ctx.template("bind_dims.cpp.j2"), rule=a.rule, vals=vals, slots=slots,
                           nk=len(a.known), allowzero=bool(a.allowzero), itemsize=x.dtype.itemsize,
                           nvals=sum(v["n"] for v in vals if not v["data"]),
                           mode=a.operands[-1].split(":", 1)[1] if a.rule == "pad" else "",
                           pad_axes=vals[0]["n"] // 2 if a.rule == "pad" else 0,
                           # slice: where axes and steps start among the values (-1: not given)
                           axes_off=_offset(a.operands, vals, "axes"), steps_off=_offset(a.operands, vals, "steps"), label=a.label or op.name or "bind_dims")
    dims = [prod(x.shape) * x.dtype.itemsize]
    dims += [IntImm(-1) if k is None else k for k in a.known]
    dims += [VarSlot(s) if isinstance(s, IntVar) and s.produced else s for s in a.slots]
    return [KernelCall(spec, [out, x, VARS_PTR, *values], dims, op.name or op.kind.value, writes=[0, 2])]


def _offset(operands: tuple, vals: list, name: str) -> int:
    if name not in operands:
        return -1
    return sum(v["n"] for v in vals[:operands.index(name)])


@lowering("cpu", OpKind.NONZERO)
def lower_nonzero(op: Op, ctx: LowerContext) -> list[KernelCall]:
    (x,), (out,) = op.inputs, op.outputs
    shape = list(x.shape) or [IntImm(1)]   # a scalar counts as one element of a 1-D tensor (ONNX)
    spec = KernelSpec.make(ctx.template("nonzero.cpp.j2"), rank=len(shape), t=STORAGE[x.dtype],
                           nz=load(x.dtype, "x", "i"), ub=op.attrs.count.ub,
                           label=op.attrs.label or op.name or "nonzero")
    return [KernelCall(spec, [out, x, VARS_PTR], [prod(shape), VarSlot(op.attrs.count), *shape],
                       op.name or op.kind.value, writes=[0, 2])]


@lowering("cpu", OpKind.NMS)
def lower_nms(op: Op, ctx: LowerContext) -> list[KernelCall]:
    boxes, scores = op.inputs[:2]
    spec = KernelSpec.make(ctx.template("nms.cpp.j2"), center=bool(op.attrs.center_point_box),
                           score_threshold=bool(op.attrs.score_threshold))
    return [KernelCall(spec, [op.outputs[0], *op.inputs, VARS_PTR],
                       [boxes.shape[0], scores.shape[1], boxes.shape[1], VarSlot(op.attrs.count)],
                       op.name or op.kind.value, writes=[0, 6])]


@lowering("cpu", OpKind.UNIQUE)
def lower_unique(op: Op, ctx: LowerContext) -> list[KernelCall]:
    (x,), ax = op.inputs, op.attrs.axis
    shape = [prod(x.shape)] if ax is None else list(x.shape)
    ax = 0 if ax is None else ax
    spec = KernelSpec.make(ctx.template("unique.cpp.j2"), t=STORAGE[x.dtype], sorted=bool(op.attrs.sorted),
                           load_a=load(x.dtype, "x", "(o * n + a) * inner + i"),
                           load_b=load(x.dtype, "x", "(o * n + b) * inner + i"))
    return [KernelCall(spec, [*op.outputs, x, VARS_PTR],
                       [prod(shape[:ax]), shape[ax], prod(shape[ax + 1:]), VarSlot(op.attrs.count)],
                       op.name or op.kind.value, writes=[0, 1, 2, 3, 5])]
