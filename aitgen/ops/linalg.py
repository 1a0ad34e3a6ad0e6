"""det: determinants of square matrices over the last two dims (ONNX Det).

x [..., n, n] (a float dtype) -> [...] in x's dtype. The oracle and the CPU kernel factor each
matrix by LU with partial pivoting in float64 and round the product once (numpy's det is LU too;
float64 keeps float32 results within an ulp or two of it). n is static.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError
from ..ir.op import NoAttrs, OpKind
from ..ir.tensor import Tensor
from .registry import Category, _desc, check, make_op1, register

__all__ = ["det"]


def _infer(inputs, a):
    (x,) = inputs
    check(x.dtype.is_float, f"needs a float operand, got {_desc(x)}", DTypeError)
    check(x.ndim >= 2 and x.shape[-1].is_static and x.shape[-1] == x.shape[-2],
          f"needs square matrices [..., n, n] with a static n, got {_desc(x)}")
    return [(tuple(x.shape[:-2]), x.dtype)]


def _ref(args, a, ctx):
    (x,) = args
    return [np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)]


register(OpKind.DET, Category.REDUCE, NoAttrs, _infer, _ref, num_inputs=(1, 1))


def det(x: Tensor, name=None) -> Tensor:
    """The determinant of each matrix in the last two dims of x."""
    return make_op1(OpKind.DET, [x], NoAttrs(), name)
