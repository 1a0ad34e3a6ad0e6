"""GPU (CUDA and ROCm, one source: gpu/dialect.py) reductions (sum, mean, max, min, var, prod; global average pooling) and arg-reductions
(argmax, argmin) -> one kernel each (backends/gpu/templates/reduce.cu.j2, arg_reduce.cu.j2).

The loop shape is every backend's (codegen/kernels/common/reduce.py reduce_plan): x as groups of kept
and reduced dims; "row" when the last group is reduced (each output reduces a contiguous run,
possibly several), "col" when it is kept (adjacent outputs read adjacent elements). Row outputs
take one warp each while they have at most warp_row_max(warp) elements, one block beyond (both kernels
are built when the size is dynamic and the host code picks by the bound size). Sums accumulate in
float32 (a tree of partial sums: lanes, then warps), integers in their unsigned type (wrapping as
the oracle's fixed-width sum does), variance as Welford states. Arg-reductions keep the CPU
lowering's [outer, n, inner] view: a thread per column walks the axis, or, where the axis is the
contiguous one, a warp per row (shuffles merge candidates).
"""
from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, dialect, template
from ..common.reduce import REDUCE_OPS, reduce_plan
from .elementwise import BLOCKS_PER_SM, THREADS, pack_elems

LANE_ITEMS = 32       # up to 32 elements per lane: one warp per output (1024 on CUDA, 2048 on CDNA)
ROW_BLOCK = 512       # threads per output beyond that
BLOCK_PER_SM = 4      # 4 x 512 threads fill an SM
COL_X, COL_Y = 32, 8  # col mode: 32 adjacent outputs x 8 threads splitting the reduced rows


def row_variants(n: Dim, warp_max: int) -> list[str]:
    """Which row kernels a size needs: "warp" for n <= warp_max, "block" beyond (both when n is
    dynamic and its bounds straddle warp_max)."""
    out = []
    if n.lower <= warp_max:
        out.append("warp")
    if n.upper > warp_max:
        out.append("block")
    return out or ["warp"]


def warp_row_max(warp: int) -> int:
    """The longest row a warp-per-row kernel takes (LANE_ITEMS per lane), for a warp size."""
    return LANE_ITEMS * warp


def warp_lanes(n_max: int, vec: int, warp: int) -> int:
    """Lanes per row of a warp-per-row kernel: a power of two that covers n_max elements in packs
    of vec, at most the warp (short rows share a warp: 16 lanes for softmax rows of 128 halves)."""
    lanes = 1
    while lanes < warp and lanes * vec < n_max:
        lanes *= 2
    return lanes


def _acc_type(op: str, ct: str) -> str:
    if op == "var":
        return "ait::Welford"
    if op in ("max", "min") or ct in ("float", "double"):
        return ct
    return f"typename ait::Acc<{ct}>::type"


def reduce_call_gpu(ctx: LowerContext, op: str, x: Tensor, out: Tensor, axes: set[int], label: str,
                     correction: int = 0) -> KernelCall:
    kinds, sizes, mode, kept, red, ct = reduce_plan(op, x, axes)
    n = prod([sizes[g] for g in red] + ([sizes[-1]] if mode == "row" else []))
    vec = pack_elems([x.dtype]) if mode == "row" and not red else 1
    if vec > 1 and n.is_static and n.value % vec:
        vec = 1
    warp = dialect(ctx).warp
    row_max = warp_row_max(warp)
    spec = KernelSpec.make(template("reduce.cu.j2"), op=op, mode=mode, kinds=["R" if r else "K" for r in kinds],
                           kept=kept, red=red, t=STORAGE[x.dtype], out_t=STORAGE[out.dtype], ct=ct,
                           acc=_acc_type(op, ct), load_value=load(x.dtype, "(&v)", "0"), store=store(out.dtype, "VAL"),
                           correction=correction, vec=vec, item=x.dtype.itemsize,
                           variants=row_variants(n, row_max) if mode == "row" else [],
                           warp_tpr=warp_lanes(min(n.upper, row_max), vec, warp),
                           warp_max=row_max, threads=THREADS, block=ROW_BLOCK, per_sm=BLOCKS_PER_SM,
                           block_per_sm=BLOCK_PER_SM, col_x=COL_X, col_y=COL_Y)
    return KernelCall(spec, [out, x], list(sizes), label)


@lowering(BACKENDS, *REDUCE_OPS)
def lower_reduce(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    assert x.dtype is not DType.bool
    if op.kind is OpKind.REDUCE_VAR and x.dtype is DType.float64:  # ait::Welford accumulates in float32
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': the GPU variance computes in float32, not float64")
    return [reduce_call_gpu(ctx, REDUCE_OPS[op.kind], x, out, set(op.attrs.axes), op.name or op.kind.value,
                             op.attrs.correction)]


@lowering(BACKENDS, OpKind.ARGMAX, OpKind.ARGMIN)
def lower_arg_reduce(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    ax, is_max = op.attrs.axis, op.kind is OpKind.ARGMAX
    spec = KernelSpec.make(template("arg_reduce.cu.j2"), op="max" if is_max else "min", cmp=">" if is_max else "<",
                           last=bool(op.attrs.select_last_index), t=STORAGE[x.dtype], ct=COMPUTE[x.dtype],
                           load_value=load(x.dtype, "(&v)", "0"), threads=THREADS, per_sm=BLOCKS_PER_SM,
                           warp=dialect(ctx).warp)
    dims = [prod(x.shape[:ax]), x.shape[ax], prod(x.shape[ax + 1:])]
    return [KernelCall(spec, [out, x], dims, op.name or op.kind.value)]
