"""Matmul family: gemm (AIT layout names rcr, rrr, crr, ccr), batched matmul, linear, matmul."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.dims import shape_str
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .elementwise import broadcast_shapes
from .fused import MAX_EXTRA, Epilogue, with_epilogue_infer, with_epilogue_reference
from .operand_views import StridedView, matrix_view, with_views_infer, with_views_reference
from .registry import Category, check, make_op1, register

__all__ = ["GemmAttrs", "BmmAttrs", "gemm", "bmm", "linear", "matmul"]


@dataclasses.dataclass(frozen=True)
class GemmAttrs:
    """C[M,N] = op(A) @ op(B) (+ bias[N]). trans_a: A stored [K,M]; trans_b: B stored [N,K].
    epilogue: a fused element-wise DAG applied to C (its extra operands follow the bias)."""
    trans_a: bool = False
    trans_b: bool = False
    epilogue: Optional["Epilogue"] = None
    # per operand: None, or a strided window of it that the GEMM reads instead (ops/operand_views.py)
    operand_views: Optional[tuple[Optional[StridedView], ...]] = None

    @property
    def layout(self) -> str:  # AITemplate's names: a, b, c; c is always row-major
        return ("c" if self.trans_a else "r") + ("c" if self.trans_b else "r") + "r"


@dataclasses.dataclass(frozen=True)
class BmmAttrs:
    trans_a: bool = False
    trans_b: bool = False
    epilogue: Optional["Epilogue"] = None


_LAYOUTS = {"rrr": (False, False), "rcr": (False, True), "crr": (True, False), "ccr": (True, True)}


def _check_dtypes(inputs) -> None:
    a = inputs[0]
    for i, t in enumerate(inputs[1:], start=1):
        if t.dtype != a.dtype:
            raise DTypeError(f"operand {i} has dtype {t.dtype}, operand 0 has {a.dtype}; they must match")


# -- gemm -----------------------------------------------------------------------------------

def _check_gemm_views(inputs, attrs: GemmAttrs) -> None:
    """Only A is read through a view, one whose leading dims fold into the rows."""
    views = attrs.operand_views
    if views is None:
        return
    check(len(views) == len(inputs), f"{len(views)} operand views for {len(inputs)} operands")
    check(all(v is None for v in views[1:]), "only operand a may be read through a view")
    check(views[0] is None or not attrs.trans_a and matrix_view(views[0]) is not None,
          f"a's view {views[0]} is not a row-major window of rows (or a is transposed)")


def _infer_gemm(inputs, attrs: GemmAttrs):
    _check_dtypes(inputs)
    a, b = inputs[0], inputs[1]
    if attrs.trans_a:
        # A column-major A is one [K, M] matrix: leading dims would make "column-major" ambiguous.
        check(a.ndim == 2, f"a must be 2-D [K, M] for layout '{attrs.layout}', got rank {a.ndim} "
                           f"{shape_str(a.shape)}")
        k_a, m = a.shape
        lead = ()
    else:
        check(a.ndim >= 2, f"a must have rank >= 2 [..., M, K], got rank {a.ndim} {shape_str(a.shape)}")
        m, k_a = a.shape[-2:]
        lead = tuple(a.shape[:-2])
    check(b.ndim == 2, f"b must be 2-D, got rank {b.ndim} {shape_str(b.shape)}")
    n, k_b = (b.shape if attrs.trans_b else b.shape[::-1])
    check(k_a == k_b, f"reduction dims differ for layout '{attrs.layout}': a has K={k_a}, b has K={k_b}")
    if len(inputs) == 3:
        bias = inputs[2]
        check(bias.ndim == 1 and bias.shape[0] == n,
              f"bias must have shape [{n}] (N), got {shape_str(bias.shape)}")
    return [(lead + (m, n), a.dtype)]


def _ref_gemm(args, attrs: GemmAttrs, ctx):
    a, b = args[0], args[1]
    if attrs.trans_a:
        a = a.T
    if attrs.trans_b:
        b = b.T
    # Folding leading dims into M gives one BLAS call instead of a broadcast loop.
    rows = int(np.prod(a.shape[:-1]))  # not -1: a size-0 batch cannot infer it
    out = (a.reshape(rows, a.shape[-1]) @ b).reshape(a.shape[:-1] + (b.shape[1],))
    if len(args) == 3:
        out = out + args[2]
    return [out]


def _infer_gemm_viewed(inputs, attrs: GemmAttrs):
    _check_gemm_views(inputs, attrs)
    return with_views_infer(with_epilogue_infer(_infer_gemm))(inputs, attrs)


register(OpKind.GEMM, Category.GEMM, GemmAttrs, _infer_gemm_viewed,
         with_views_reference(with_epilogue_reference(_ref_gemm)), num_inputs=(2, 3 + MAX_EXTRA), float_only=True)


# -- bmm ------------------------------------------------------------------------------------

def _infer_bmm(inputs, attrs: BmmAttrs):
    _check_dtypes(inputs)
    a, b = inputs
    check(a.ndim >= 2 and b.ndim >= 2,
          f"operands must have rank >= 2, got {shape_str(a.shape)} and {shape_str(b.shape)}")
    m, k_a = a.shape[-1:-3:-1] if attrs.trans_a else a.shape[-2:]
    k_b, n = b.shape[-1:-3:-1] if attrs.trans_b else b.shape[-2:]
    check(k_a == k_b, f"reduction dims differ (trans_a={attrs.trans_a}, trans_b={attrs.trans_b}): "
                      f"a has K={k_a}, b has K={k_b}")
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ShapeError as e:
        raise ShapeError(f"batch dims do not broadcast: {e}") from None
    return [(batch + (m, n), a.dtype)]


def _ref_bmm(args, attrs: BmmAttrs, ctx):
    a, b = args
    if attrs.trans_a:
        a = np.swapaxes(a, -1, -2)
    if attrs.trans_b:
        b = np.swapaxes(b, -1, -2)
    return [np.matmul(a, b)]


register(OpKind.BMM, Category.GEMM, BmmAttrs, with_epilogue_infer(_infer_bmm), with_epilogue_reference(_ref_bmm),
         num_inputs=(2, 2 + MAX_EXTRA), float_only=True)


# -- builders -------------------------------------------------------------------------------

def gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, *, layout: str = "rrr", name=None) -> Tensor:
    """a [..., M, K] ('r') or [K, M] ('c', 2-D only); b [K, N] ('r') or [N, K] ('c'); bias [N]."""
    if layout not in _LAYOUTS:
        raise ValueError(f"gemm: layout must be one of {sorted(_LAYOUTS)}, got {layout!r}")
    ta, tb = _LAYOUTS[layout]
    inputs = [a, b] if bias is None else [a, b, bias]
    return make_op1(OpKind.GEMM, inputs, GemmAttrs(ta, tb), name)


def bmm(a: Tensor, b: Tensor, *, trans_a: bool = False, trans_b: bool = False, name=None) -> Tensor:
    """a [*batch, M, K], b [*batch, K, N] with numpy broadcasting of batch dims."""
    return make_op1(OpKind.BMM, [a, b], BmmAttrs(bool(trans_a), bool(trans_b)), name)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, name=None) -> Tensor:
    """x [..., K] @ weight[N, K]^T + bias[N] (gemm 'rcr')."""
    return gemm(x, weight, bias, layout="rcr", name=name)


def matmul(a: Tensor, b: Tensor, name=None) -> Tensor:
    """numpy.matmul semantics for rank >= 2 operands (gemm when b is 2-D, else bmm)."""
    for what, t in (("a", a), ("b", b)):
        if not isinstance(t, Tensor):
            raise DTypeError(f"matmul: operand {what} is a {type(t).__name__}, not a Tensor")
    for what, t in (("a", a), ("b", b)):
        if t.ndim < 2:
            raise ShapeError(f"matmul: operand {what} must have rank >= 2, got {shape_str(t.shape)} "
                             f"(operands: {shape_str(a.shape)}, {shape_str(b.shape)})")
    if b.ndim == 2:
        return gemm(a, b, layout="rrr", name=name)
    return bmm(a, b, name=name)
