"""Element-wise ops and fused element-wise groups -> one kernel each.

The math renders once, as one inline function per expression node (common/expr.py expr_cpp),
which GEMM/conv epilogues and every backend reuse; the skeleton is backends/cpu/templates/
elementwise.cpp.j2. A single op is an expression of one node, so both take the same path. The kernel walks the outputs' shape after
merging neighbouring dims that every operand reads alike (dense or broadcast), so a bias add over
[batch, seq, 768] is a [batch*seq, 768] loop and a same-shape DAG is one flat loop.
"""
from __future__ import annotations

from ....ir.dims import prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ops.fused import single_op_expr
from ....ops.registry import Category, registered_kinds, get_opdef
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.access import broadcast_strides, merge_access, view_strides
from ..common.expr import expr_cpp

# One OpenMP fork costs a few microseconds: below this much work (elements x node cost) a kernel
# runs on one thread. Transcendental nodes cost about as much as 8 cheap ones.
PAR_WORK = 65536
_COSTLY = {OpKind.GELU, OpKind.ERF, OpKind.TANH, OpKind.SIGMOID, OpKind.SILU, OpKind.EXP, OpKind.LOG,
           OpKind.POW, OpKind.SQRT, OpKind.RSQRT, OpKind.SIN, OpKind.COS, OpKind.TAN, OpKind.ASIN,
           OpKind.ACOS, OpKind.ATAN, OpKind.SINH, OpKind.COSH, OpKind.ASINH, OpKind.ACOSH, OpKind.ATANH,
           OpKind.EXPM1, OpKind.LOG1P, OpKind.MOD, OpKind.FMOD}


# 16-bit float operands and results of a flat kernel are converted a block at a time
# (aitgen/cpu_convert.h: F16C, or widening moves), not one element at a time in the loop.
_BULK = (DType.float16, DType.bfloat16)
# In strided mode only float16: a row's block costs a buffer pass per operand, which F16C's
# conversions repay and bfloat16's (a shift, which GCC vectorises in the loop) do not: a bfloat16
# bias add over [512, 3072] took 1.24x as long converted in blocks, float16 0.50x.
_BULK_STRIDED = (DType.float16,)


def expr_kernel(expr, outs, ins, views=None, out_strides=None) -> tuple[dict, list]:
    """Template params (backends/cpu/templates/elementwise_body.inc.j2) and dims of one evaluation
    of `expr` over `ins` into `outs` (all of the outputs' shape); the single and the grouped kernel
    take the same ones.

    `views[i]` (a StridedView, or None) reads operand i as a window of its tensor: its strides and
    offset go into the dims. `out_strides`: the strides the (one) output is written at, where it is
    a strided slice of a concat (the memory plan). Dims: the merged output dims; then the outer
    strides of each strided operand; then the output's outer strides (and its innermost one, where
    that is not 1); then, per strided operand whose innermost stride is neither 0 nor 1, that
    stride; then the element offset of each operand read at one.
    """
    out_shape = tuple(outs[0].shape)
    views = list(views) if views is not None else [None] * len(ins)
    in_dtypes = [t.dtype for t in ins]
    cpp = expr_cpp(expr, in_dtypes)
    strides = [broadcast_strides(tuple(t.shape), out_shape) if v is None else view_strides(v, out_shape)
               for t, v in zip(ins, views)]
    if out_strides is not None:
        assert len(outs) == 1, "a strided write is of one output"
        strides.append(list(out_strides))  # merged like an operand's; its plan is the last one
    dims, kinds, merged = merge_access(out_shape, strides)
    out_plan = None
    if out_strides is not None:
        kinds, out_plan = kinds[:-1], merged.pop()
        if out_plan == []:  # the output is dense after all
            out_plan = None
    flat = "strided" not in kinds and out_plan is None
    rank = 1 if flat else len(dims)
    call_dims: list = [prod(out_shape)] if flat else list(dims)
    strided = [i for i, k in enumerate(kinds) if k == "strided"]
    for i in strided:
        call_dims += merged[i][:-1]
    out_at, out_inner = None, "i"
    if out_plan is not None:
        out_at = len(call_dims)
        call_dims += out_plan[:-1]
        if out_plan[-1] != 1:  # a static 1 innermost dim dropped: the row steps at another stride
            out_inner = f"i * d[{len(call_dims)}]"
            call_dims.append(out_plan[-1])
    inner_at: dict[int, int] = {}
    for i in strided:
        if merged[i][-1] != 0 and merged[i][-1] != 1:
            inner_at[i] = len(call_dims)
            call_dims.append(merged[i][-1])
    # Blocks of a 16-bit kernel: in flat mode element b + i is i of the block; in strided mode a
    # row's block starts at b of the row, and an operand (or output) read contiguously along the row
    # is converted in bulk from its row base + b (`row_at`), the others are read element by element.
    args = []
    for i, (t, kind) in enumerate(zip(ins, kinds)):
        row_at = None
        if kind == "scalar":
            idx_flat, idx_strided = "0", lambda iv: "0"
        elif kind == "full":
            idx_flat, idx_strided, row_at = "i", lambda iv: f"row + {iv}", "row"
        else:
            k, step = strided.index(i), merged[i][-1]
            idx_flat = None
            if step == 0:
                idx_strided = lambda iv, k=k: f"base{k}"
            elif step == 1:
                idx_strided, row_at = (lambda iv, k=k: f"base{k} + {iv}"), f"base{k}"
            else:
                idx_strided = lambda iv, k=k, at=inner_at[i]: f"base{k} + {iv} * d[{at}]"
        offset_at = None
        if views[i] is not None and views[i].offset != 0:
            offset_at = len(call_dims)
            call_dims.append(views[i].offset)
        bulk = (t.dtype in _BULK and kind == "full") if flat else (t.dtype in _BULK_STRIDED and row_at is not None)
        if flat:
            load_block = load(t.dtype, f"in{i}", "b + i" if idx_flat == "i" else "0") if idx_flat else ""
        else:
            load_block = load(t.dtype, f"in{i}", idx_strided("(b + i)"))
        args.append({"t": STORAGE[t.dtype], "ct": COMPUTE[t.dtype], "offset_at": offset_at, "bulk": bulk,
                     "row_at": None if flat else row_at, "load_flat": load(t.dtype, f"in{i}", idx_flat) if idx_flat else "",
                     "load_block": f"f{i}[i]" if bulk else load_block,
                     "load_strided": load(t.dtype, f"in{i}", idx_strided("i"))})
    slot_dtypes = expr.slot_dtypes(in_dtypes)
    out_row = "obase" if out_at is not None else "row"
    stores = []
    for j, (o, slot) in enumerate(zip(outs, expr.outputs)):
        bulk = (o.dtype in _BULK) if flat else (o.dtype in _BULK_STRIDED and out_inner == "i")
        at = "b + i" if flat else f"{out_row} + " + out_inner.replace("i", "(b + i)", 1)
        stores.append({"t": STORAGE[o.dtype], "value": store(o.dtype, f"s{slot}"), "bulk": bulk,
                       "row_at": None if flat else out_row,
                       "store_block": f"r{j}[i] = s{slot}" if bulk else f"out{j}[{at}] = {store(o.dtype, f's{slot}')}"})
    for o, slot in zip(outs, expr.outputs):
        assert slot_dtypes[slot] == o.dtype, f"output dtype {o.dtype} vs expression {slot_dtypes[slot]}"
    weight = sum(8 if n.kind in _COSTLY else 1 for n in expr.nodes)
    params = dict(text=str(expr), functions=cpp["functions"], statements=cpp["statements"], args=args,
                  outs=stores, par_threshold=max(4096, PAR_WORK // max(weight, 1)),
                  mode="flat" if flat else "strided", rank=rank, nstrided=len(strided), out_at=out_at,
                  blocked=any(a["bulk"] for a in args) or any(o["bulk"] for o in stores),
                  out_index=f"obase + {out_inner}" if out_at is not None else "row + i")
    return params, call_dims


def lower_expr(expr, outs, ins, ctx: LowerContext, label: str, views=None) -> list[KernelCall]:
    """One kernel evaluating `expr` over `ins` into `outs` (all of the outputs' shape)."""
    params, dims = expr_kernel(expr, outs, ins, views, ctx.plan.strided_writes.get(outs[0]))
    spec = KernelSpec.make(ctx.template("elementwise.cpp.j2"), k=params)
    return [KernelCall(spec, [*outs, *ins], dims, label)]


@lowering("cpu", *[k for k in registered_kinds() if get_opdef(k).category is Category.ELEMENTWISE
                   and k is not OpKind.FUSED_ELEMENTWISE], features=("strided_output",))
def lower_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return lower_expr(single_op_expr(op), op.outputs, op.inputs, ctx, op.name or op.kind.value)


@lowering("cpu", OpKind.FUSED_ELEMENTWISE, features=("operand_views", "strided_output"))
def lower_fused_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return lower_expr(op.attrs.expr, op.outputs, op.inputs, ctx, op.name or op.kind.value,
                      getattr(op.attrs, "operand_views", None))


# -- grouped: independent element-wise ops (group_ops) as one kernel ------------------------------

# Work items of the grouped kernel: about this many elements each (a block of a flat member, a run
# of rows of a strided one), all members' items in one parallel loop.
GROUP_BLOCK = 8192


def lower_grouped_elementwise(op: Op, members: list[Op], ctx: LowerContext) -> list[KernelCall]:
    """One parallel loop over the items of every member (backends/cpu/templates/elementwise_grouped.cpp.j2)."""
    ms, ptrs, dims = [], [], []
    for m in members:
        params, d = expr_kernel(m.attrs.expr, m.outputs, m.inputs, getattr(m.attrs, "operand_views", None),
                                ctx.plan.strided_writes.get(m.outputs[0]))
        ms.append(dict(params, ptr_at=len(ptrs), dims_at=len(dims)))
        ptrs += [*m.outputs, *m.inputs]
        dims += d
    spec = KernelSpec.make(ctx.template("elementwise_grouped.cpp.j2"), members=ms, block=GROUP_BLOCK,
                           par_threshold=min(m["par_threshold"] for m in ms))
    return [KernelCall(spec, ptrs, dims, op.name or op.kind.value)]
