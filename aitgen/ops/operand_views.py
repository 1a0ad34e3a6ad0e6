"""Strided operand reads for ops other than attention: `attrs.operand_views[i]` (a StridedView, or
None) reads operand i as a window of its tensor instead of the tensor itself.

fuse_memory_ops sets them where a permute, slice, split part or expand feeds an op that can read
through strides (a GEMM's A operand, a fused element-wise group's operands): the copy goes away
and the op reads the producer's bytes where they lie. As for attention (ops/attention.py), the op
then sees the view's shape; the tensor only has to hold every element the view reads. The
reference reads the view into a contiguous array first, so the op computes on exactly the values
the copy would have given it.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..errors import ShapeError
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from .attention import StridedView, _check_read_view, _read  # noqa: F401 - StridedView re-exported

__all__ = ["StridedView", "with_views_infer", "with_views_reference", "logical_inputs"]


def _views(attrs, n: int) -> Optional[tuple]:
    views = getattr(attrs, "operand_views", None)
    if views is not None and len(views) != n:
        raise ShapeError(f"{len(views)} operand views for {n} operands")
    return views


def logical_inputs(inputs, attrs) -> list:
    """The operands as the op sees them: a view's shape (in the tensor's dtype) where it has one."""
    views = _views(attrs, len(inputs))
    if views is None:
        return list(inputs)
    out = []
    for i, (t, v) in enumerate(zip(inputs, views)):
        if v is None:
            out.append(t)
            continue
        _check_read_view(i, t, v)
        out.append(Tensor(tuple(v.shape), t.dtype, name=t.name))
    return out


def with_views_infer(infer: Callable) -> Callable:
    def wrapped(inputs, attrs):
        return infer(logical_inputs(inputs, attrs), attrs)
    return wrapped


def with_views_reference(ref: Callable) -> Callable:
    def wrapped(args, attrs, ctx):
        views = _views(attrs, len(args))
        if views is not None:
            args = [_read(a, v, ctx.env) for a, v in zip(args, views)]
        return ref(args, attrs, ctx)
    return wrapped


def matrix_view(view: StridedView) -> Optional[tuple]:
    """(rows, row stride, cols, col stride) of a [..., M, K] view whose leading dims fold into the
    rows (each steps over the next: one row stride for all M rows), else None. What a GEMM reads
    as its A operand: oneDNN takes any strides of a 2-D matrix."""
    from ..ir.dims import IntImm, prod
    shape, strides = tuple(view.shape), tuple(view.strides)
    if len(shape) < 2:
        return None
    lead = [(n, s) for n, s in zip(shape[:-1], strides[:-1]) if n != 1]
    for (n0, s0), (n1, s1) in zip(lead, lead[1:]):
        if s0 != s1 * n1:
            return None
    rows = prod(shape[:-1])
    row_stride = lead[-1][1] if lead else shape[-1] * strides[-1]
    if row_stride == 0 and rows != 1:
        return None  # every row the same element: a broadcast, not a matrix oneDNN reads
    return rows, row_stride, shape[-1], strides[-1] if shape[-1] != 1 else IntImm(1)


def is_constant_prefix(op: Op) -> bool:
    """A slice of a constant that keeps its first bytes: steps 1, starts 0, one axis cut, every
    axis before it of size 1 and every axis after it whole. torch.export's dynamic position ids
    read `table[:seq]` (what a static import folds into a constant); as a view of the weights it
    costs nothing, where a copy would be a kernel the static build does not have."""
    if op.kind is not OpKind.SLICE or not op.inputs[0].is_constant:
        return False
    a = op.attrs
    if any(s != 0 for s in a.starts) or any(st != 1 for st in a.steps):
        return False
    x, y = op.inputs[0].shape, op.outputs[0].shape
    cut = [k for k in range(len(x)) if not x[k] == y[k]]
    if len(cut) != 1:
        return len(cut) == 0  # a whole-tensor slice is the tensor
    return all(d.is_static and d.value == 1 for d in x[:cut[0]])


def row_groups(view: StridedView) -> Optional[list[list[int]]]:
    """The leading dims of a [..., M, N] view with unit column stride, split into runs that fold
    (each dim steps over the next): [[0], [1, 2]] for a batch of 16 rows at a stride of 544
    elements, each row 32 apart (ViT's patches written into its tokens, [B, 4, 4, 32] at strides
    [544, 128, 32, 1]). The last run is the matrix's rows, the runs before it batch dims. One run
    is a matrix (matrix_view). None when a dim of size 0 or a column stride other than 1 makes it
    no batch of matrices. Size-1 dims go with the run before them (their stride is never used)."""
    shape, strides = tuple(view.shape), tuple(view.strides)
    if len(shape) < 2 or strides[-1] != 1 or any(d == 0 for d in shape):
        return None
    runs: list[list[int]] = []
    last = None  # (size, stride) of the run's innermost dim of size > 1
    for i, (n, s) in enumerate(zip(shape[:-1], strides[:-1])):
        if n == 1:
            if not runs:
                runs.append([])
            runs[-1].append(i)
            continue
        if last is None or last[1] != s * n:
            if last is not None or not runs:
                runs.append([])
        runs[-1].append(i)
        last = (n, s)
    return runs
