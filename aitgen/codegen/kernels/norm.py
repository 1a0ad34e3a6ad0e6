"""Norms and softmax -> one kernel each (backends/cpu/templates/norm_*.cpp.j2, softmax.cpp.j2).

Every norm normalises over trailing dims, so x is viewed as rows: layernorm / rmsnorm as
[rows, n] (n = the normalised dims), batchnorm as [rows, C], groupnorm as [N, S, C]. Softmax is
viewed as [outer, axis, inner]; when nothing follows the axis the rows are contiguous and the kernel
takes its fast path. Sizes are dims, so one kernel serves every layer and every dynamic size.
"""
from __future__ import annotations

from ...ir.dims import IntImm, prod
from ...ir.dtype import DType
from ...ir.op import Op, OpKind
from ..cexpr import STORAGE
from ..lower import LowerContext, lowering
from ..spec import KernelCall, KernelSpec

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


@lowering("cpu", OpKind.LAYERNORM, OpKind.RMSNORM)
def lower_rownorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    k = op.attrs.num_axes
    rows, n = prod(x.shape[:-k]), prod(x.shape[-k:])
    layer = op.kind is OpKind.LAYERNORM
    spec = KernelSpec.make(ctx.template("norm_rows.cpp.j2"), mode="layer" if layer else "rms",
                           t=STORAGE[x.dtype], has_weight=len(op.inputs) > 1, has_bias=len(op.inputs) > 2,
                           eps=c_float(op.attrs.eps), par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [out, *op.inputs], [rows, n], _label(op))]


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
    x, out = op.inputs[0], op.outputs[0]
    if x.ndim == 0:  # softmax of a scalar is 1: a one-element row
        dims = [IntImm(1), IntImm(1), IntImm(1)]
        last = True
    else:
        a = op.attrs.axis
        inner = prod(x.shape[a + 1:])
        dims = [prod(x.shape[:a]), x.shape[a], inner]
        last = inner == 1
    spec = KernelSpec.make(ctx.template("softmax.cpp.j2"), mode="last" if last else "strided",
                           t=STORAGE[x.dtype], store_exp=x.dtype is DType.float32, block=SOFTMAX_BLOCK,
                           row_buf=SOFTMAX_ROW_BUF, par_threshold=PAR_THRESHOLD)
    return [KernelCall(spec, [out, x], dims, _label(op))]
