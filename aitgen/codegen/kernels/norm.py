"""Norms and softmax -> one kernel each (backends/cpu/templates/norm_*.cpp.j2, softmax.cpp.j2).

Every norm normalises over trailing dims, so x is viewed as rows: layernorm / rmsnorm as
[rows, n] (n = the normalised dims), batchnorm as [rows, C], groupnorm as [N, S, C]. Softmax is
viewed as [outer, axis, inner]; when nothing follows the axis the rows are contiguous and the kernel
takes its fast path. Sizes are dims, so one kernel serves every layer and every dynamic size.
"""
from __future__ import annotations

from typing import Optional

from ...ir.dims import IntImm, prod
from ...ir.dtype import DType
from ...ir.op import Op, OpKind
from ...ir.tensor import Tensor
from ...ops.prologue import split_prologue
from ..cexpr import COMPUTE, STORAGE, load
from ..lower import LowerContext, lowering
from ..spec import KernelCall, KernelSpec
from .elementwise import broadcast_strides, expr_cpp

# Below this many elements a kernel runs on one thread: an OpenMP fork costs a few microseconds.
PAR_THRESHOLD = 32768
# Inner-dim block of the strided softmax: float32 lanes kept on the stack per task.
SOFTMAX_BLOCK = 128
# Rows up to this long keep their exps in a stack buffer (16 KiB, L1-resident) between passes.
SOFTMAX_ROW_BUF = 4096


def c_float(v: float) -> str:
    """A float32 C++ literal of v (eps values)."""
    return repr(float(v)) + "f"


def _label(op: Op) -> str:
    return op.name or op.kind.value


def prologue_params(op: Op, x: Tensor, extras: list[Tensor], row_dims: int,
                    qualifier: str = "inline") -> tuple[Optional[dict], list]:
    """Template params and extra dims of a row op's prologue (ops/prologue.py), or (None, []).

    The kernel evaluates the prologue over one row of x ([rows, n]) into a float buffer. Extras
    are read at a base computed per row from x's outer dims (appended to the dims, then the outer
    strides of each extra) plus i when the extra covers the row, or at the base alone when it is
    one value per row (`dense` says which). `qualifier` declares the expression's functions (expr_cpp).
    """
    pro = getattr(op.attrs, "prologue", None)
    if pro is None:
        return None, []
    outer = tuple(x.shape[:x.ndim - row_dims])
    cpp = expr_cpp(pro, [x.dtype] + [t.dtype for t in extras], qualifier=qualifier)
    loads, dims = [], list(outer)
    for k, t in enumerate(extras):
        st = broadcast_strides(t.shape, x.shape)
        dense = any(v != 0 for v in st[len(outer):])
        dims.extend(st[:len(outer)])
        loads.append({"t": STORAGE[t.dtype], "ct": COMPUTE[t.dtype], "dense": dense,
                      "load": load(t.dtype, f"e{k}", f"eb{k}" + (" + i" if dense else ""))})
    params = dict(functions=cpp["functions"], statements=cpp["statements"], extras=loads,
                  outer_rank=len(outer), x_t=STORAGE[x.dtype], x_ct=COMPUTE[x.dtype], x_load=load(x.dtype, "x", "r * n + i"),
                  result=f"s{pro.outputs[0]}", text=str(pro))
    return params, dims


@lowering("cpu", OpKind.LAYERNORM, OpKind.RMSNORM)
def lower_rownorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    own, extras = split_prologue(op.inputs, op.attrs)
    x, out = own[0], op.outputs[0]
    k = op.attrs.num_axes
    rows, n = prod(x.shape[:-k]), prod(x.shape[-k:])
    layer = op.kind is OpKind.LAYERNORM
    prologue, pro_dims = prologue_params(op, x, extras, k)
    spec = KernelSpec.make(ctx.template("norm_rows.cpp.j2"), mode="layer" if layer else "rms",
                           t=STORAGE[out.dtype], has_weight=len(own) > 1, has_bias=len(own) > 2,
                           eps=c_float(op.attrs.eps), par_threshold=PAR_THRESHOLD, prologue=prologue,
                           row_buf=SOFTMAX_ROW_BUF)
    return [KernelCall(spec, [out, *op.inputs], [rows, n, *pro_dims], _label(op))]


def lower_grouped_rownorm(op: Op, members: list[Op], ctx: LowerContext) -> list[KernelCall]:
    """Independent layernorms (or rmsnorms) without prologues (group_ops) as one kernel, one
    parallel loop over all their rows (backends/cpu/templates/norm_rows_grouped.cpp.j2). Every
    member gets four pointer slots (out, x, weight, bias); the members agree on having a weight
    and a bias (group_ops' class), and a slot none of them reads repeats x."""
    first = members[0]
    ptrs, dims, eps = [], [], []
    for m in members:
        k = m.attrs.num_axes
        x = m.inputs[0]
        ptrs += [m.outputs[0], x] + list(m.inputs[1:]) + [x] * (3 - len(m.inputs))
        dims += [prod(x.shape[:-k]), prod(x.shape[-k:])]
        eps.append(c_float(m.attrs.eps))
    spec = KernelSpec.make(ctx.template("norm_rows_grouped.cpp.j2"),
                           mode="layer" if first.kind is OpKind.LAYERNORM else "rms", t=STORAGE[first.outputs[0].dtype],
                           has_weight=len(first.inputs) > 1, has_bias=len(first.inputs) > 2,
                           members=[dict(eps=e) for e in eps], par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, ptrs, dims, _label(op))]


@lowering("cpu", OpKind.BATCHNORM)
def lower_batchnorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    spec = KernelSpec.make(ctx.template("norm_batch.cpp.j2"), t=STORAGE[x.dtype], eps=c_float(op.attrs.eps),
                           par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [out, *op.inputs], [prod(x.shape[:-1]), x.shape[-1]], _label(op))]


@lowering("cpu", OpKind.GROUPNORM)
def lower_groupnorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    spec = KernelSpec.make(ctx.template("norm_group.cpp.j2"), t=STORAGE[x.dtype], groups=op.attrs.groups,
                           has_weight=len(op.inputs) > 1, has_bias=len(op.inputs) > 2,
                           eps=c_float(op.attrs.eps), par_threshold=PAR_THRESHOLD)
    dims = [x.shape[0], prod(x.shape[1:-1]), x.shape[-1]]
    return [KernelCall(spec, [out, x, *op.inputs[1:]], dims, _label(op))]


@lowering("cpu", OpKind.SOFTMAX)
def lower_softmax(op: Op, ctx: LowerContext) -> list[KernelCall]:
    own, extras = split_prologue(op.inputs, op.attrs)
    x, out = own[0], op.outputs[0]
    prologue, pro_dims = prologue_params(op, x, extras, 1)  # a prologue implies the last axis
    if x.ndim == 0:  # softmax of a scalar is 1: a one-element row
        dims = [IntImm(1), IntImm(1), IntImm(1)]
        last = True
    else:
        a = op.attrs.axis
        inner = prod(x.shape[a + 1:])
        dims = [prod(x.shape[:a]), x.shape[a], inner]
        last = inner == 1
    spec = KernelSpec.make(ctx.template("softmax.cpp.j2"), mode="last" if last else "strided",
                           t=STORAGE[out.dtype], store_exp=out.dtype is DType.float32, block=SOFTMAX_BLOCK,
                           row_buf=SOFTMAX_ROW_BUF, par_threshold=PAR_THRESHOLD, prologue=prologue)
    return [KernelCall(spec, [out, *op.inputs], dims + pro_dims, _label(op))]
