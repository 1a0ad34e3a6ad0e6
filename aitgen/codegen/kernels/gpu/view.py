"""GPU (CUDA and ROCm, one source: gpu/dialect.py) layout ops (ops/view.py): permute, expand, slice, concat, split (one strided copy each,
concat/split one per operand) and pad, with every backend's geometry (codegen/kernels/common/
copy.py: merged loop dims, strides, offsets, the loop shape) and CUDA kernels (backends/cuda/
templates/strided_copy.cu.j2, pad.cu.j2). Elements move as unsigned integers of their size, bit for bit.

Loop shapes, as common/copy.py chooses them: "contig" (the innermost loop dim contiguous on both
sides: copied in the widest unit of 16, 8 or 4 bytes that the sizes, strides, offsets and pointers
allow, checked by the host code at run time), "fill" (a broadcast row), "strided" (anything else:
one element per thread), "tile" (a transpose that moves the contiguous dim: 32x32 tiles through
shared memory, so reads and writes both stay coalesced).
"""
from __future__ import annotations

from ....ir.dims import Dim
from ....ir.op import Op, OpKind
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from .dialect import BACKENDS, template
from ..common import copy
from .elementwise import BLOCKS_PER_SM, PACK_BYTES, THREADS, index_types

TILE = 32        # tile edge of the transposing copy
TILE_ROWS = 8    # a 32 x 8 block moves a 32 x 32 tile, 4 elements per thread
UNIT_T = {16: "uint4", 8: "uint2", 4: "uint32_t"}  # the wide units of a contiguous copy


def _strided_copy(ctx: LowerContext, item: int, numel: Dim, *, elem: str, rank: int, mode: str) -> KernelSpec:
    units = [{"bytes": u, "t": UNIT_T[u]} for u in (PACK_BYTES, 8, 4) if u > item] if mode == "contig" else []
    return KernelSpec.make(template("strided_copy.cu.j2"), elem=elem, item=item, rank=rank, mode=mode,
                           units=units, tile=TILE, tile_rows=TILE_ROWS, index_types=index_types(numel),
                           threads=THREADS, per_sm=BLOCKS_PER_SM)


def _pad(ctx: LowerContext, item: int, numel: Dim, *, elem: str, rank: int, mode: str, fill_bits: int) -> KernelSpec:
    return KernelSpec.make(template("pad.cu.j2"), elem=elem, rank=rank, mode=mode, fill_bits=fill_bits,
                           index_types=index_types(numel), threads=THREADS, per_sm=BLOCKS_PER_SM)


@lowering(BACKENDS, OpKind.PERMUTE)
def lower_permute(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.permute_calls(op, ctx, _strided_copy)


@lowering(BACKENDS, OpKind.EXPAND)
def lower_expand(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.expand_calls(op, ctx, _strided_copy)


@lowering(BACKENDS, OpKind.SLICE)
def lower_slice(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.slice_calls(op, ctx, _strided_copy)


@lowering(BACKENDS, OpKind.CONCAT)
def lower_concat(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.concat_calls(op, ctx, _strided_copy)


@lowering(BACKENDS, OpKind.SPLIT)
def lower_split(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.split_calls(op, ctx, _strided_copy)


@lowering(BACKENDS, OpKind.PAD)
def lower_pad(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return copy.pad_calls(op, ctx, _pad)
