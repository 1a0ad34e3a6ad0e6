"""conv2d and conv_transpose2d -> one oneDNN kernel template (backends/cpu/templates/conv_onednn.cpp.j2).

Activations are NHWC: oneDNN's logical NCHW dims with channel-innermost strides. The weights are
described where they lie, as strides over OHWI (conv) or [C_in, KH, KW, C_out/g] (transposed),
grouped weights as 5-D [G, O/G, I/G, KH, KW]; the primitive then picks its own blocked layout and
the kernel packs the weight into it (once, when the weight is a constant). Window attributes are
static params in oneDNN's terms (dilation - 1; the transposed conv's output_padding as less padding
after); N, H, W and the channels are run-time dims.
"""
from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ...lower import LowerContext, lowering
from ...bounds import bound_refs
from ...spec import CONSTANTS_VERSION, KernelCall, KernelSpec
from . import epilogue
from .gemm import Md, dense_strides, is_constant, md_dims, onednn_types, quant_operands, quant_params, result_types


def _nhwc(n: Dim, c: Dim, h: Dim, w: Dim) -> Md:
    """Logical [N, C, H, W] of a dense NHWC tensor."""
    sn, sh, sw, sc = dense_strides([n, h, w, c])
    return [n, c, h, w], [sn, sc, sh, sw]


def _weights(shape, groups: int, transposed: bool) -> Md:
    """oneDNN's [(G,) O, I, KH, KW] over our stored weight: OHWI [O, KH, KW, I/g] for a conv,
    [C_in, KH, KW, C_out/g] for a transposed conv (oneDNN's O is always the output channels)."""
    a0, kh, kw, a3 = shape
    s0, skh, skw, s3 = dense_strides(shape)
    if transposed:  # a0 = C_in = g * I/g (outer), a3 = O/g (innermost)
        og, ig, so, si = a3, a0 // groups, s3, s0
    else:           # a0 = O = g * O/g (outer), a3 = I/g (innermost)
        og, ig, so, si = a0 // groups, a3, s0, s3
    if groups == 1:
        return [og, ig, kh, kw], [so, si, skh, skw]
    sg = (og if not transposed else ig) * (so if not transposed else si)  # one group's block of a0
    return [IntImm(groups), og, ig, kh, kw], [sg, so, si, skh, skw]


@lowering("cpu", OpKind.CONV2D, OpKind.CONV_TRANSPOSE2D, epilogue=True,
           features=("strided_output", "epilogue_widen"))
def lower_conv(op: Op, ctx: LowerContext) -> list[KernelCall]:
    own, extras = epilogue.own_operands(op)
    x, w = own[:2]
    quant = None
    if op.kind is OpKind.QCONV2D:  # [x, w int8, x_scale, w_scale, bias?, out_scale?]: the same conv, int8
        quant, own = quant_operands(op, own)
    bias = own[2] if len(own) == 3 else None
    out = op.outputs[0]
    a = op.attrs
    transposed = op.kind is OpKind.CONV_TRANSPOSE2D
    (pt, pb, pl, pr) = a.padding
    pad_r = [pb, pr]
    if transposed:
        # oneDNN has no output_padding: the extra rows are less padding after (which may go negative).
        pad_r = [pb - a.output_padding[0], pr - a.output_padding[1]]
        for p, s in zip(pad_r, a.stride):
            if p + s <= 0:
                raise UnsupportedOpError(f"conv_transpose2d '{op.name}': output_padding {a.output_padding} "
                                         f"exceeds padding {a.padding} by a stride or more, which oneDNN "
                                         "cannot express")
    wei = _weights(w.shape, a.groups, transposed)
    out_md = _nhwc(*(out.shape[i] for i in (0, 3, 1, 2)))
    out_strides = ctx.plan.strided_writes.get(out)  # a strided slice of a channel concat
    if out_strides is not None:
        sn, sh, sw, sc = out_strides
        out_md = (out_md[0], [sn, sc, sh, sw])
    dims = md_dims(_nhwc(*(x.shape[i] for i in (0, 3, 1, 2))), wei, out_md)
    if bias is not None:
        dims += md_dims(([out.shape[3]], [IntImm(1)]))
    prepack = is_constant(ctx, w)
    types = result_types(op, x, out) if quant is None else dict(onednn_types(DType.float32), f32_dst=False)
    ep, key, loop_dims = epilogue.plan(op, out, extras, first_ptr=3 + (bias is not None), key_offset=len(dims),
                                       prepack=prepack, convert=types["convert"],
                                       own_dtype=x.dtype if quant is None else DType.float32,
                                       dst_md=epilogue.nhwc_md(out.shape), rank=4, out_strides=out_strides)
    dims += key
    ptrs = [out, x, w] + ([bias] if bias is not None else []) + extras
    qp = quant_params(quant, ptrs)
    # Winograd F(4x4, 3x3) (aitgen/cpu_winograd.h): the kernel decides per shape; here what must hold
    # for every shape. float32 storage only: 16-bit storage takes oneDNN's narrow kernels.
    winograd = bool(getattr(ctx.opts, "winograd", True) and quant is None and not transposed and a.groups == 1
                    and tuple(a.stride) == (1, 1) and tuple(a.dilation) == (1, 1) and w.shape[1] == 3
                    and w.shape[2] == 3 and prepack and x.dtype is DType.float32 and out.dtype is DType.float32)
    # Float kernels carry bounds on |values| from producer to reader (codegen/bounds.py): a slot per
    # pointer after them. int8 kernels have no guards.
    slots = {} if quant is not None else {"bound_at": len(ptrs)}
    spec = KernelSpec.make(ctx.template("conv_onednn.cpp.j2"), transposed=transposed, wei_rank=len(wei[0]),
                           strides=list(a.stride), dilates=[d - 1 for d in a.dilation], padding_l=[pt, pl],
                           padding_r=pad_r, has_bias=bias is not None, prepack=prepack, nkey=len(dims),
                           winograd=winograd, **types, **ep, **qp, **slots)
    if slots:
        ptrs = ptrs + bound_refs(ptrs)
    return [KernelCall(spec, ptrs, dims + ([CONSTANTS_VERSION] if prepack else []) + loop_dims,
                       op.name or op.kind.value)]


# int8 convs (passes/quantize_int8.py): one oneDNN int8 convolution (conv_onednn.cpp.j2).
# Not strided_output: a requantised (int8) result has no strided store.
lowering("cpu", OpKind.QCONV2D, epilogue=True)(lower_conv)
