"""Layout ops (ops/view.py) -> byte-exact copy kernels: permute, expand, slice, concat and split
as one strided copy (backends/cpu/templates/strided_copy.cpp.j2; concat one per operand, split one
per part) and pad (pad.cpp.j2). The geometry (merged loop dims, strides, offsets, the loop shape)
is common/copy.py's; this file picks the CPU kernel and its tuning. A reshape is a view and
lowers to nothing.
"""
from __future__ import annotations

from ....ir.dims import Dim
from ....ir.op import Op, OpKind
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common import copy

PAR_MIN_BYTES = 1 << 16   # below 64 KiB a parallel region costs more than the copy
CHUNK_BYTES = 1 << 15     # long rows split into 32 KiB pieces so one big row still uses every core
TILE = 32                 # 32x32 element tiles for transposes that move the contiguous dim


def _strided_copy(ctx: LowerContext, item: int, numel: Dim, **geometry) -> KernelSpec:
    return KernelSpec.make(ctx.template("strided_copy.cpp.j2"), **geometry, tile=TILE,
                           chunk=max(1, CHUNK_BYTES // item), par_min=PAR_MIN_BYTES // item)


def _pad(ctx: LowerContext, item: int, numel: Dim, **geometry) -> KernelSpec:
    return KernelSpec.make(ctx.template("pad.cpp.j2"), **geometry, par_min=PAR_MIN_BYTES // item)


@lowering("cpu", OpKind.PERMUTE, features=("strided_output",))
def lower_permute(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.permute_calls(op, ctx, _strided_copy)


@lowering("cpu", OpKind.EXPAND, features=("strided_output",))
def lower_expand(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.expand_calls(op, ctx, _strided_copy)


@lowering("cpu", OpKind.SLICE, features=("strided_output",))
def lower_slice(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.slice_calls(op, ctx, _strided_copy)


@lowering("cpu", OpKind.CONCAT)
def lower_concat(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.concat_calls(op, ctx, _strided_copy)


@lowering("cpu", OpKind.SPLIT)
def lower_split(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.split_calls(op, ctx, _strided_copy)


@lowering("cpu", OpKind.PAD)
def lower_pad(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.pad_calls(op, ctx, _pad)
