"""gemm and bmm on ROCm: Composable Kernel XDL device ops with the general fused epilogue.

Every GEMM-shaped op is one problem out[l, m, n] = sum_k A[l, m, k] B[l, k, n], A and B each
row- or column-major, a batch stride per operand (0: one matrix for every batch), then the
epilogue (that geometry, shared with CUDA: gpu/gemm_problem.py). gemm (and a bmm whose B is shared: its batch folds into M) runs
DeviceGemmMultipleD_Xdl_CShuffle, a batched bmm DeviceBatchedGemmMultiD_Xdl (gemm_ck.hip.j2).

The epilogue is CK's CDE element-wise operation over the accumulator and D tensors: the op's bias
and every extra operand of the fused expression (attrs.epilogue) is a D tensor, row-major over
(M, N) with a row stride (0: one row for every M, i.e. a bias) and a batch stride (0: shared).
The operation is our functor (gemm_ck_functor.inc.j2), rendered by common/expr.py from the same
Expr the CPU and CUDA backends render, wrapped by ait::ck_ext::CdeOp (ck_epilogue.hpp). An
operand that broadcasts along N (one value per row, a scalar) has no D form (CK reads every D
along N with the output's vectors): then the GEMM applies only the bias and the epilogue runs
after it, in place, through CK's DeviceElementwiseImpl (any broadcast strides) with the same
functor (gemm_ck_apply.hip.j2), as the CUDA backend's epilogue pass does.

Grouped GEMM (horizontal fusion) is grouped.py: CK's DeviceGroupedGemm_Xdl at the pinned commit
copies its per-group descriptors with a synchronous hipMemcpy inside Invoker::Run (not ordered on
the run's stream, not capturable in a graph), so its Argument only computes them and our own
kernel (ck_grouped.hpp) takes them by value; members that cannot share a launch fall back to
gemm_call here.

Every number CK checks at run time (vector widths against K/N, int32 sizes, dtypes) is checked
here first, so a built model never meets IsSupportedArgument's refusal on a supported device.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional, Sequence

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ....profiler import select
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.access import broadcast_strides
from ..gpu import epilogue as shared
from ..gpu import gemm_problem as problems
from ..gpu.epilogue import MnlAxes, classify
from ..gpu.gemm_problem import GemmProblem
from . import configs as ck

CK_TYPE = {DType.float16: "ck::half_t", DType.bfloat16: "ck::bhalf_t", DType.float32: "float"}
# The XDL MFMA paths: v_mfma_f32_32x32x8f16, v_mfma_f32_32x32x8bf16_1k, v_mfma_f32_32x32x2f32.
AB_DTYPES = (DType.float16, DType.bfloat16, DType.float32)
INT32_MAX = 2**31 - 1          # CK's index_t


@dataclasses.dataclass(frozen=True)
class DTensor:
    """One CK D tensor: an epilogue operand read at (l, m, n) = base + l*stride_l + m*stride_m + n."""
    tensor: Tensor
    stride_m: Dim
    stride_l: Dim


def d_tensor(t: Tensor, out_shape: Sequence[Dim], axes: MnlAxes) -> Optional[DTensor]:
    """`t` read over the result as a D tensor, or None where CK's row-major D cannot express its
    broadcast: the shared plan's loads (gpu/epilogue.py classify) less those that broadcast along N
    (col, scalar), since CK reads every D along N with the output's vectors."""
    ld = classify(t, out_shape, axes)
    if ld is None or ld.stride_n == IntImm(0):
        return None
    return DTensor(t, ld.stride_m, ld.stride_l)


def functor(op: Op, bias: bool, extras: Sequence[Tensor], epilogue: bool = True) -> dict:
    """The epilogue as one scalar functor (acc[, bias], extras...) -> float, from attrs.epilogue
    (without it, `epilogue=False`: acc[ + bias]): the GPU backends' one rendering of it."""
    return shared.functor(op, op.outputs[0], bias, extras, epilogue, "ROCm")


@dataclasses.dataclass
class EpiloguePlan:
    """How a GEMM-shaped kernel applies its epilogue: `functor` over the accumulator and the D
    tensors `ds`; where some operand has no D form, the kernel applies only the bias and `apply`
    (an in-place CK element-wise pass over the result, gemm_ck_apply.hip.j2) the rest."""
    functor: dict
    ds: list[DTensor]
    apply: Optional[tuple[dict, list, list]] = None    # (params, ptrs, dims) of the pass


def epilogue_plan(op: Op, out: Tensor, bias: Optional[Tensor], extras: Sequence[Tensor],
                  axes: MnlAxes) -> EpiloguePlan:
    """The D tensors in the functor's argument order (the bias row, then the extras) and the
    functor, or the bias alone and the separate pass."""
    what = f"{op.kind.value} '{op.name}'"
    for t in ([bias] if bias is not None else []) + list(extras):
        if t.dtype not in CK_TYPE:
            raise UnsupportedOpError(f"{what}: epilogue operand '{t.name}' is {t.dtype}; the ROCm epilogue reads "
                                     "float16, bfloat16 or float32")
    ds = [DTensor(bias, IntImm(0), IntImm(0))] if bias is not None else []
    found = [d_tensor(t, out.shape, axes) for t in extras]
    if all(d is not None for d in found):
        return EpiloguePlan(functor(op, bias is not None, extras), ds + found)
    return EpiloguePlan(functor(op, bias is not None, (), epilogue=False), ds, apply_kernel(op, out, extras))


def apply_kernel(op: Op, out: Tensor, extras: Sequence[Tensor]) -> tuple[dict, list, list]:
    """The epilogue over the stored result, in place, by CK's DeviceElementwiseImpl: inputs the
    result and the extras at their broadcast strides over the result's shape (any broadcast).
    CK's rules, decided here: the vector width divides the last size (its MPerThread too); an
    input whose last stride is not 1 reads scalars; the flat size is an index_t."""
    what = f"{op.kind.value} '{op.name}'"
    shape = list(out.shape)
    size = prod(shape)
    if size.upper > INT32_MAX:
        raise UnsupportedOpError(f"{what}: the result can hold {size.upper} elements, past CK's int32 index_t")
    vec = ck.vector_width(shape[-1], itemsize=max(t.dtype.itemsize for t in [out, *extras]))
    strides = [broadcast_strides(tuple(shape), tuple(shape))] + [broadcast_strides(tuple(t.shape), tuple(shape))
                                                                  for t in extras]
    in_vecs = [vec if st[-1] == IntImm(1) else 1 for st in strides]
    params = dict(op_label=f"{op.kind.value} epilogue", rank=len(shape), out_ctype=CK_TYPE[out.dtype],
                  in_ctypes=[CK_TYPE[out.dtype]] + [CK_TYPE[t.dtype] for t in extras], vec=vec, in_vecs=in_vecs,
                  functor=functor(op, False, extras))
    dims = shape + [d for st in strides for d in st]
    params["n_dims"] = len(dims)
    return params, [out] + list(extras), dims


def gemm_problem(op: Op) -> GemmProblem:
    return problems.gemm_problem(op, "ROCm")


def bmm_problem(op: Op) -> GemmProblem:
    return problems.bmm_problem(op, "ROCm")


def _limits(what: str, sizes: dict, tensors: dict, k: Dim) -> None:
    """CK's run-time limits, decided here: sizes are index_t (int32), and GridwiseGemm's
    CheckValidity refuses an A, B or result over 2 GB (elements x bytes). An empty reduction (K
    can be 0) is refused too: CK's pipeline has no loop to run for it."""
    for name, d in sizes.items():
        if d.upper > INT32_MAX:
            raise UnsupportedOpError(f"{what}: {name} can reach {d.upper}, past CK's int32 index_t")
    for name, (d, itemsize) in tensors.items():
        if d.upper * itemsize > 2**31:
            raise UnsupportedOpError(f"{what}: {name} can reach {d.upper * itemsize} bytes; CK's XDL GEMMs take "
                                     "operands of at most 2 GB")
    if k.lower == 0:
        raise UnsupportedOpError(f"{what}: the reduction size K can be 0, which CK's GEMM pipeline does not run")


def signature(functor: dict, ds: Sequence[str], apply: bool) -> str:
    """The profile key's epilogue: the rendered functor (its helper functions by digest: they are
    long), the D tensors' types and whether a pass follows."""
    helpers = hashlib.sha256("\n".join(functor["functions"]).encode()).hexdigest()[:12]
    return f"{functor['statements']}|{functor['result']}|fn={helpers}|ds={','.join(ds)}|apply={int(apply)}"


@dataclasses.dataclass
class CkKernel:
    """One GEMM-shaped CK kernel before its instance is picked: the template's params less `inst`,
    its operands and sizes, the epilogue pass (or None) and the profiler's problem."""
    params: dict
    ptrs: list
    dims: list
    apply: Optional[tuple]
    problem: select.Problem

    def picked(self, arch: str) -> tuple[dict, list, list, Optional[tuple]]:
        """(params with the instance, ptrs, dims, apply): the profiled winner, else the heuristic's."""
        return dict(self.params, inst=ck.pick(self.problem, arch).inst), self.ptrs, self.dims, self.apply


def gemm_setup(g: GemmProblem, arch: str) -> CkKernel:
    """Everything of one problem's kernel but the instance (gemm_kernel picks it; the profiler times each)."""
    op, out = g.op, g.out
    what = f"{op.kind.value} '{op.name}'"
    if g.a.dtype not in AB_DTYPES or g.b.dtype != g.a.dtype or out.dtype not in CK_TYPE:
        raise UnsupportedOpError(f"{what}: operands {g.a.dtype}/{g.b.dtype} -> {out.dtype} have no ROCm (CK) "
                                 "kernel; it takes float16, bfloat16 or float32 operands")
    _limits(what, dict(M=g.m, N=g.n, K=g.k, batch=g.l), dict(A=(g.m * g.k, g.a.dtype.itemsize),
            B=(g.k * g.n, g.b.dtype.itemsize), result=(g.m * g.n, out.dtype.itemsize)), g.k)
    plan = epilogue_plan(op, out, g.bias, g.extras, g.axes)
    ds = plan.ds
    # Vector widths: each must divide the size CK checks and the stride the vectors run across.
    isz = g.a.dtype.itemsize
    vec_a = ck.vector_width(g.m if g.a_col else g.k, itemsize=isz)
    vec_b = ck.vector_width(g.k if g.b_col else g.n, itemsize=isz)
    # the C-shuffle writes the result and reads every D with one width: the widest element bounds it
    vec_c = ck.vector_width(g.n, *[d.stride_m for d in ds if d.stride_m != IntImm(0)],
                            itemsize=max(t.dtype.itemsize for t in [out, *[d.tensor for d in ds]]))
    batched = g.l != IntImm(1)
    cands = ck.candidates(arch, g.m, g.n, g.l, not g.a_col, g.b_col, vec_a, vec_b, vec_c, what, itemsize=isz)
    d_types = [CK_TYPE[d.tensor.dtype] for d in ds]
    params = dict(op_label=f"{op.kind.value} {g.layouts}", batched=batched, ctype=CK_TYPE[g.a.dtype],
                  out_ctype=CK_TYPE[out.dtype], layout_a="Col" if g.a_col else "Row",
                  layout_b="Col" if g.b_col else "Row", ds=d_types, functor=plan.functor)
    batch_e = g.m * g.n if batched else IntImm(0)
    dims = [g.m, g.n, g.k, g.l, g.lda, g.ldb, g.n, g.batch_a, g.batch_b, batch_e]
    for d in ds:
        dims += [d.stride_m, d.stride_l]
    params["n_dims"] = len(dims)   # what the instance's accepted-sizes memo compares
    problem = select.Problem("bmm" if batched else "gemm", signature(plan.functor, d_types, plan.apply is not None),
                             g.a.dtype, out.dtype, g.layouts, arch, g.m, g.n, g.k, g.l, cands, streamk=False,
                             backend="rocm")
    return CkKernel(params, [out, g.a, g.b] + [d.tensor for d in ds], dims, plan.apply, problem)


def gemm_kernel(g: GemmProblem, arch: str) -> tuple[dict, list, list, Optional[tuple]]:
    """(params of gemm_ck.hip.j2, ptrs, dims, the epilogue pass or None) of one problem."""
    return gemm_setup(g, arch).picked(arch)


def dense_result(ctx: LowerContext, op: Op, out: Tensor) -> None:
    problems.dense_result(ctx, op, out, "ROCm")


def gemm_call(ctx: LowerContext, g: GemmProblem) -> list[KernelCall]:
    dense_result(ctx, g.op, g.out)
    params, ptrs, dims, apply = gemm_kernel(g, ctx.arch or "gfx90a")
    spec = KernelSpec.make(ctx.template("gemm_ck.hip.j2"), **params)
    name = g.op.name or g.op.kind.value
    return [KernelCall(spec, ptrs, dims, name)] + apply_calls(ctx, apply, name)


def apply_calls(ctx: LowerContext, apply: Optional[tuple], name: str) -> list[KernelCall]:
    """The epilogue pass after the kernel, where the plan has one."""
    if apply is None:
        return []
    params, ptrs, dims = apply
    return [KernelCall(KernelSpec.make(ctx.template("gemm_ck_apply.hip.j2"), **params), ptrs, dims, name)]


@lowering("rocm", OpKind.GEMM, epilogue=True)
def lower_gemm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return gemm_call(ctx, gemm_problem(op))


@lowering("rocm", OpKind.BMM, epilogue=True)
def lower_bmm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return gemm_call(ctx, bmm_problem(op))
