"""Concat in place, for plan_memory: which concats have parts that their producers can write
straight into the output's buffer, and the buffer tree that makes of them.

A part placed in place is a child of the output's Buffer at a byte delta; its offset follows the
parent's, and the root buffer of such a tree holds every slice's bytes from the first one's write
to the last read of any of them. Concats nest: a part that is itself a concat's output carries its
own parts along to its slice.

Two kinds of slice:
- contiguous (every dim before the axis a static 1): the part is a dense block of the output, so
  any producer writes it as it would write a tensor of its own, and its readers read it so.
- strided (a concat along an inner axis: [N, H, W, C1] and [N, H, W, C2] into [N, H, W, C1 + C2]):
  the part's elements lie at the output's strides. Only a producer whose kernel writes its result
  at given strides may write one (its kind in caps.strided_output, plus the shape of write it can
  make: a GEMM writes rows, so its leading dims must fold into one row stride, or, for a plain
  row-major A, into batches of rows: row_groups),
  and only when the concat is the part's one reader: any other reader would expect a dense
  tensor. A part may be a reshape of the producer's result (ViT's patches: [B, 4, 4, H] conv
  output seen as [B, 16, H] tokens) when the reshape has a strided form. The plan records each
  tensor's strides (MemoryPlan.strided_writes) for the producer's lowering.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..capabilities import Capabilities
from ..ir.dims import Dim, prod
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.grouped import member_ops
from ..ops.operand_views import StridedView, matrix_view, row_groups
from ..ops.registry import Category, get_opdef
from ..passes.fuse_memory_ops import View, reshape_view


def concat_slices(op: Op, alignment: int) -> Optional[list[Optional[int]]]:
    """Byte offsets of a concat's parts in its output when the parts are contiguous slices of it
    (every dim before the axis a static 1; every part but the last of static size), with None for
    a part whose slice does not start `alignment`-aligned; None when the slices are not contiguous."""
    y = op.outputs[0]
    ax = op.attrs.axis
    if not all(d.is_static and d.value == 1 for d in y.shape[:ax]):
        return None
    deltas: list[Optional[int]] = []
    at = 0
    for i, x in enumerate(op.inputs):
        deltas.append(at if at % alignment == 0 else None)
        if i < len(op.inputs) - 1:
            if not all(d.is_static for d in x.shape):
                return None  # the next slice would start at a run-time offset
            at += x.nbytes_upper()
    return deltas


def strided_slices(op: Op, alignment: int) -> Optional[tuple[tuple[Dim, ...], list[Optional[int]]]]:
    """(the output's strides, each part's byte offset in it or None where not static and aligned)
    of a concat along an inner axis; None for a contiguous one (concat_slices) or an empty axis."""
    y = op.outputs[0]
    ax = op.attrs.axis
    if concat_slices(op, alignment) is not None:
        return None
    strides = tuple(prod(y.shape[j + 1:]) for j in range(len(y.shape)))
    step = strides[ax] * y.dtype.itemsize
    deltas: list[Optional[int]] = []
    at: Optional[int] = 0
    for x in op.inputs:
        ok = at is not None and step.is_static and (at * step.value) % alignment == 0
        deltas.append(at * step.value if ok else None)
        n = x.shape[ax]
        at = at + n.value if at is not None and n.is_static else None
    return strides, deltas


def place_concat_parts(graph: Graph, buf_of: dict, alignment: int,
                       strided_ok: Optional[Callable[[Tensor, tuple], bool]] = None
                       ) -> tuple[dict[Tensor, dict[int, int]], dict[Tensor, tuple]]:
    """Make the computed parts of concats children of the output's buffer (buf_of: id(tensor) ->
    its Buffer, for arena tensors): every part of a contiguous concat, and of an inner-axis concat
    the parts x whose producer `strided_ok(x, strides)` writes at the output's strides.
    Returns (output -> {operand index: byte delta}, part -> its strides in elements)."""
    placed: dict[Tensor, dict[int, int]] = {}
    strided: dict[Tensor, tuple] = {}
    for op in graph.ops:
        y = op.outputs[0]
        if op.kind is not OpKind.CONCAT or id(y) not in buf_of:
            continue
        deltas = concat_slices(op, alignment)
        layout = None
        if deltas is None:
            found = strided_slices(op, alignment) if strided_ok is not None else None
            if found is None:
                continue
            layout, deltas = found
        by = buf_of[id(y)]
        for i, (x, delta) in enumerate(zip(op.inputs, deltas)):
            bx = buf_of.get(id(x))
            # Not a user buffer, not the output itself (a view of it), not a slice already.
            if delta is None or bx is None or bx is by or bx.parent is not None:
                continue
            members = None
            if layout is not None:
                members = class_strides(bx.tensors, x, op, layout)
                if members is None or not strided_ok(bx.tensors[0], members[bx.tensors[0]]):
                    continue  # strided: the producer writes it, and the concat alone reads it
            bx.parent, bx.delta = by, delta
            by.children.append(bx)
            placed.setdefault(y, {})[i] = delta
            if members is not None:
                strided.update(members)
    return placed, strided


def class_strides(tensors: list, x: Tensor, concat: Op, layout: tuple) -> Optional[dict[Tensor, tuple]]:
    """The element strides of every tensor of x's view class when x lies at `layout`: x is its
    class's last view (reshapes of the producer's result), each member read only by the next and x
    by the concat alone (any other reader would expect a dense tensor); None when that is not so,
    or a reshape on the way has no strided form."""
    if tensors[-1] is not x or x.users != [concat] or concat.inputs.count(x) != 1:
        return None
    for a, b in zip(tensors, tensors[1:]):
        if len(a.users) != 1 or b.producer is not a.users[0]:
            return None
    out = {x: tuple(layout)}
    view = View(tuple(x.shape), tuple(layout), 0)
    for t in reversed(tensors[:-1]):
        view = reshape_view(view, t.shape)
        if view is None:
            return None
        out[t] = tuple(view.strides)
    return out


def span(b) -> tuple[int, int]:
    """First write and last read of a buffer and all its slices."""
    spans = [(b.start, b.end)] + [span(c) for c in b.children]
    return min(s for s, _ in spans), max(e for _, e in spans)


def place_children(b) -> None:
    """Offsets of a placed buffer's slices (recursively) from its own."""
    for c in b.children:
        c.offset = b.offset + c.delta
        place_children(c)


def strided_writer(caps: Capabilities) -> Callable[[Tensor, tuple], bool]:
    """Whether the target's kernel writes tensor x, the only result of its op (or of its member of
    a grouped op), at the given element strides (in x's own shape)."""

    def ok(x: Tensor, strides: tuple) -> bool:
        op = x.producer
        if op.kind is OpKind.GROUPED:
            op = next(m for m in member_ops(op) if any(o is x for o in m.outputs))
        if op.outputs != [x]:
            return False
        kind = op.kind
        try:
            if get_opdef(kind).category is Category.ELEMENTWISE:
                kind = OpKind.FUSED_ELEMENTWISE  # one kernel for both
        except Exception:  # noqa: BLE001 - a kind without a definition writes nothing strided
            return False
        if kind not in caps.strided_output or strides[-1] != 1:
            return False
        if kind is OpKind.GEMM:  # rows at one stride: the leading dims must fold
            view = StridedView(tuple(op.outputs[0].shape), tuple(strides))
            if matrix_view(view) is not None:
                return True
            # Batches of rows (ViT's patches into its tokens, batch > 1): A is then described in the
            # same batches, which its plain row-major layout allows (lower_gemm).
            return (not op.attrs.trans_a and not any(op.attrs.operand_views or ())
                    and row_groups(view) is not None)
        return True
    return ok
