"""GPU (CUDA and ROCm, one source: gpu/dialect.py) element-wise ops and fused element-wise groups -> one kernel each
(backends/gpu/templates/elementwise.cu.j2).

The math is the CPU's: expr_cpp renders the expression once, as __host__ __device__ functions
(qualifier AIT_HD; the ait:: functions they call are in gpu_math.h). The access pattern is the
CPU's too: access_plan merges the output's dims that every operand reads alike, so each operand is
read at the output's index ("full"), as one value ("scalar"), or through outer strides with a dense
or broadcast innermost dim ("strided"). Only the skeleton is the GPU's: grid-stride loops, and packs
of V elements (128-bit accesses for the widest operand) where the innermost run and every packed
pointer allow it, checked by the kernel's host code; a scalar variant serves the rest.
"""
from __future__ import annotations

from typing import Optional

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ops.fused import single_op_expr
from ....ops.registry import Category, get_opdef, registered_kinds
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, dialect, template
from ..common.access import access_plan
from ..common.expr import expr_cpp

THREADS = 256        # threads per block of the grid-stride kernels
BLOCKS_PER_SM = 8    # grid size cap: 8 x 256 threads fill an SM (2048 threads on sm_80/sm_90)
PACK_BYTES = 16      # one 128-bit load/store per operand and step
# int32 index arithmetic (several times cheaper than int64) where every index a kernel forms stays
# below this: 2^31 less room for a grid-stride step past the end (grids stay below 2^26 threads).
INT32_LIMIT = (1 << 31) - (1 << 26)

# Single ops whose 16-bit result is the same computed in pairs (half2 / bfloat162 arithmetic) as in
# float32 and rounded once: IEEE add, sub and mul round correctly either way (float32 has more
# than twice the bits plus two), the rest are exact. Anything fused stays in float32, as the
# oracle rounds only at the end.
PAIR_EXPR = {OpKind.ADD: "__hadd2(a0, a1)", OpKind.SUB: "__hsub2(a0, a1)", OpKind.MUL: "__hmul2(a0, a1)",
             OpKind.NEG: "__hneg2(a0)", OpKind.ABS: "__habs2(a0)",
             OpKind.MAXIMUM: "__hmax2_nan(a0, a1)", OpKind.MINIMUM: "__hmin2_nan(a0, a1)"}
PAIR_TYPE = {DType.float16: ("__half2", "__half2half2"), DType.bfloat16: ("__nv_bfloat162", "__bfloat162bfloat162")}


def pack_elems(dtypes) -> int:
    """Elements per pack: 16 bytes of the widest dtype (narrower operands move fewer bytes)."""
    return max(1, PACK_BYTES // max(d.itemsize for d in dtypes))


def index_types(*extents: Dim) -> list[str]:
    """Index types a kernel needs: int32 alone when the extents' upper bounds allow, else int32 and
    int64, the host code choosing by the bound sizes."""
    return ["int32_t"] if all(e.upper < INT32_LIMIT for e in extents) else ["int32_t", "int64_t"]


def static_multiple(d: Dim, v: int) -> Optional[bool]:
    """Whether d is a multiple of v: True/False when d is static, None when known only at run time."""
    return d.value % v == 0 if d.is_static else None


def _pair(expr, in_dtypes, out_dtypes) -> Optional[dict]:
    """The pairwise form of a single-op expression on one 16-bit float type, or None."""
    if len(expr.nodes) != 1 or expr.nodes[0].kind not in PAIR_EXPR:
        return None
    dts = set(in_dtypes) | set(out_dtypes)
    if len(dts) != 1 or next(iter(dts)) not in PAIR_TYPE:
        return None
    pair, splat = PAIR_TYPE[next(iter(dts))]
    return {"type": pair, "splat": splat, "expr": PAIR_EXPR[expr.nodes[0].kind]}


def lower_expr_gpu(expr, outs, ins, ctx: LowerContext, label: str) -> list[KernelCall]:
    """One kernel evaluating `expr` over `ins` into `outs` (all of the outputs' shape)."""
    # Writes at a concat's strides (the memory plan) come only to lowerings that declare the
    # "strided_output" feature; these write dense results.
    if any(o in getattr(ctx.plan, "strided_writes", {}) for o in outs):
        raise UnsupportedOpError(f"{label}: the memory plan asks for a strided result, which the GPU "
                                 "element-wise kernel does not write")
    out_shape = tuple(outs[0].shape)
    in_dtypes = [t.dtype for t in ins]
    cpp = expr_cpp(expr, in_dtypes, qualifier="AIT_HD")
    dims, kinds, strides = access_plan(out_shape, [t.shape for t in ins])
    mode = "strided" if "strided" in kinds else "flat"
    vec = pack_elems(in_dtypes + [o.dtype for o in outs])
    # Where a row (flat: the whole tensor) holds whole packs: statically known, else checked.
    run = prod(out_shape) if mode == "flat" else dims[-1]
    whole = static_multiple(run, vec)
    if mode == "strided" and whole is False or run.is_static and run.value < vec:
        vec = 1
    args, aligned, nstrided = [], [], 0
    for i, (t, kind) in enumerate(zip(ins, kinds)):
        if kind == "scalar":
            at, how = "0", "const"
        elif kind == "full":
            at, how = ("i" if mode == "flat" else "row + col"), "pack"
        else:
            inner = strides[i][-1] != 0
            at, how = f"base[{nstrided}]" + (" + col" if inner else ""), ("pack" if inner else "row")
            nstrided += 1
        if how == "pack":
            aligned.append({"index": len(outs) + i, "bytes": t.dtype.itemsize * vec})
        args.append({"t": STORAGE[t.dtype], "ct": COMPUTE[t.dtype], "how": how, "at": at,
                     "load": load(t.dtype, f"in{i}", at), "lane": load(t.dtype, f"pk{i}.v", "j"),
                     "raw": f"in{i}[{at}]"})
    slot_dtypes = expr.slot_dtypes(in_dtypes)
    stores = []
    for k, (o, slot) in enumerate(zip(outs, expr.outputs)):
        assert slot_dtypes[slot] == o.dtype, f"{label}: output dtype {o.dtype} vs expression {slot_dtypes[slot]}"
        stores.append({"t": STORAGE[o.dtype], "value": store(o.dtype, f"s{slot}")})
        aligned.append({"index": k, "bytes": o.dtype.itemsize * vec})
    spec = KernelSpec.make(template("elementwise.cu.j2"), text=str(expr), functions=cpp["functions"],
                           statements=cpp["statements"], args=args, outs=stores, mode=mode,
                           rank=len(dims) if mode == "strided" else 1, nstrided=nstrided, vec=vec,
                           check_run=vec > 1 and whole is None, tail=mode == "flat" and vec > 1 and whole is not True,
                           aligned=aligned if vec > 1 else [],
                           pair=_pair(expr, in_dtypes, [o.dtype for o in outs]) if vec > 1 and dialect(ctx).pair_math else None,
                           index_types=index_types(*[prod(t.shape) for t in [*outs, *ins]]),
                           threads=THREADS, per_sm=BLOCKS_PER_SM)
    if mode == "flat":
        return [KernelCall(spec, [*outs, *ins], [prod(out_shape)], label)]
    call_dims = list(dims) + [s for kind, st in zip(kinds, strides) if kind == "strided" for s in st[:-1]]
    return [KernelCall(spec, [*outs, *ins], call_dims, label)]


@lowering(BACKENDS, *[k for k in registered_kinds() if get_opdef(k).category is Category.ELEMENTWISE
                    and k is not OpKind.FUSED_ELEMENTWISE])
def lower_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return lower_expr_gpu(single_op_expr(op), op.outputs, op.inputs, ctx, op.name or op.kind.value)


@lowering(BACKENDS, OpKind.FUSED_ELEMENTWISE)
def lower_fused_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    # Operand views (strided windows of other tensors) are a form only backends that declare the
    # "operand_views" feature get (Capabilities.operand_views); this one does not, so none should arrive.
    if getattr(op.attrs, "operand_views", None):
        raise UnsupportedOpError(f"fused element-wise op '{op.name}' reads operand views, which the GPU kernel "
                                 "does not render")
    return lower_expr_gpu(op.attrs.expr, op.outputs, op.inputs, ctx, op.name or op.kind.value)
