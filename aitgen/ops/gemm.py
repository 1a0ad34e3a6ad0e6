"""Matmul family: gemm (AIT layout names rcr, rrr, crr, ccr), batched matmul, linear, matmul."""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..ir.tensor import Tensor

__all__ = ["GemmAttrs", "BmmAttrs", "gemm", "bmm", "linear", "matmul"]


@dataclasses.dataclass(frozen=True)
class GemmAttrs:
    """C[M,N] = op(A) @ op(B) (+ bias[N]). trans_a: A stored [K,M]; trans_b: B stored [N,K]."""
    trans_a: bool = False
    trans_b: bool = False

    @property
    def layout(self) -> str:  # AITemplate's names: a, b, c; c is always row-major
        return ("c" if self.trans_a else "r") + ("c" if self.trans_b else "r") + "r"


@dataclasses.dataclass(frozen=True)
class BmmAttrs:
    trans_a: bool = False
    trans_b: bool = False


def gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, *, layout: str = "rrr", name=None) -> Tensor:
    """a [..., M, K] ('r') or [K, M] ('c', 2-D only); b [K, N] ('r') or [N, K] ('c'); bias [N]."""
    raise NotImplementedError


def bmm(a: Tensor, b: Tensor, *, trans_a: bool = False, trans_b: bool = False, name=None) -> Tensor:
    """a [*batch, M, K], b [*batch, K, N] with numpy broadcasting of batch dims."""
    raise NotImplementedError


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, name=None) -> Tensor:
    """x [..., K] @ weight[N, K]^T + bias[N] (gemm 'rcr')."""
    raise NotImplementedError


def matmul(a: Tensor, b: Tensor, name=None) -> Tensor:
    """numpy.matmul semantics for rank >= 2 operands (gemm when b is 2-D, else bmm)."""
    raise NotImplementedError
