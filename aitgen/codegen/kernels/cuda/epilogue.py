"""The fused epilogue of a CUDA GEMM-shaped kernel (gemm, bmm, conv fprop, grouped GEMM): the GPU
backends' shared plan (kernels/gpu/epilogue.py: the functor rendered once from the fused
expression, and how each operand loads over (L, M, N)) in CUTLASS's types, plus the loads of
CUTLASS's visitor trees (evt_loads). CUTLASS sees every such kernel's result as a row-major [M, N]
matrix per batch index L; one generic visitor-tree shape applies the functor:
Compute<functor>(AccFetch, loads...).
"""
from __future__ import annotations

from typing import Optional, Sequence

from ....ir.dims import Dim, IntImm
from ....ir.dtype import DType
from ....ir.op import Op
from ....ir.tensor import Tensor
from ..gpu import epilogue as shared
from ..gpu.epilogue import (EpiloguePlan, Load, MnlAxes, apply_kernel, classify, general_loads,  # noqa: F401
                            strided_loads, vector_width)

CUTLASS_TYPE = {DType.float16: "cutlass::half_t", DType.bfloat16: "cutlass::bfloat16_t", DType.float32: "float"}


def plan(op: Op, out: Tensor, bias: Optional[Tensor], extras: Sequence[Tensor], axes: MnlAxes) -> EpiloguePlan:
    """The functor and the loads of `op`'s epilogue (bias first). UnsupportedOpError for dtypes the
    CUDA kernels cannot read."""
    return shared.plan(op, out, bias, extras, axes, CUTLASS_TYPE, "CUDA")


def accumulator_functor(op: Op, out: Tensor) -> dict:
    """acc -> acc: the functor of a kernel whose whole epilogue runs in a pass after it."""
    return shared.accumulator_functor(op, out, "CUDA")


def full_functor(op: Op, out: Tensor, bias: Optional[Tensor], extras: Sequence[Tensor]) -> dict:
    """The whole epilogue as one functor, for kernels that index every operand by strides."""
    return shared.full_functor(op, out, bias, extras, "CUDA")


def evt_loads(p: EpiloguePlan, first_ptr: int, first_dim: int) -> tuple[list[dict], list[Dim]]:
    """Template params of the loads (pointer index, dims indices of their strides) and the dims
    they add to the kernel's: an aux load's row stride and every batch stride."""
    out, dims = [], []
    for j, ld in enumerate(p.loads):
        entry = dict(kind=ld.kind, ctype=CUTLASS_TYPE[ld.tensor.dtype], ptr=first_ptr + j, ld=-1, l=-1,
                     itemsize=ld.tensor.dtype.itemsize)
        if ld.kind == "aux":
            entry["ld"] = first_dim + len(dims)
            dims.append(ld.stride_m)
        if ld.stride_l != IntImm(0):
            entry["l"] = first_dim + len(dims)
            dims.append(ld.stride_l)
        out.append(entry)
    return out, dims
