"""GPU (CUDA and ROCm, one source: gpu/dialect.py) scans (cumsum, cumprod) -> one kernel (backends/gpu/templates/scan.cu.j2), with the CPU
lowering's [outer, n, inner] view: a thread per column walks the axis, or, where the axis is the
contiguous one, a warp per row (shuffles scan 32-element chunks)."""
from __future__ import annotations

from ....ir.dims import IntImm, prod
from ....ir.op import Op, OpKind
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, dialect, template
from .elementwise import BLOCKS_PER_SM, THREADS


@lowering(BACKENDS, OpKind.CUMSUM, OpKind.CUMPROD)
def lower_scan(op: Op, ctx: LowerContext) -> list[KernelCall]:
    x, out = op.inputs[0], op.outputs[0]
    ax = op.attrs.axis
    spec = KernelSpec.make(template("scan.cu.j2"), op="sum" if op.kind is OpKind.CUMSUM else "prod",
                           exclusive=bool(op.attrs.exclusive), reverse=bool(op.attrs.reverse), t=STORAGE[x.dtype],
                           ct=COMPUTE[x.dtype], load_value=load(x.dtype, "(&v)", "0"), store=store(out.dtype, "VAL"),
                           threads=THREADS, per_sm=BLOCKS_PER_SM, warp=dialect(ctx).warp)
    dims = [prod(x.shape[:ax]), x.shape[ax] if x.ndim else IntImm(1), prod(x.shape[ax + 1:])]
    return [KernelCall(spec, [out, x], dims, op.name or op.kind.value)]
