"""Pooling -> one kernel each: max / average windows over NHWC (backends/cpu/templates/pool.cpp.j2),
global average pooling as the reduce kernel's [N, H*W, C] mean (channels the contiguous vector dim).

Window attributes are static params; N, H, W, C and the output's HO, WO are dims (HO and WO come
from the op's own shape rule, ceil mode included, so the kernel never recomputes them).
"""
from __future__ import annotations

from ....ir.op import Op, OpKind
from ....ir.dtype import DType
from ...cexpr import COMPUTE, STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .norm import PAR_THRESHOLD
from .reduce import reduce_call



@lowering("cpu", OpKind.MAX_POOL2D, OpKind.AVG_POOL2D)
def lower_pool2d(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    a = op.attrs
    is_max = op.kind is OpKind.MAX_POOL2D
    spec = KernelSpec.make(ctx.template("pool.cpp.j2"), kind="max" if is_max else "avg",
                           kernel=list(a.kernel), stride=list(a.stride), pad=list(a.padding),
                           dilation=list(a.dilation), include_pad=bool(a.count_include_pad) and not is_max,
                           t=STORAGE[x.dtype], ct=COMPUTE[x.dtype] if is_max or x.dtype is DType.float64 else "float",
                           par_threshold=PAR_THRESHOLD)
    n, h, w, c = x.shape
    _, ho, wo, _ = out.shape
    return [KernelCall(spec, [out, x], [n, h, w, c, ho, wo], op.name or op.kind.value)]


@lowering("cpu", OpKind.GLOBAL_AVG_POOL)
def lower_global_avg_pool(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return [reduce_call(ctx, "mean", op.inputs[0], op.outputs[0], {1, 2}, op.name or op.kind.value)]
