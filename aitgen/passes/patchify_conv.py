"""patchify_conv: a convolution whose windows tile its input (stride == kernel, no padding, no
dilation, one group) becomes a GEMM over the patches.

ViT's patch embedding is such a conv (3 -> 768 channels, kernel 16, stride 16). Three input
channels are a shape convolution kernels are not built for: on the machine of issue 14 oneDNN ran
it with its reference kernel, 304 of a ViT-B/16's 412 ms. As a GEMM the same product is
[patches, 16*16*3] x [16*16*3, 768], a shape every GEMM kernel takes (oneDNN's brgemm matmul with
AVX-512, its jit gemm below). Where oneDNN has a fast conv for it, the GEMM is as fast (AVX-512
here: 1.14 against 1.12 ms on 2 threads, 2.15 against 2.20 on 1); where it has a slow one, faster
(oneDNN capped at SSE4.1: 6.3 against 10.6 ms on 1 thread; benchmarks/patch_conv.py). In NHWC the
patches are one reshape and one permute of the input away, and the OHWI weight is already
[O, KH*KW*C]:

    x [B, H, W, C] -> reshape [B, H/kh, kh, W/kw, kw*C] -> permute (0, 1, 3, 2, 4)
      -> reshape [B, H/kh, W/kw, kh*kw*C] = a;   conv(x, w, bias) = gemm(a, w as [O, kh*kw*C]ᵀ, bias)

The GEMM keeps the conv's result shape [B, H/kh, W/kw, O] (its leading dims fold into M), so the
conv's readers, and an epilogue the conv already carries (bias, activation, residual: its operands
broadcast against that shape), carry over unchanged; run before the epilogue fusions, the GEMM
takes them itself. The permute is one copy of the input (a strided copy kernel; after an
importer's NCHW -> NHWC permute, merge_view_chains makes the two permutes one).

Equal to the conv up to summation order (tests/passes/test_patchify_conv.py: float32 tolerance).
H and W must be static multiples of the kernel (a window that does not tile the input would need a
slice first: left as a conv), C static; the batch may be dynamic. 1x1 kernels are left alone: a
1x1 conv is a GEMM already, for oneDNN too. Needs GEMM and PERMUTE lowerings on the target
(opts.caps); without caps (CompileOptions() by hand) the pass does nothing.
"""
from __future__ import annotations

from typing import Optional

from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops import view as view_ops
from ..ops.fused import split_operands
from ..ops.gemm import GemmAttrs
from ..ops.registry import make_op1
from ..options import CompileOptions


def patchify_conv(graph: Graph, opts: CompileOptions) -> Graph:
    caps = opts.caps
    if caps is None or not {OpKind.GEMM, OpKind.PERMUTE} <= caps.kinds:
        return graph
    changed = False
    for op in list(graph.ops):
        kernel = _patch_kernel(op)
        if kernel is None:
            continue
        y = op.outputs[0]
        new = _as_gemm(op, *kernel)
        new.name = y.name
        graph.replace_all_uses(y, new)
        changed = True
    if changed:
        graph.sort()
    return graph


def _patch_kernel(op: Op) -> Optional[tuple[int, int, int]]:
    """(kh, kw, C) when `op` is a conv2d whose windows tile its input exactly, else None."""
    if op.kind is not OpKind.CONV2D:
        return None
    a = op.attrs
    x, w = op.inputs[:2]
    if a.groups != 1 or a.dilation != (1, 1) or any(a.padding):
        return None
    _, kh, kw, c = w.shape
    _, h, wd, _ = x.shape
    if not all(d.is_static for d in (kh, kw, c, h, wd)):
        return None
    kh, kw, c, h, wd = (d.value for d in (kh, kw, c, h, wd))
    if a.stride != (kh, kw) or kh * kw == 1 or h % kh or wd % kw:
        return None
    return kh, kw, c


def _as_gemm(op: Op, kh: int, kw: int, c: int) -> Tensor:
    (x, w, *bias), extras = split_operands(op.inputs, op.attrs)
    b, h, wd, _ = x.shape
    ho, wo = h.value // kh, wd.value // kw
    # (kw, C) are adjacent and dense in NHWC: one axis of kw*C, so the permute moves whole rows.
    patches = view_ops.reshape(x, [b, ho, kh, wo, kw * c])
    patches = view_ops.permute(patches, [0, 1, 3, 2, 4])
    patches = view_ops.reshape(patches, [b, ho, wo, kh * kw * c])
    # OHWI is [O, KH*KW*C] row-major: a view of the weight's bytes. A view, not a new constant, so
    # the weight keeps its name and shape for set_constants, and the GEMM still prepacks it.
    rows = view_ops.reshape(w, [w.shape[0], kh * kw * c])
    attrs = GemmAttrs(trans_b=True, epilogue=op.attrs.epilogue)
    return make_op1(OpKind.GEMM, [patches, rows, *bias, *extras], attrs, op.name)
