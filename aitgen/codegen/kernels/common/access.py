"""How operands are read over an output's index space, on every backend: strides (0 along a
broadcast dim, any stride for a strided view of another tensor) and the merged loop dims that
every operand walks alike."""
from __future__ import annotations

from ....ir.dims import Dim, IntImm, prod


def dense_strides(shape) -> list[Dim]:
    """Row-major strides of `shape`, in elements."""
    out, acc = [], IntImm(1)
    for d in reversed(tuple(shape)):
        out.append(acc)
        acc = acc * d
    return out[::-1]


def broadcast_strides(inp_shape: tuple[Dim, ...], out_shape: tuple[Dim, ...]) -> list[Dim]:
    """Strides of an operand read at the output's indices: 0 along broadcast dims."""
    r = len(out_shape)
    padded = (IntImm(1),) * (r - len(inp_shape)) + tuple(inp_shape)
    dense = dense_strides(padded)
    return [IntImm(0) if (p == 1 and o != 1) else s for p, o, s in zip(padded, out_shape, dense)]


def access_plan(out_shape, in_shapes) -> tuple[list[Dim], list[str], list[list[Dim]]]:
    """How each operand is read over the output: (merged dims, kinds, outer strides).

    Static size-1 dims of the output are dropped; neighbouring dims merge when every operand reads
    both alike (dense in both, or broadcast in both). An operand's kind is "full" (the output's
    shape: read at the output's index), "scalar" (one element) or "strided" (broadcast in some
    dims); a strided operand gets a stride per merged dim but the innermost (which is 1 or 0).
    """
    return merge_access(out_shape, [broadcast_strides(tuple(s), tuple(out_shape)) for s in in_shapes])


def merge_access(out_shape, operand_strides) -> tuple[list[Dim], list[str], list[list[Dim]]]:
    """access_plan for operands read at any strides over the output's index space (broadcast dims
    have stride 0; a strided view of another tensor, any stride): dims merge where every operand
    steps across both as across one (stride[j] == stride[j+1] * size[j+1]). A "strided" operand's
    list holds a stride for every merged dim, the innermost included."""
    r = len(out_shape)
    keep = [j for j in range(r) if not (out_shape[j].is_static and out_shape[j].value == 1)]
    groups: list[list[int]] = []  # dims of the output (indices into out_shape)
    for j in keep:
        if groups and all(s[groups[-1][-1]] == s[j] * out_shape[j] for s in operand_strides):
            groups[-1].append(j)
        else:
            groups.append([j])
    dims = [prod([out_shape[j] for j in g]) for g in groups]
    dense = dense_strides(tuple(dims))
    kinds, strides = [], []
    for s in operand_strides:
        st = [s[g[-1]] for g in groups]
        if all(a == b for a, b in zip(st, dense)):
            kinds.append("full")
            strides.append([])
        elif all(a == 0 for a in st):
            kinds.append("scalar")
            strides.append([])
        else:
            kinds.append("strided")
            strides.append(st)
    return dims, kinds, strides


def view_strides(view, out_shape) -> list[Dim]:
    """A view's strides over the output's index space (0 where the output broadcasts it)."""
    r = len(out_shape)
    shape = (IntImm(1),) * (r - len(view.shape)) + tuple(view.shape)
    st = (IntImm(0),) * (r - len(view.strides)) + tuple(view.strides)
    return [IntImm(0) if (n == 1 and o != 1) else s for n, o, s in zip(shape, out_shape, st)]
