"""GPU (CUDA and ROCm, one source: gpu/dialect.py) pooling over NHWC -> one kernel each: max / average windows (backends/gpu/templates/
pool.cu.j2), one thread per output pixel and pack of channels (packs of up to 16 bytes when C and
the pointers allow); global average pooling is the reduce kernel's [N, H*W, C] mean (gpu/reduce.py,
"col" mode: adjacent threads, adjacent channels). Window attributes are static params; N, H, W, C,
HO, WO are dims, as on the CPU (HO and WO from the op's shape rule, ceil mode included).
"""
from __future__ import annotations

from ....ir.op import Op, OpKind
from ....ir.dtype import DType
from ...cexpr import COMPUTE, STORAGE
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, template
from .elementwise import BLOCKS_PER_SM, THREADS, pack_elems, static_multiple
from .reduce import reduce_call_gpu


@lowering(BACKENDS, OpKind.MAX_POOL2D, OpKind.AVG_POOL2D)
def lower_pool2d(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    a = op.attrs
    is_max = op.kind is OpKind.MAX_POOL2D
    n, h, w, c = x.shape
    _, ho, wo, _ = out.shape
    vec = pack_elems([x.dtype])
    if static_multiple(c, vec) is False:
        vec = 1
    spec = KernelSpec.make(template("pool.cu.j2"), kind="max" if is_max else "avg",
                           kernel=list(a.kernel), stride=list(a.stride), pad=list(a.padding),
                           dilation=list(a.dilation), include_pad=bool(a.count_include_pad) and not is_max,
                           t=STORAGE[x.dtype], ct=COMPUTE[x.dtype] if is_max or x.dtype is DType.float64 else "float", vec=vec,
                           threads=THREADS, per_sm=BLOCKS_PER_SM)
    return [KernelCall(spec, [out, x], [n, h, w, c, ho, wo], op.name or op.kind.value)]


@lowering(BACKENDS, OpKind.GLOBAL_AVG_POOL)
def lower_global_avg_pool(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return [reduce_call_gpu(ctx, "mean", op.inputs[0], op.outputs[0], {1, 2}, op.name or op.kind.value)]
