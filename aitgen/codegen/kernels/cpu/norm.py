"""Norms -> one kernel each (backends/cpu/templates/norm_*.cpp.j2).

Every norm normalises over trailing dims, so x is viewed as rows: layernorm / rmsnorm as
[rows, n] (n = the normalised dims), batchnorm as [rows, C], groupnorm as [N, S, C]. Sizes are
dims, so one kernel serves every layer and every dynamic size.
"""
from __future__ import annotations

from ....ir.dims import prod
from ....ir.op import Op, OpKind
from ....ops.prologue import split_prologue
from ...cexpr import STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.expr import c_float
from ..common.prologue import prologue_params

# Below this many elements a kernel runs on one thread: an OpenMP fork costs a few microseconds.
PAR_THRESHOLD = 32768
# Rows up to this long keep their exps in a stack buffer (16 KiB, L1-resident) between passes.
SOFTMAX_ROW_BUF = 4096


def label(op: Op) -> str:
    return op.name or op.kind.value


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
    return [KernelCall(spec, [out, *op.inputs], [rows, n, *pro_dims], label(op))]


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
    return [KernelCall(spec, ptrs, dims, label(op))]


@lowering("cpu", OpKind.BATCHNORM)
def lower_batchnorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    spec = KernelSpec.make(ctx.template("norm_batch.cpp.j2"), t=STORAGE[x.dtype], eps=c_float(op.attrs.eps),
                           par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [out, *op.inputs], [prod(x.shape[:-1]), x.shape[-1]], label(op))]


@lowering("cpu", OpKind.GROUPNORM)
def lower_groupnorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    spec = KernelSpec.make(ctx.template("norm_group.cpp.j2"), t=STORAGE[x.dtype], groups=op.attrs.groups,
                           has_weight=len(op.inputs) > 1, has_bias=len(op.inputs) > 2,
                           eps=c_float(op.attrs.eps), par_threshold=PAR_THRESHOLD)
    dims = [x.shape[0], prod(x.shape[1:-1]), x.shape[-1]]
    return [KernelCall(spec, [out, x, *op.inputs[1:]], dims, label(op))]


