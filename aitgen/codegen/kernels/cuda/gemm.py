"""gemm and bmm on CUDA: CUTLASS tensor-core kernels with the fused epilogue as a visitor tree.

Every GEMM-shaped op becomes one problem in CUTLASS's terms: out[l, m, n] = sum_k A[l, m, k] B[l, k, n]
with A and B each row- or column-major and a batch stride per operand (0: shared by every batch),
then the epilogue (that geometry, shared with ROCm: gpu/gemm_problem.py). Which kernel runs it:

  sm_90a, float16/bfloat16, 16-byte aligned rows, no broadcast batch    gemm_sm90.cu.j2 (CUTLASS 3.x)
  float16/bfloat16 with rows of at least 4 bytes (either arch)          gemm_sm80.cu.j2 (CUTLASS 2.x)
  float16/bfloat16 with an odd K or N (2-byte rows: no cp.async)        gemm_sm80.cu.j2, two-stage mainloop
  float32 with allow_tf32                                               gemm_sm80.cu.j2, TF32 MMA
  float32 without TF32                                                  gemm_sm80_simt.cu.j2 (CUTLASS SIMT
                                                                        sgemm; the epilogue in one pass after)
  a size past int32 (CUTLASS 2.x problem sizes are int)                 gemm_simt.cu.j2 (our tiled SIMT)

Vector widths come from the sizes known at build time (a dynamic M is fine; a static K of 768
gives 16-byte rows); the kernel checks pointer alignment at run time. Tile configs come from
aitgen.profiler: profiled winners from its cache, else its deterministic heuristic, one per M
bucket when M is dynamic.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ....errors import UnsupportedOpError
from ....ir.dims import IntImm
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ....profiler import candidates as cands
from ....profiler import select
from ...cexpr import STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from . import epilogue as evt
from ..gpu import gemm_problem as problems
from ..gpu.dialect import template as gpu_template
from ..gpu.gemm_problem import GemmProblem
from .configs import configs


def _cutlass_dtypes(op: Op) -> None:
    """Dtypes the CUTLASS templates are not instantiated for (float64, integers, float8: an fp8
    GEMM on sm_90a is not written yet): refuse, before the shared geometry's own checks."""
    for t in op.inputs:
        if t.dtype not in evt.CUTLASS_TYPE:
            raise UnsupportedOpError(f"{op.kind.value} '{op.name}': operand '{t.name}' is {t.dtype}; the CUDA "
                                     "GEMM kernels take float32, float16 or bfloat16")


def gemm_problem(op: Op) -> GemmProblem:
    _cutlass_dtypes(op)
    return problems.gemm_problem(op, "CUDA")


def bmm_problem(op: Op) -> GemmProblem:
    _cutlass_dtypes(op)
    return problems.bmm_problem(op, "CUDA")


@dataclasses.dataclass
class GemmKernel:
    """What a GEMM problem renders to: the template, its params (configs aside), the dims, and the
    profiler's view of it (None for the SIMT kernel, which has no configs)."""
    template: str
    params: dict
    dims: list
    problem: Optional[select.Problem]
    plan: evt.EpiloguePlan


INT32_MAX = 2**31 - 1


def _past_int32(g: GemmProblem) -> bool:
    """CUTLASS 2.x takes M, N, K, the batch count and leading dims as int: past that, our own kernel."""
    return any(d.upper > INT32_MAX for d in (g.m, g.n, g.k, g.l, g.lda, g.ldb))


def kernel_arch(g: GemmProblem, arch: str, allow_tf32: bool) -> Optional[str]:
    """The kernel that runs `g`: "sm_90a" / "sm_80" (CUTLASS tensor cores, multistage), "narrow"
    (sm_80 tensor cores, two-stage mainloop for 16-bit rows under 4 bytes aligned), "simt" (CUTLASS
    SIMT float32), or None for our own SIMT kernel (sizes past int32)."""
    if _past_int32(g):
        return None
    dtype = g.a.dtype
    isz = dtype.itemsize
    wa = evt.vector_width(g.lda, isz)
    wb = evt.vector_width(g.ldb, isz)
    wc = evt.vector_width(g.n, g.out.dtype.itemsize)
    if dtype is DType.float32:
        return "sm_80" if allow_tf32 else "simt"
    if arch == "sm_90a" and wa * isz == 16 and wb * isz == 16 and wc * g.out.dtype.itemsize == 16 \
            and g.batch_a != 0 and g.batch_b != 0:
        return "sm_90a"
    return "sm_80" if min(wa, wb) * isz >= 4 else "narrow"


def gemm_kernel(g: GemmProblem, arch: str, allow_tf32: bool) -> GemmKernel:
    op, out = g.op, g.out
    dtype = g.a.dtype
    if dtype not in (DType.float16, DType.bfloat16, DType.float32) or g.b.dtype != dtype:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': operands of dtype {dtype} have no CUDA GEMM kernel")
    plan = evt.plan(op, out, g.bias, g.extras, g.axes)
    label = f"{op.kind.value} {g.layouts}"
    first_ptr = 3
    which = kernel_arch(g, arch, allow_tf32)
    if which == "simt":
        return _simt_kernel(g, label)
    if which is None:
        loads, ldims = evt.strided_loads(plan, first_ptr, 12)
        sam, sak = (IntImm(1), g.m) if g.a_col else (g.k, IntImm(1))
        sbk, sbn = (IntImm(1), g.k) if g.b_col else (g.n, IntImm(1))
        dims = [g.m, g.n, g.k, g.l, sam, sak, g.batch_a, sbk, sbn, g.batch_b, g.n, g.m * g.n] + ldims
        params = dict(op_label=label, storage=STORAGE[dtype], out_storage=STORAGE[out.dtype], functor=plan.functor,
                      loads=loads)
        return GemmKernel("gemm_simt.cu.j2", params, dims, None, plan)
    isz, osz = dtype.itemsize, out.dtype.itemsize
    align_a, align_b = evt.vector_width(g.lda, isz), evt.vector_width(g.ldb, isz)
    align_c = evt.vector_width(g.n, osz)
    loads, ldims = evt.evt_loads(plan, first_ptr, 10)
    checks = [dict(ptr=0, bytes=align_c * osz, what="out"), dict(ptr=1, bytes=align_a * isz, what="a"),
              dict(ptr=2, bytes=align_b * isz, what="b")]
    src = -1
    for j, ld in enumerate(loads):
        ld["align"] = evt.vector_width(g.n, ld["itemsize"]) if ld["kind"] in ("aux", "row") else 1
        if ld["kind"] in ("aux", "row"):
            width = align_c if which != "sm_90a" else ld["align"]  # sm_80 reads them with the output's map
            checks.append(dict(ptr=ld["ptr"], bytes=width * ld["itemsize"], what=f"epilogue operand {j}"))
        if which == "sm_90a" and src < 0 and ld["kind"] == "aux" and ld["align"] * ld["itemsize"] == 16 \
                and (ld["l"] >= 0 or g.l == 1):  # TMA takes no zero batch stride
            src = j  # the first residual rides the collective's TMA-fetched C operand
    dims = [g.m, g.n, g.k, g.l, g.lda, g.ldb, g.batch_a if g.l != 1 else g.m * g.k,
            g.batch_b if g.l != 1 else g.k * g.n, g.n, g.m * g.n] + ldims
    params = dict(op_label=label, ctype=evt.CUTLASS_TYPE[dtype], out_ctype=evt.CUTLASS_TYPE[out.dtype],
                  layout_a="ColumnMajor" if g.a_col else "RowMajor", layout_b="ColumnMajor" if g.b_col else "RowMajor",
                  align_a=align_a, align_b=align_b, align_c=align_c, functor=plan.functor, loads=loads,
                  align_checks=checks)
    narrow = which == "narrow"
    if which == "sm_90a":
        params["src"] = src
        params["n_dims"] = len(dims)  # the argument cache's key reads all of d
        template = "gemm_sm90.cu.j2"
    else:
        params["instruction"] = [16, 8, 8] if dtype is DType.float32 else [16, 8, 16]
        template = "gemm_sm80.cu.j2"
    # The narrow kernels have no stream-K candidates (CUTLASS's stream-K kernels are built and
    # tested on the multistage mainloop only).
    problem = select.Problem(op.kind.value, _signature(op, plan), dtype, out.dtype, g.layouts,
                             "sm_80" if narrow else which, g.m, g.n, g.k, g.l,
                             cands.gemm_candidates("sm_80" if narrow else which, dtype, narrow=narrow),
                             streamk=(g.l == 1 and not narrow))
    return GemmKernel(template, params, dims, problem, plan)


def _simt_kernel(g: GemmProblem, label: str) -> GemmKernel:
    """float32 through CUTLASS's SIMT sgemm (alignment 1: any K, N, pointer). Its epilogue is
    CUTLASS's plain linear combination (D = acc), so the fused epilogue (bias, activation,
    residual: any broadcast) runs as one in-place pass after it: a visitor tree needs the tensor-op
    output thread map, which the SIMT epilogue does not use."""
    op, out = g.op, g.out
    extras = ([g.bias] if g.bias is not None else []) + list(g.extras)
    has_epilogue = bool(extras) or getattr(op.attrs, "epilogue", None) is not None
    plan = evt.EpiloguePlan(evt.accumulator_functor(op, out), [], out.dtype,
                            apply=evt.full_functor(op, out, g.bias, g.extras) if has_epilogue else None,
                            apply_operands=tuple(extras))
    dims = [g.m, g.n, g.k, g.l, g.lda, g.ldb, g.batch_a if g.l != 1 else g.m * g.k,
            g.batch_b if g.l != 1 else g.k * g.n, g.n, g.m * g.n]
    params = dict(op_label=label, out_ctype=evt.CUTLASS_TYPE[out.dtype],
                  layout_a="ColumnMajor" if g.a_col else "RowMajor", layout_b="ColumnMajor" if g.b_col else "RowMajor",
                  align_checks=[])  # alignment 1 (4-byte float): every float pointer is fit
    problem = select.Problem(op.kind.value + "_simt", _signature(op, plan), g.a.dtype, out.dtype, g.layouts, "sm_80",
                             g.m, g.n, g.k, g.l, cands.gemm_candidates("sm_80", DType.float32, tensor_cores=False),
                             streamk=False)
    return GemmKernel("gemm_sm80_simt.cu.j2", params, dims, problem, plan)


def _signature(op: Op, plan: evt.EpiloguePlan) -> str:
    """What the profile of a kernel depends on in its epilogue: the expression and how each
    operand is read (not the operands' names or sizes)."""
    ep = getattr(op.attrs, "epilogue", None)
    kinds = ",".join(f"{ld.kind}:{ld.tensor.dtype.value}" for ld in plan.loads)
    return f"{ep.expr if ep is not None else ''}|{kinds}"


def dense_result(ctx: LowerContext, op: Op, out: Tensor) -> None:
    problems.dense_result(ctx, op, out, "CUDA")


def gemm_call(ctx: LowerContext, g: GemmProblem) -> list[KernelCall]:
    dense_result(ctx, g.op, g.out)
    arch = ctx.arch or "sm_80"
    allow_tf32 = bool(getattr(ctx.opts, "allow_tf32", False))
    kern = gemm_kernel(g, arch, allow_tf32)
    params = dict(kern.params)
    if kern.problem is not None:
        params["configs"] = configs(kern.problem, arch)
        params["profiler"] = False
    spec = KernelSpec.make(ctx.template(kern.template), **params)
    name = g.op.name or g.op.kind.value
    ptrs = [g.out, g.a, g.b] + [ld.tensor for ld in kern.plan.loads]
    return [KernelCall(spec, ptrs, kern.dims, name)] + apply_calls(ctx, kern.plan, g.out, name)


def apply_calls(ctx: LowerContext, plan: evt.EpiloguePlan, out: Tensor, name: str) -> list[KernelCall]:
    """The epilogue as a second kernel, where its operands broadcast in ways no visitor reads."""
    if plan.apply is None:
        return []
    params, dims = evt.apply_kernel(plan, out, 1)
    spec = KernelSpec.make(gpu_template("epilogue_apply.cu.j2"), **params)  # shared with ROCm (backends/gpu)
    return [KernelCall(spec, [out] + list(plan.apply_operands), dims, name)]


@lowering("cuda", OpKind.GEMM, epilogue=True)
def lower_gemm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return gemm_call(ctx, gemm_problem(op))


@lowering("cuda", OpKind.BMM, epilogue=True)
def lower_bmm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return gemm_call(ctx, bmm_problem(op))


# -- grouped GEMM (GROUPED op of GEMM members: horizontal fusion) ------------------------------

def _grouped_kernel(members: list[GemmProblem], arch: str, allow_tf32: bool) -> Optional[tuple[dict, list, list]]:
    """(params without configs, ptrs, dims) of one gemm_grouped.cu.j2 launch, or None when the
    members cannot share one (a member needing the SIMT kernel or the separate epilogue pass,
    operands read differently): the caller then runs them one by one."""
    first = members[0]
    dtype, out_dtype = first.a.dtype, first.out.dtype
    if any(kernel_arch(g, "sm_80", allow_tf32) != "sm_80" for g in members):
        return None
    plans = [evt.plan(g.op, g.out, g.bias, g.extras, g.axes) for g in members]
    loads = [evt.evt_loads(pl, 3, 5)[0] for pl in plans]
    if any(pl.apply is not None for pl in plans) or any(ld != loads[0] for ld in loads) \
            or any(g.layouts != first.layouts or g.a.dtype != dtype or g.out.dtype != out_dtype for g in members):
        return None
    isz, osz = dtype.itemsize, out_dtype.itemsize
    align_a = min(evt.vector_width(g.lda, isz) for g in members)
    align_b = min(evt.vector_width(g.ldb, isz) for g in members)
    align_c = min(evt.vector_width(g.n, osz) for g in members)
    ptrs, dims, checks = [], [], []
    for g, pl in zip(members, plans):
        base = len(ptrs)
        ptrs += [g.out, g.a, g.b] + [ld.tensor for ld in pl.loads]
        dims += [g.m, g.n, g.k, g.lda, g.ldb] + evt.evt_loads(pl, 3, 5)[1]
        checks += [dict(ptr=base, bytes=align_c * osz, what="out"), dict(ptr=base + 1, bytes=align_a * isz, what="a"),
                   dict(ptr=base + 2, bytes=align_b * isz, what="b")]
        checks += [dict(ptr=base + ld["ptr"], bytes=align_c * ld["itemsize"], what=f"epilogue operand {j}")
                   for j, ld in enumerate(loads[0]) if ld["kind"] in ("aux", "row")]
    params = dict(op_label=f"grouped gemm {first.layouts}", ctype=evt.CUTLASS_TYPE[dtype],
                  out_ctype=evt.CUTLASS_TYPE[out_dtype], layout_a="ColumnMajor" if first.a_col else "RowMajor",
                  layout_b="ColumnMajor" if first.b_col else "RowMajor", align_a=align_a, align_b=align_b,
                  align_c=align_c, functor=plans[0].functor, loads=loads[0], align_checks=checks,
                  groups=len(members), ptrs=len(ptrs) // len(members), dims=len(dims) // len(members),
                  instruction=[16, 8, 8] if dtype is DType.float32 else [16, 8, 16])
    return params, ptrs, dims


def grouped_problem(members: list[GemmProblem], params: dict) -> select.Problem:
    """The profiler's view: M shared, N the members' total (the grid's width), K the deepest."""
    first = members[0]
    n = members[0].n
    for g in members[1:]:
        n = n + g.n
    k = max((g.k for g in members), key=lambda d: d.upper)
    sig = f"{len(members)} members|{params['functor']['statements']}|{[ld['kind'] for ld in params['loads']]}"
    cands_ = tuple(c for c in cands.gemm_candidates("sm_80", first.a.dtype) if not c.streamk)
    return select.Problem("grouped_gemm", sig, first.a.dtype, first.out.dtype, first.layouts, "sm_80", first.m, n, k,
                          IntImm(1), cands_, streamk=False)


def lower_grouped_gemm(op: Op, members: list[Op], ctx: LowerContext) -> list[KernelCall]:
    """A GROUPED op of GEMMs: one launch of gemm_grouped.cu.j2 where the members can share it,
    else each member's own GEMM kernel in turn."""
    arch = ctx.arch or "sm_80"
    problems = [gemm_problem(m) for m in members]
    for g in problems:
        dense_result(ctx, g.op, g.out)
    found = _grouped_kernel(problems, arch, bool(getattr(ctx.opts, "allow_tf32", False)))
    if found is None:
        return [c for g in problems for c in gemm_call(ctx, g)]
    params, ptrs, dims = found
    params["configs"] = configs(grouped_problem(problems, params), arch)
    params["profiler"] = False
    spec = KernelSpec.make(ctx.template("gemm_grouped.cu.j2"), **params)
    return [KernelCall(spec, ptrs, dims, op.name or "grouped")]
