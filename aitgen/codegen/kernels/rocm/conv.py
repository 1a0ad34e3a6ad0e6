"""conv2d on ROCm: NHWC activations and OHWI filters through Composable Kernel's
DeviceGroupedConvFwdMultipleD_Xdl_CShuffle (an implicit GEMM: M = N*P*Q, N = K/groups, K = R*S*C/groups,
one GEMM per group), with the fused epilogue as its CDE operation over D tensors (gemm.py).

CK describes every tensor by (G, N, C|K, H, W) lengths and strides, whatever its memory order; our
NHWC / OHWI tensors with `groups` groups are (conv_ck.hip.j2):

  x    lengths (G, N, C/G, H, W)     strides (C/G, H*W*C, 1, W*C, C)        layout NHWGC
  w    lengths (G, K/G, C/G, R, S)   strides (K/G*R*S*C/G, R*S*C/G, 1, S*C/G, C/G)   GKYXC
  out  lengths (G, N, K/G, P, Q)     strides (K/G, P*Q*K, 1, Q*K, K)        layout NHWGK
  bias (one value per channel)       strides (K/G, 0, 1, 0, 0)              layout G_K
  residual (the result's shape)      the result's strides                   layout NHWGK

The layout names matter beyond CK's vector checks: at the pinned commit CK builds the GNHWC /
GNHWK descriptors packed per group, ignoring the strides, which is wrong for NHWC tensors with
groups interleaved in C; the NHWGC / NHWGK ones read the N/H/W strides given (GKYXC is right:
OHWI keeps each group's filters together). A D tensor is read as a (N*P*Q, K/G) matrix with one
row stride: an operand broadcast over part of (N, P, Q) (an SE block's [N, 1, 1, K] scale) has no
D form, and the epilogue then runs as a pass after the conv (gemm.py epilogue_plan).
Depthwise and grouped convs take the same instance kind. Sizes, window and groups are run-time
arguments, so one instance serves every window. CK's run-time refusals (C/G and K/G against the
vector widths) are decided here.
"""
from __future__ import annotations

from typing import Optional

from ....errors import UnsupportedOpError
from ....ir.dims import IntImm
from ....ir.op import Op, OpKind
from ....ops.fused import split_operands
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..gpu.epilogue import MnlAxes
from . import configs as ck
from ....profiler import select
from .gemm import AB_DTYPES, CK_TYPE, CkKernel, _limits, apply_calls, dense_result, epilogue_plan, signature


def specialization(op: Op) -> str:
    """CK's ConvolutionForwardSpecialization: always Default at the pinned CK. Its 1x1
    specialisations (Filter1x1Stride1Pad0, Filter1x1Pad0: no im2col arithmetic) would suit
    ResNet's 1x1 convs, but b076a02's IsSupportedArgument checks their window at
    b_g_k_c_xs_lengths[i + 2], i.e. (C, Y) instead of (Y, X), so it refuses them on every conv
    with more than one input channel per group (tests: test_ck_itself_accepts_what_the_templates_build).
    One specialisation also means fewer instances to compile."""
    return "Default"


def conv_kernel(op: Op, arch: str) -> tuple[dict, list, list, Optional[tuple]]:
    """(params of conv_ck.hip.j2, ptrs, dims, the epilogue pass or None)."""
    return conv_setup(op, arch).picked(arch)


def conv_setup(op: Op, arch: str) -> CkKernel:
    """Everything of the conv's kernel but the instance (conv_kernel picks it; the profiler times each)."""
    own, extras = split_operands(op.inputs, op.attrs)
    x, w = own[:2]
    bias = own[2] if len(own) == 3 else None
    out = op.outputs[0]
    a = op.attrs
    what = f"conv2d '{op.name}'"
    if getattr(a, "operand_views", None) is not None:
        raise UnsupportedOpError(f"{what}: operands read through strided views have no ROCm conv kernel")
    if x.dtype not in AB_DTYPES or w.dtype != x.dtype or out.dtype not in CK_TYPE:
        raise UnsupportedOpError(f"{what}: operands {x.dtype}/{w.dtype} -> {out.dtype} have no ROCm (CK) kernel; "
                                 "it takes float16, bfloat16 or float32 operands")
    n, h, wd, c = x.shape
    k, r, s, cg = w.shape
    _, p, q, _ = out.shape
    g = a.groups
    kg = k // g if k.is_static else None
    if kg is None:
        raise UnsupportedOpError(f"{what}: a symbolic number of output channels has no ROCm conv kernel")
    isz = x.dtype.itemsize
    _limits(what, dict(M=n * p * q, K=r * s * cg), dict(x=(n * h * wd * c, isz), w=(k * r * s * cg, isz),
            result=(n * p * q * k, out.dtype.itemsize)), cg)
    plan = epilogue_plan(op, out, bias, extras, MnlAxes.folded(4))  # M = N*P*Q
    ds = plan.ds
    vec_ab = ck.vector_width(cg, itemsize=isz)
    vec_c = ck.vector_width(IntImm(kg), itemsize=max(t.dtype.itemsize for t in [out, *[d.tensor for d in ds]]))
    cands = ck.candidates(arch, n * p * q, IntImm(kg), IntImm(g), True, True, vec_ab, vec_ab, vec_c, what,
                          itemsize=isz)
    params = dict(op_label="conv2d", ctype=CK_TYPE[x.dtype], out_ctype=CK_TYPE[out.dtype],
                  spec=specialization(op), functor=plan.functor,
                  ds=[dict(ctype=CK_TYPE[d.tensor.dtype], row=d.stride_m == IntImm(0)) for d in ds])
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = a.stride, a.padding, a.dilation
    dims = [n, h, wd, c, k, r, s, p, q, g, sh, sw, dh, dw, pt, pl, pb, pr]
    params["n_dims"] = len(dims)   # what the instance's accepted-sizes memo compares
    # The key's layouts name the window: CK's time depends on it, while the instance does not.
    window = f"nhwc/ohwi r{r}s{s} s{sh}x{sw} p{pt}{pl}{pb}{pr} d{dh}x{dw} g{g}"
    problem = select.Problem("conv2d", signature(plan.functor, [d["ctype"] for d in params["ds"]],
                             plan.apply is not None), x.dtype, out.dtype, window, arch, n * p * q, IntImm(kg),
                             r * s * cg, IntImm(g), cands, streamk=False, backend="rocm")
    return CkKernel(params, [out, x, w] + [d.tensor for d in ds], dims, plan.apply, problem)


@lowering("rocm", OpKind.CONV2D, epilogue=True)
def lower_conv(op: Op, ctx: LowerContext) -> list[KernelCall]:
    dense_result(ctx, op, op.outputs[0])
    params, ptrs, dims, apply = conv_kernel(op, ctx.arch or "gfx90a")
    spec = KernelSpec.make(ctx.template("conv_ck.hip.j2"), **params)
    name = op.name or op.kind.value
    return [KernelCall(spec, ptrs, dims, name)] + apply_calls(ctx, apply, name)
