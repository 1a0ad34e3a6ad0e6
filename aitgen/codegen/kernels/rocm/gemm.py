"""gemm and bmm on ROCm: Composable Kernel XDL device ops with the general fused epilogue.

Every GEMM-shaped op is one problem out[l, m, n] = sum_k A[l, m, k] B[l, k, n], A and B each
row- or column-major, a batch stride per operand (0: one matrix for every batch), then the
epilogue. gemm (and a bmm whose B is shared: its batch folds into M) runs
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

Grouped GEMM (horizontal fusion) is not lowered: CK's DeviceGroupedGemm_Xdl at the pinned commit
copies its per-group descriptors with a synchronous hipMemcpy inside Invoker::Run (not ordered on
the run's stream, not capturable in a graph), and no zoo model forms such groups; without a
GROUPED lowering, group_ops leaves the members as separate GEMMs.

Every number CK checks at run time (vector widths against K/N, int32 sizes, dtypes) is checked
here first, so a built model never meets IsSupportedArgument's refusal on a supported device.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ....ops.fused import split_operands
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.access import broadcast_strides
from ..common.expr import expr_cpp
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


def d_tensor(t: Tensor, out_shape: Sequence[Dim], l_axes: tuple[int, ...],
             m_axes: tuple[int, ...]) -> Optional[DTensor]:
    """`t` read over the result (N its last axis, M the m_axes, L the l_axes) as a D tensor, or
    None where CK's row-major D cannot express its broadcast (along N, or over part of M or L)."""
    strides = broadcast_strides(tuple(t.shape), tuple(out_shape))
    zero = IntImm(0)

    def dense(axes: tuple[int, ...]) -> Optional[bool]:
        spans = [not (strides[i] == zero and out_shape[i] != 1) for i in axes]
        if all(spans) or not any(spans):
            return bool(axes) and all(spans)
        return None

    n_dense = not (strides[-1] == zero and out_shape[-1] != 1)
    m_dense, l_dense = dense(m_axes), dense(l_axes)
    if not n_dense or m_dense is None or l_dense is None:
        return None
    return DTensor(t, strides[m_axes[-1]] if m_dense else zero, strides[l_axes[-1]] if l_dense else zero)


def functor(op: Op, bias: bool, extras: Sequence[Tensor], epilogue: bool = True) -> dict:
    """The epilogue as one scalar functor (acc[, bias], extras...) -> float, from attrs.epilogue
    (without it, `epilogue=False`: acc[ + bias])."""
    ep = getattr(op.attrs, "epilogue", None) if epilogue else None
    params = ["float acc"] + (["float bias"] if bias else [])
    statements = ["const float s0 = acc + bias;" if bias else "const float s0 = acc;"]
    functions: list[str] = []
    result = "s0"
    if ep is not None:
        acc_dtype = op.inputs[0].dtype
        dtypes = [acc_dtype] + [t.dtype for t in extras]
        if ep.expr.slot_dtypes(dtypes)[ep.expr.outputs[0]] != op.outputs[0].dtype:
            raise UnsupportedOpError(f"{op.kind.value} '{op.name}': an epilogue that changes the result's dtype "
                                     "has no ROCm kernel")
        cpp = expr_cpp(ep.expr, dtypes, prefix="ep", qualifier="AIT_HD")
        functions = cpp["functions"]
        params += [f"float s{j + 1}" for j in range(len(extras))]
        statements += cpp["statements"]
        result = f"s{ep.expr.outputs[0]}"
    return dict(functions=functions, params=params, statements=statements, result=result)


@dataclasses.dataclass
class EpiloguePlan:
    """How a GEMM-shaped kernel applies its epilogue: `functor` over the accumulator and the D
    tensors `ds`; where some operand has no D form, the kernel applies only the bias and `apply`
    (an in-place CK element-wise pass over the result, gemm_ck_apply.hip.j2) the rest."""
    functor: dict
    ds: list[DTensor]
    apply: Optional[tuple[dict, list, list]] = None    # (params, ptrs, dims) of the pass


def epilogue_plan(op: Op, out: Tensor, bias: Optional[Tensor], extras: Sequence[Tensor],
                  l_axes: tuple[int, ...], m_axes: tuple[int, ...]) -> EpiloguePlan:
    """The D tensors in the functor's argument order (the bias row, then the extras) and the
    functor, or the bias alone and the separate pass."""
    what = f"{op.kind.value} '{op.name}'"
    for t in ([bias] if bias is not None else []) + list(extras):
        if t.dtype not in CK_TYPE:
            raise UnsupportedOpError(f"{what}: epilogue operand '{t.name}' is {t.dtype}; the ROCm epilogue reads "
                                     "float16, bfloat16 or float32")
    ds = [DTensor(bias, IntImm(0), IntImm(0))] if bias is not None else []
    found = [d_tensor(t, out.shape, l_axes, m_axes) for t in extras]
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


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    op: Op
    out: Tensor
    a: Tensor
    b: Tensor
    bias: Optional[Tensor]
    extras: tuple[Tensor, ...]
    m: Dim
    n: Dim
    k: Dim
    l: Dim
    a_col: bool        # A stored [K, M]
    b_col: bool        # B stored [N, K]
    batch_a: Dim
    batch_b: Dim
    l_axes: tuple[int, ...]
    m_axes: tuple[int, ...]

    @property
    def lda(self) -> Dim:
        return self.m if self.a_col else self.k

    @property
    def ldb(self) -> Dim:
        return self.k if self.b_col else self.n

    @property
    def layouts(self) -> str:
        return ("c" if self.a_col else "r") + ("c" if self.b_col else "r") + "r"


def _checked(op: Op) -> None:
    if getattr(op.attrs, "operand_views", None) is not None:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': operands read through strided views have no "
                                 "ROCm GEMM kernel")


def gemm_problem(op: Op) -> GemmProblem:
    _checked(op)
    own, extras = split_operands(op.inputs, op.attrs)
    a, b = own[:2]
    bias = own[2] if len(own) == 3 else None
    out = op.outputs[0]
    ta, tb = op.attrs.trans_a, op.attrs.trans_b
    m, n = prod(out.shape[:-1]), out.shape[-1]
    k = a.shape[0] if ta else a.shape[-1]
    r = len(out.shape)
    return GemmProblem(op, out, a, b, bias, tuple(extras), m, n, k, IntImm(1), ta, tb, m * k, k * n,
                       (), tuple(range(r - 1)))


def _batch_stride(t: Tensor, batch: tuple[Dim, ...], op: Op, what: str) -> Dim:
    lead = [IntImm(1)] * (len(batch) - (len(t.shape) - 2)) + list(t.shape[:-2])
    if all(d == 1 for d in lead):
        return IntImm(0)
    if all(d == o for d, o in zip(lead, batch)):
        return t.shape[-2] * t.shape[-1]
    raise UnsupportedOpError(f"bmm '{op.name}': operand {what} {list(t.shape)} broadcasts over part of the batch "
                             f"dims {list(batch)}; the ROCm kernel takes operands with all of them or none")


def bmm_problem(op: Op) -> GemmProblem:
    _checked(op)
    (a, b), extras = split_operands(op.inputs, op.attrs)
    out = op.outputs[0]
    ta, tb = op.attrs.trans_a, op.attrs.trans_b
    k = a.shape[-2] if ta else a.shape[-1]
    r = len(out.shape)
    if not ta and all(d == 1 for d in b.shape[:-2]):
        m, n = prod(out.shape[:-1]), out.shape[-1]   # one B for every batch: one larger GEMM
        return GemmProblem(op, out, a, b, None, tuple(extras), m, n, k, IntImm(1), False, tb, m * k, k * n,
                           (), tuple(range(r - 1)))
    batch = tuple(out.shape[:-2])
    m, n = out.shape[-2:]
    return GemmProblem(op, out, a, b, None, tuple(extras), m, n, k, prod(batch), ta, tb,
                       _batch_stride(a, batch, op, "a"), _batch_stride(b, batch, op, "b"),
                       tuple(range(r - 2)), (r - 2,))


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


def gemm_kernel(g: GemmProblem, arch: str) -> tuple[dict, list, list, Optional[tuple]]:
    """(params of gemm_ck.hip.j2, ptrs, dims, the epilogue pass or None) of one problem."""
    op, out = g.op, g.out
    what = f"{op.kind.value} '{op.name}'"
    if g.a.dtype not in AB_DTYPES or g.b.dtype != g.a.dtype or out.dtype not in CK_TYPE:
        raise UnsupportedOpError(f"{what}: operands {g.a.dtype}/{g.b.dtype} -> {out.dtype} have no ROCm (CK) "
                                 "kernel; it takes float16, bfloat16 or float32 operands")
    _limits(what, dict(M=g.m, N=g.n, K=g.k, batch=g.l), dict(A=(g.m * g.k, g.a.dtype.itemsize),
            B=(g.k * g.n, g.b.dtype.itemsize), result=(g.m * g.n, out.dtype.itemsize)), g.k)
    plan = epilogue_plan(op, out, g.bias, g.extras, g.l_axes, g.m_axes)
    ds = plan.ds
    # Vector widths: each must divide the size CK checks and the stride the vectors run across.
    isz = g.a.dtype.itemsize
    vec_a = ck.vector_width(g.m if g.a_col else g.k, itemsize=isz)
    vec_b = ck.vector_width(g.k if g.b_col else g.n, itemsize=isz)
    # the C-shuffle writes the result and reads every D with one width: the widest element bounds it
    vec_c = ck.vector_width(g.n, *[d.stride_m for d in ds if d.stride_m != IntImm(0)],
                            itemsize=max(t.dtype.itemsize for t in [out, *[d.tensor for d in ds]]))
    batched = g.l != IntImm(1)
    inst = ck.choose(arch, g.m, g.n, g.l, not g.a_col, g.b_col, vec_a, vec_b, vec_c, what, itemsize=isz)
    params = dict(op_label=f"{op.kind.value} {g.layouts}", batched=batched, ctype=CK_TYPE[g.a.dtype],
                  out_ctype=CK_TYPE[out.dtype], layout_a="Col" if g.a_col else "Row",
                  layout_b="Col" if g.b_col else "Row", ds=[CK_TYPE[d.tensor.dtype] for d in ds],
                  functor=plan.functor, inst=inst)
    batch_e = g.m * g.n if batched else IntImm(0)
    dims = [g.m, g.n, g.k, g.l, g.lda, g.ldb, g.n, g.batch_a, g.batch_b, batch_e]
    for d in ds:
        dims += [d.stride_m, d.stride_l]
    params["n_dims"] = len(dims)   # what the instance's accepted-sizes memo compares
    return params, [out, g.a, g.b] + [d.tensor for d in ds], dims, plan.apply


def dense_result(ctx: LowerContext, op: Op, out: Tensor) -> None:
    """A result written at strides needs the "strided_output" feature, not declared here: refuse."""
    if getattr(ctx.plan, "strided_writes", {}).get(out) is not None:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': a result written at strides has no ROCm GEMM kernel")


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
