"""conv2d on CUDA: NHWC activations and OHWI filters as an implicit GEMM with the fused epilogue.

  groups == 1, float16/bfloat16 with C a multiple of 2 (4-byte rows),
  or float32 with allow_tf32                      conv_fprop.cu.j2 (CUTLASS 2.x mainloop + visitor tree)
  groups == 1, float32 without TF32               conv_fprop_simt.cu.j2 (CUTLASS SIMT implicit GEMM;
                                                  the fused epilogue as one pass after it)
  anything else (grouped / depthwise, odd C in 16-bit: the stem is padded to 4 channels before
  it gets here, passes/pad_conv_channels.py)      conv_simt.cu.j2 (depthwise: vector kernel; else direct)

The implicit GEMM is M = N*P*Q (output pixels), N = K (output channels), K = C*R*S, with the
result a row-major [N*P*Q, K] matrix: the GEMM's visitor tree and epilogue plan apply unchanged,
and sm_90a builds run the same (sm_80) kernel. Window attributes are static template numbers;
batch, spatial sizes and channels are run-time dims. conv_transpose2d has no CUDA kernel yet
(lower_graph raises UnsupportedOpError naming the op).
"""
from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.dims import IntImm
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ops.fused import split_operands
from ....profiler import candidates as cands
from ....profiler import select
from ...cexpr import STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from . import epilogue as evt
from .configs import configs
from .gemm import INT32_MAX, apply_calls, dense_result


def conv_kernel(op: Op, arch: str, allow_tf32: bool):
    """(template, params without configs, dims, select.Problem or None, plan or None)."""
    own, extras = split_operands(op.inputs, op.attrs)
    x, w = own[:2]
    bias = own[2] if len(own) == 3 else None
    out = op.outputs[0]
    a = op.attrs
    dtype = x.dtype
    if dtype not in (DType.float16, DType.bfloat16, DType.float32):
        raise UnsupportedOpError(f"conv2d '{op.name}': dtype {dtype} has no CUDA kernel")
    n, h, wd, c = x.shape
    k, r, s, _ = w.shape
    _, p, q, _ = out.shape
    pad, window = [a.padding[0], a.padding[2]], dict(stride=list(a.stride), dilation=list(a.dilation))
    dims = [n, h, wd, c, k, r, s, p, q]
    isz, osz = dtype.itemsize, out.dtype.itemsize
    align_ab = evt.vector_width(c, isz)
    tensor_cores = a.groups == 1 and (allow_tf32 if dtype is DType.float32 else align_ab * isz >= 4)
    if a.groups == 1 and dtype is DType.float32 and not allow_tf32 and not _past_int32(dims):
        return _simt_conv(op, out, bias, extras, dims, pad, window)
    if not tensor_cores:
        loads, ldims = evt.general_loads(([bias] if bias is not None else []) + list(extras), out, 3, len(dims))
        params = dict(storage=STORAGE[dtype], out_storage=STORAGE[out.dtype], groups=a.groups, pad=pad, **window,
                      functor=evt.full_functor(op, out, bias, extras), loads=loads)
        return "conv_simt.cu.j2", params, dims + ldims, None, None
    plan = evt.plan(op, out, bias, extras, evt.MnlAxes.folded(4))
    align_c = evt.vector_width(k, osz)
    loads, ldims = evt.evt_loads(plan, 3, len(dims))
    checks = [dict(ptr=0, bytes=align_c * osz, what="out"), dict(ptr=1, bytes=align_ab * isz, what="x"),
              dict(ptr=2, bytes=align_ab * isz, what="w")]
    for j, ld in enumerate(loads):
        if ld["kind"] in ("aux", "row"):
            checks.append(dict(ptr=ld["ptr"], bytes=align_c * ld["itemsize"], what=f"epilogue operand {j}"))
    params = dict(op_label="conv2d", ctype=evt.CUTLASS_TYPE[dtype], out_ctype=evt.CUTLASS_TYPE[out.dtype],
                  align_a=align_ab, align_b=align_ab, align_c=align_c, functor=plan.functor, loads=loads,
                  align_checks=checks, iterator="kOptimized", pad=pad, **window,
                  instruction=[16, 8, 8] if dtype is DType.float32 else [16, 8, 16])
    kinds = ",".join(f"{ld.kind}:{ld.tensor.dtype.value}" for ld in plan.loads)
    ep = getattr(a, "epilogue", None)
    layouts = (f"nhwc/ohwi r{r}s{s} stride{a.stride[0]}x{a.stride[1]} pad{pad[0]}x{pad[1]} "
               f"dil{a.dilation[0]}x{a.dilation[1]}")
    problem = select.Problem("conv2d", f"{ep.expr if ep is not None else ''}|{kinds}", dtype, out.dtype, layouts,
                             "sm_80", n * p * q, k, c * r * s, IntImm(1), cands.conv_candidates(dtype), streamk=False)
    return "conv_fprop.cu.j2", params, dims + ldims, problem, plan


def _past_int32(dims) -> bool:
    """CUTLASS's conv problem sizes are int (and so are the GEMM extents N*P*Q and C*R*S)."""
    n, h, wd, c, k, r, s, p, q = dims
    return any(d.upper > INT32_MAX for d in (n * h * wd * c, n * p * q * k, k * r * s * c, n * p * q, c * r * s))


def _simt_conv(op: Op, out, bias, extras, dims, pad, window):
    """float32 through CUTLASS's SIMT implicit GEMM; the epilogue (bias, activation, residual:
    any broadcast) in one pass after it, as the float32 GEMM does (gemm.py's _simt_kernel)."""
    n, h, wd, c, k, r, s, p, q = dims
    operands = ([bias] if bias is not None else []) + list(extras)
    has_epilogue = bool(operands) or getattr(op.attrs, "epilogue", None) is not None
    plan = evt.EpiloguePlan(evt.accumulator_functor(op, out), [], out.dtype,
                            apply=evt.full_functor(op, out, bias, extras) if has_epilogue else None,
                            apply_operands=tuple(operands))
    params = dict(op_label="conv2d", out_ctype=evt.CUTLASS_TYPE[out.dtype], pad=pad, **window, align_checks=[])
    a = op.attrs
    layouts = (f"nhwc/ohwi r{r}s{s} stride{a.stride[0]}x{a.stride[1]} pad{pad[0]}x{pad[1]} "
               f"dil{a.dilation[0]}x{a.dilation[1]}")
    ep = getattr(a, "epilogue", None)
    problem = select.Problem("conv2d_simt", f"{ep.expr if ep is not None else ''}|", DType.float32, out.dtype, layouts,
                             "sm_80", n * p * q, k, c * r * s, IntImm(1),
                             cands.gemm_candidates("sm_80", DType.float32, tensor_cores=False), streamk=False)
    return "conv_fprop_simt.cu.j2", params, list(dims), problem, plan


@lowering("cuda", OpKind.CONV2D, epilogue=True)
def lower_conv(op: Op, ctx: LowerContext) -> list[KernelCall]:
    arch = ctx.arch or "sm_80"
    dense_result(ctx, op, op.outputs[0])
    template, params, dims, problem, plan = conv_kernel(op, arch, bool(getattr(ctx.opts, "allow_tf32", False)))
    own, extras = split_operands(op.inputs, op.attrs)
    out = op.outputs[0]
    name = op.name or op.kind.value
    if problem is None:
        spec = KernelSpec.make(ctx.template(template), **params)
        return [KernelCall(spec, [out, own[0], own[1]] + list(own[2:]) + list(extras), dims, name)]
    params["configs"] = configs(problem, arch)
    params["profiler"] = False
    spec = KernelSpec.make(ctx.template(template), **params)
    ptrs = [out, own[0], own[1]] + [ld.tensor for ld in plan.loads]
    return [KernelCall(spec, ptrs, dims, name)] + apply_calls(ctx, plan, out, name)
