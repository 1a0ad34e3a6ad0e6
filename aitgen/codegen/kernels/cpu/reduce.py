"""Reductions -> one kernel each (backends/cpu/templates/reduce.cpp.j2, arg_reduce.cpp.j2).

The loop shape (groups of kept and reduced dims, "row" or "col" mode) is common/reduce.py's, which
every backend shares. Global average pooling is the "col" case [N, H*W, C].
"""
from __future__ import annotations

from ....ir.dims import prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.reduce import REDUCE_OPS, reduce_plan
from .norm import PAR_THRESHOLD

# Outputs per task in "col" mode: the accumulators of a task live on the stack.
COL_BLOCK = 128
# Rows a float32 partial sum covers before it is added into double (accuracy of long columns).
COL_CHUNK = 256
# Accumulator lanes of the "row" kernel's integer sums and extrema (two AVX-512 registers of int32).
ROW_LANES = 32


def reduce_call(ctx: LowerContext, op: str, x: Tensor, out: Tensor, axes: set[int], label: str,
                correction: int = 0) -> KernelCall:
    kinds, sizes, mode, kept, red, ct = reduce_plan(op, x, axes)
    spec = KernelSpec.make(ctx.template("reduce.cpp.j2"), op=op, mode=mode,
                           kinds=["R" if r else "K" for r in kinds], kept=kept, red=red,
                           t=STORAGE[x.dtype], out_t=STORAGE[out.dtype], ct=ct,
                           load=load(x.dtype, "x", "i"), store=store(out.dtype, "VAL"),
                           fsum=op in ("sum", "mean", "var") and ct == "float", correction=correction,
                           block=COL_BLOCK, chunk=COL_CHUNK, lanes=ROW_LANES, par_threshold=PAR_THRESHOLD)
    return KernelCall(spec, [out, x], list(sizes), label)


@lowering("cpu", *REDUCE_OPS)
def lower_reduce(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    assert x.dtype is not DType.bool
    return [reduce_call(ctx, REDUCE_OPS[op.kind], x, out, set(op.attrs.axes), op.name or op.kind.value,
                        op.attrs.correction)]


# Columns of the inner dim per argmax task (the best values of a task live on the stack).
ARG_BLOCK = 64


@lowering("cpu", OpKind.ARGMAX, OpKind.ARGMIN)
def lower_arg_reduce(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    ax = op.attrs.axis
    spec = KernelSpec.make(ctx.template("arg_reduce.cpp.j2"), op="max" if op.kind is OpKind.ARGMAX else "min",
                           cmp=">" if op.kind is OpKind.ARGMAX else "<", last=bool(op.attrs.select_last_index),
                           t=STORAGE[x.dtype], ct=COMPUTE[x.dtype], load=load(x.dtype, "x", "i"),
                           block=ARG_BLOCK, par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [out, x], [prod(x.shape[:ax]), x.shape[ax], prod(x.shape[ax + 1:])],
                       op.name or op.kind.value)]
