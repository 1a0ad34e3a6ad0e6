"""GPU (CUDA and ROCm, one source: gpu/dialect.py) norms -> one kernel each: layernorm / rmsnorm over rows with their prologue (residual add
and the like, evaluated as the row is read) in backends/gpu/templates/norm_rows.cu.j2, batchnorm
(norm_batch.cu.j2), groupnorm (norm_group.cu.j2). The views and dims are the CPU lowering's
(codegen/kernels/cpu/norm.py): [rows, n] for row norms, [rows, C] for batchnorm, [N, S, C] for
groupnorm, and the prologue's params and dims come from common/prologue.py prologue_params.

Row kernels keep a row in registers between its statistics and its output, so memory is read
once: a warp per row up to warp_row_max(warp) elements, a block of ROW_BLOCK threads up to
BLOCK_ROW_MAX, and a block that reads the row twice beyond that. Which of them a kernel holds
follows from the bounds of n; the host code picks by the bound size.
"""
from __future__ import annotations

from math import ceil

from ....ir.dims import Dim, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ....ops.prologue import split_prologue
from ...cexpr import COMPUTE, STORAGE, load
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, dialect, template
from ..common.expr import c_float
from ..common.prologue import prologue_params
from .elementwise import BLOCKS_PER_SM, THREADS, pack_elems, static_multiple
from .reduce import BLOCK_PER_SM, ROW_BLOCK, warp_lanes, warp_row_max

BLOCK_ROW_MAX = 8192   # 16 values per thread of a 512-thread block in registers
GROUP_BLOCK = 512      # groupnorm: threads per (sample, group)


def row_params(op: Op, x: Tensor, extras: list[Tensor], row_dims: int) -> tuple[dict, list, list[DType]]:
    """(template params `row` of row_common.inc.j2, the prologue's dims, the dtypes of the operands
    read as packs): x's row, through the prologue when the op has one."""
    pro, pro_dims = prologue_params(op, x, extras, row_dims, qualifier="AIT_HD")
    packed = [x.dtype]
    if pro is not None:
        for k, (e, t) in enumerate(zip(pro["extras"], extras)):
            e.update(k=k, cv=load(t.dtype, "(&v)", "0"))
            if e["dense"]:
                packed.append(t.dtype)
    row = {"x_t": STORAGE[x.dtype], "x_ct": COMPUTE[x.dtype], "x_cv": load(x.dtype, "(&v)", "0"), "pro": pro}
    return row, pro_dims, packed


def row_geometry(n: Dim, dtypes: list[DType], warp: int) -> dict:
    """Pack width and the row kernels a row length needs (template params), for a warp size."""
    row_max = warp_row_max(warp)
    vec = pack_elems(dtypes)
    if static_multiple(n, vec) is False:
        vec = 1
    variants = []
    if n.lower <= row_max:
        variants.append("warp")
    if n.upper > row_max and n.lower <= BLOCK_ROW_MAX:
        variants.append("block")
    if n.upper > BLOCK_ROW_MAX:
        variants.append("stream")

    def items(cap: int, threads: int) -> int:  # values per thread, a multiple of vec
        return vec * ceil(min(n.upper, cap) / (threads * vec))
    tpr = warp_lanes(min(n.upper, row_max), vec, warp)
    return dict(vec=vec, variants=variants, warp_max=row_max, block_max=BLOCK_ROW_MAX, warp_tpr=tpr,
                warp_items=items(row_max, tpr), block_items=items(BLOCK_ROW_MAX, ROW_BLOCK), block=ROW_BLOCK,
                threads=THREADS, per_sm=BLOCKS_PER_SM, block_per_sm=BLOCK_PER_SM, warp=warp)


def _label(op: Op) -> str:
    return op.name or op.kind.value


@lowering(BACKENDS, OpKind.LAYERNORM, OpKind.RMSNORM)
def lower_rownorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    own, extras = split_prologue(op.inputs, op.attrs)
    x, out = own[0], op.outputs[0]
    k = op.attrs.num_axes
    rows, n = prod(x.shape[:-k]), prod(x.shape[-k:])
    row, pro_dims, packed = row_params(op, x, extras, k)
    geo = row_geometry(n, packed + [out.dtype] + [t.dtype for t in own[1:]], dialect(ctx).warp)
    spec = KernelSpec.make(template("norm_rows.cu.j2"), mode="layer" if op.kind is OpKind.LAYERNORM else "rms",
                           t=STORAGE[out.dtype], has_weight=len(own) > 1, has_bias=len(own) > 2,
                           eps=c_float(op.attrs.eps), row=row, first_extra=len(own) + 1, **geo)
    return [KernelCall(spec, [out, *op.inputs], [rows, n, *pro_dims], _label(op))]


@lowering(BACKENDS, OpKind.BATCHNORM)
def lower_batchnorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    c = x.shape[-1]
    vec = pack_elems([x.dtype])
    if static_multiple(c, vec) is False:
        vec = 1
    spec = KernelSpec.make(template("norm_batch.cu.j2"), t=STORAGE[x.dtype], eps=c_float(op.attrs.eps), vec=vec,
                           threads=THREADS, per_sm=BLOCKS_PER_SM)
    return [KernelCall(spec, [out, *op.inputs], [prod(x.shape[:-1]), c], _label(op))]


@lowering(BACKENDS, OpKind.GROUPNORM)
def lower_groupnorm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    spec = KernelSpec.make(template("norm_group.cu.j2"), t=STORAGE[x.dtype], groups=op.attrs.groups,
                           has_weight=len(op.inputs) > 1, has_bias=len(op.inputs) > 2,
                           eps=c_float(op.attrs.eps), block=GROUP_BLOCK, per_sm=BLOCK_PER_SM)
    dims = [x.shape[0], prod(x.shape[1:-1]), x.shape[-1]]
    return [KernelCall(spec, [out, x, *op.inputs[1:]], dims, _label(op))]
