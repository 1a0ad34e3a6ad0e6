"""A row op's prologue (ops/prologue.py: a fused element-wise group feeding a layernorm, rmsnorm
or softmax) as template params, on every backend: the expression's C++ (expr.py) and how each
extra operand is read per row."""
from __future__ import annotations

from typing import Optional

from ....ir.op import Op
from ....ir.tensor import Tensor
from ...cexpr import COMPUTE, STORAGE, load
from .access import broadcast_strides
from .expr import expr_cpp


def prologue_params(op: Op, x: Tensor, extras: list[Tensor], row_dims: int,
                    qualifier: str = "inline") -> tuple[Optional[dict], list]:
    """Template params and extra dims of a row op's prologue (ops/prologue.py), or (None, []).

    The kernel evaluates the prologue over one row of x ([rows, n]) into a float buffer. Extras
    are read at a base computed per row from x's outer dims (appended to the dims, then the outer
    strides of each extra) plus i when the extra covers the row, or at the base alone when it is
    one value per row (`dense` says which). `qualifier` declares the expression's functions (expr_cpp).
    """
    pro = getattr(op.attrs, "prologue", None)
    if pro is None:
        return None, []
    outer = tuple(x.shape[:x.ndim - row_dims])
    cpp = expr_cpp(pro, [x.dtype] + [t.dtype for t in extras], qualifier=qualifier)
    loads, dims = [], list(outer)
    for k, t in enumerate(extras):
        st = broadcast_strides(t.shape, x.shape)
        dense = any(v != 0 for v in st[len(outer):])
        dims.extend(st[:len(outer)])
        loads.append({"t": STORAGE[t.dtype], "ct": COMPUTE[t.dtype], "dense": dense,
                      "load": load(t.dtype, f"e{k}", f"eb{k}" + (" + i" if dense else ""))})
    params = dict(functions=cpp["functions"], statements=cpp["statements"], extras=loads,
                  outer_rank=len(outer), x_t=STORAGE[x.dtype], x_ct=COMPUTE[x.dtype], x_load=load(x.dtype, "x", "r * n + i"),
                  result=f"s{pro.outputs[0]}", text=str(pro))
    return params, dims
