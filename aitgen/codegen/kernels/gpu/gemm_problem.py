"""The geometry of a GPU GEMM-shaped op, the part every GPU backend reads alike: gemm and bmm as one
problem out[l, m, n] = sum_k A[l, m, k] B[l, k, n], A and B each row- or column-major, a batch
stride per operand (0: one matrix for every batch). CUDA renders it through CUTLASS
(kernels/cuda/gemm.py), ROCm through Composable Kernel (kernels/rocm/gemm.py); both libraries take
the same M/N/K/L, leading dims and batch strides, so how an op's operands map onto them is decided
once, here. What each library refuses (dtypes, sizes) stays with its backend; `who` names the
backend in the errors raised here.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm, prod
from ....ir.op import Op
from ....ir.tensor import Tensor
from ....ops.fused import split_operands
from ...lower import LowerContext
from .epilogue import MnlAxes


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    """One GEMM-shaped op in the libraries' terms (see the module doc)."""
    op: Op
    out: Tensor
    a: Tensor
    b: Tensor
    bias: Optional[Tensor]
    extras: tuple[Tensor, ...]
    m: Dim
    n: Dim
    k: Dim
    l: Dim
    a_col: bool        # A stored [K, M]
    b_col: bool        # B stored [N, K]
    batch_a: Dim       # element stride between batches; 0 when every batch reads the same matrix
    batch_b: Dim
    axes: MnlAxes      # which axes of the result are L and M (the epilogue's loads read over them)

    @property
    def lda(self) -> Dim:
        return self.m if self.a_col else self.k

    @property
    def ldb(self) -> Dim:
        return self.k if self.b_col else self.n

    @property
    def layouts(self) -> str:
        return ("c" if self.a_col else "r") + ("c" if self.b_col else "r") + "r"


def _dense_operands(op: Op, who: str) -> None:
    """Operands read through strided views (fuse_memory_ops sets them only where a lowering
    declares the "operand_views" feature, which the GPU GEMMs do not) would be read wrong: refuse."""
    if getattr(op.attrs, "operand_views", None) is not None:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': operands read through strided views have no "
                                 f"{who} GEMM kernel")


def dense_result(ctx: LowerContext, op: Op, out: Tensor, who: str) -> None:
    """A result written at strides (a slice of a concat, the memory plan) needs the
    "strided_output" feature, which the GPU GEMM and conv lowerings do not declare: refuse rather
    than write densely."""
    if getattr(ctx.plan, "strided_writes", {}).get(out) is not None:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': a result written at strides has no {who} GEMM kernel")


def gemm_problem(op: Op, who: str) -> GemmProblem:
    _dense_operands(op, who)
    (own, extras) = split_operands(op.inputs, op.attrs)
    a, b = own[:2]
    bias = own[2] if len(own) == 3 else None
    out = op.outputs[0]
    ta, tb = op.attrs.trans_a, op.attrs.trans_b
    m, n = prod(out.shape[:-1]), out.shape[-1]  # a's leading dims fold into M
    k = a.shape[0] if ta else a.shape[-1]
    return GemmProblem(op, out, a, b, bias, tuple(extras), m, n, k, IntImm(1), ta, tb, m * k, k * n,
                       MnlAxes.folded(len(out.shape)))


def _batch_stride(t: Tensor, batch: tuple[Dim, ...], op: Op, what: str, who: str) -> Dim:
    """An operand's stride between the result's batches: its matrix size if it has every batch
    dim, 0 if it has none (all 1). Neither library reads a batch broadcast over part of the dims."""
    lead = [IntImm(1)] * (len(batch) - (len(t.shape) - 2)) + list(t.shape[:-2])
    if all(d == 1 for d in lead):
        return IntImm(0)
    if all(d == o for d, o in zip(lead, batch)):
        return t.shape[-2] * t.shape[-1]
    raise UnsupportedOpError(f"bmm '{op.name}': operand {what} {list(t.shape)} broadcasts over part of the batch "
                             f"dims {list(batch)}; the {who} kernel takes operands with all of them or none")


def bmm_problem(op: Op, who: str) -> GemmProblem:
    _dense_operands(op, who)
    (a, b), extras = split_operands(op.inputs, op.attrs)
    out = op.outputs[0]
    ta, tb = op.attrs.trans_a, op.attrs.trans_b
    k = a.shape[-2] if ta else a.shape[-1]
    if not ta and all(d == 1 for d in b.shape[:-2]):
        # One B for every batch: A's batch folds into M, one larger GEMM.
        m, n = prod(out.shape[:-1]), out.shape[-1]
        return GemmProblem(op, out, a, b, None, tuple(extras), m, n, k, IntImm(1), False, tb, m * k, k * n,
                           MnlAxes.folded(len(out.shape)))
    batch = tuple(out.shape[:-2])
    m, n = out.shape[-2:]
    return GemmProblem(op, out, a, b, None, tuple(extras), m, n, k, prod(batch), ta, tb,
                       _batch_stride(a, batch, op, "a", who), _batch_stride(b, batch, op, "b", who),
                       MnlAxes.batched(len(out.shape)))
