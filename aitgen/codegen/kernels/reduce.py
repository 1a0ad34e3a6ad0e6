"""Reductions -> one kernel each (backends/cpu/templates/reduce.cpp.j2).

x is viewed as groups of adjacent dims that are all kept (K) or all reduced (R); static size-1
dims are dropped (they change no index). The last group picks the loop shape: a reduced last group
is a contiguous run reduced per output ("row"), a kept last group is a contiguous block of outputs
accumulated across the reduced groups ("col"). Group sizes are dims, so one kernel serves every
shape with the same grouping. Global average pooling is the "col" case [N, H*W, C].
"""
from __future__ import annotations

from typing import Sequence

from ...ir.dims import Dim, IntImm, prod
from ...ir.dtype import DType
from ...ir.op import Op, OpKind
from ...ir.tensor import Tensor
from ..cexpr import COMPUTE, STORAGE, load, store
from ..lower import LowerContext, lowering
from ..spec import KernelCall, KernelSpec
from .norm import PAR_THRESHOLD

# Outputs per task in "col" mode: the accumulators of a task live on the stack.
COL_BLOCK = 128
# Rows a float32 partial sum covers before it is added into double (accuracy of long columns).
COL_CHUNK = 256
# Accumulator lanes of the "row" kernel's integer sums and extrema (two AVX-512 registers of int32).
ROW_LANES = 32

_OPS = {OpKind.REDUCE_SUM: "sum", OpKind.REDUCE_MEAN: "mean", OpKind.REDUCE_MAX: "max",
        OpKind.REDUCE_MIN: "min", OpKind.REDUCE_VAR: "var", OpKind.REDUCE_PROD: "prod"}


def group_axes(shape: Sequence[Dim], reduced: set[int]) -> tuple[list[bool], list[Dim]]:
    """(is_reduced per group, group sizes) of `shape`: adjacent dims of one kind merged, static
    1s dropped, and a size-1 group of a kind added when none is left (so both kinds exist)."""
    kinds: list[bool] = []
    sizes: list[Dim] = []
    for i, d in enumerate(shape):
        if d.is_static and d.value == 1:
            continue
        r = i in reduced
        if kinds and kinds[-1] == r:
            sizes[-1] = sizes[-1] * d
        else:
            kinds.append(r)
            sizes.append(d)
    if True not in kinds:  # nothing left to reduce: every output reduces one element
        kinds.append(True)
        sizes.append(IntImm(1))
    if False not in kinds:  # everything reduced: one output
        kinds.insert(0, False)
        sizes.insert(0, IntImm(1))
    return kinds, sizes


def reduce_plan(op: str, x: Tensor, axes: set[int]) -> tuple[list[bool], list[Dim], str, list[int], list[int], str]:
    """The loop shape of a reduction, on every backend: (is_reduced per group, group sizes, mode,
    the kept groups and the reduced groups that index outputs / runs, compute type)."""
    kinds, sizes = group_axes(x.shape, axes)
    last = len(kinds) - 1
    mode = "row" if kinds[-1] else "col"
    kept = [g for g, r in enumerate(kinds) if not r and (mode == "row" or g != last)]
    red = [g for g, r in enumerate(kinds) if r and (mode == "col" or g != last)]
    ct = "float" if op in ("mean", "var") else COMPUTE[x.dtype]
    return kinds, sizes, mode, kept, red, ct


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


@lowering("cpu", *_OPS)
def lower_reduce(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    assert x.dtype is not DType.bool
    return [reduce_call(ctx, _OPS[op.kind], x, out, set(op.attrs.axes), op.name or op.kind.value,
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


@lowering("cpu", OpKind.CUMSUM, OpKind.CUMPROD)
def lower_scan(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    ax = op.attrs.axis
    spec = KernelSpec.make(ctx.template("scan.cpp.j2"), op="sum" if op.kind is OpKind.CUMSUM else "prod",
                           exclusive=bool(op.attrs.exclusive), reverse=bool(op.attrs.reverse),
                           t=STORAGE[x.dtype], ct=COMPUTE[x.dtype], load=load(x.dtype, "x", "i"),
                           store=store(out.dtype, "VAL"), block=ARG_BLOCK, par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [out, x], [prod(x.shape[:ax]), x.shape[ax] if x.ndim else 1, prod(x.shape[ax + 1:])],
                       op.name or op.kind.value)]


@lowering("cpu", OpKind.TOPK)
def lower_top_k(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, (vals, idx) = op.inputs[0], op.outputs
    ax = op.attrs.axis
    spec = KernelSpec.make(ctx.template("topk.cpp.j2"), largest=bool(op.attrs.largest),
                           t=STORAGE[x.dtype], ct=COMPUTE[x.dtype], load=load(x.dtype, "x", "i"),
                           par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [vals, idx, x], [prod(x.shape[:ax]), x.shape[ax], prod(x.shape[ax + 1:]),
                                              IntImm(op.attrs.k)], op.name or op.kind.value)]
