"""det (ONNX Det) -> one kernel (backends/cpu/templates/det.cpp.j2): one LU factorisation per
matrix, in double; n is a template constant (the matrix lives on the stack), d = [matrix count]."""
from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.dims import prod
from ....ir.op import Op, OpKind
from ...cexpr import STORAGE, load, store
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec

MAX_N = 256  # n*n doubles on a thread's stack: 512 KiB at most


@lowering("cpu", OpKind.DET)
def lower_det(op: Op, ctx: LowerContext) -> list[KernelCall]:
    (x,), (y,) = op.inputs, op.outputs
    n = x.shape[-1].value
    if n > MAX_N:
        raise UnsupportedOpError(f"det '{op.name}': {n}x{n} matrices exceed the CPU kernel's {MAX_N}x{MAX_N}")
    spec = KernelSpec.make(ctx.template("det.cpp.j2"), n=n, t=STORAGE[x.dtype], load=load(x.dtype, "x", "i"),
                           store=store(x.dtype, "v"))
    return [KernelCall(spec, [y, x], [prod(y.shape)], op.name or op.kind.value)]
