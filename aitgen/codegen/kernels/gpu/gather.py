"""GPU (CUDA and ROCm, one source: gpu/dialect.py) gather (np.take along an axis; embeddings): every backend's geometry
(codegen/kernels/common/copy.py gather_calls: d = [outer, n, m, inner]) with a CUDA kernel
(backends/gpu/templates/gather.cu.j2) that moves rows of `inner` elements in the widest unit of
16, 8 or 4 bytes that the row length and pointers allow.

Indices are data that only the device sees. Checking them on the host would cost a copy and a
synchronisation every run, so the kernel clamps a bad index (it never reads out of bounds) and
records the first one (value, flat position, bound, the op's name) in the run's bad-input record
(ait::gpu::bad_input_record(), which the runtime provides: backends/cuda/src); the container reads
that record back when the run ends, where it synchronises anyway, and fails the run with
AIT_BAD_INPUT (RuntimeInputError in Python). The outputs of such a run are not defined.
"""
from __future__ import annotations

from ....ir.dims import Dim
from ....ir.op import Op, OpKind
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, template
from ..common import copy
from .elementwise import BLOCKS_PER_SM, PACK_BYTES, THREADS, index_types
from .view import UNIT_T


def _gather(ctx: LowerContext, item: int, numel: Dim, *, elem: str, index_t: str, axis: int, label: str) -> KernelSpec:
    units = [{"bytes": u, "t": UNIT_T[u]} for u in (PACK_BYTES, 8, 4) if u > item]
    return KernelSpec.make(template("gather.cu.j2"), elem=elem, item=item, index_t=index_t, axis=axis,
                           label=label, units=units, index_types=index_types(numel), threads=THREADS,
                           per_sm=BLOCKS_PER_SM)


@lowering(BACKENDS, OpKind.GATHER)
def lower_gather(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.gather_calls(op, ctx, _gather)
