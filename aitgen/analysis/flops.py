"""The multiply-add work of a model graph: what a roofline divides a latency by.

`count_flops(outputs_or_graph)` walks the ops once and counts, per op kind and in total:

- float multiply-accumulates (MACs) of GEMM (every layout, leading dims folded into M, the A
  operand read through a view or not), BMM (broadcast batch dims), CONV2D (groups, strides,
  dilation, padding: one MAC per output element per tap per input channel of its group, padded
  taps included, as torch.utils.flop_counter and fvcore count) and CONV_TRANSPOSE2D (one MAC per
  input element per tap per output channel of its group, cropped outputs included), and
  ATTENTION: Q K^T and P V, B*H*Sq*Sk*(D + Dv) MACs, i.e. 4*B*H*Sq*Sk*D FLOPs when Dv = D. A
  causal attention is counted in full: the kernels compute (or at least read) the masked half,
  and counting it keeps the figure comparable with torch's and ONNX Runtime's counters.
- int8 MACs of QGEMM / QCONV2D apart: they run on other units at other rates than float FMAs.
- "other": every remaining op (element-wise, norms, softmax, pooling, memory movement), counted as
  the number of elements it writes. That is a measure of memory traffic (bytes divided by the
  element size), not of FLOPs: a layer norm's few operations per element are not counted.
  Reshape (a view: it moves nothing) is left out.

FLOPs are 2 per MAC. Members of a GROUPED op count as the ops they are (a grouped GEMM's members
under "gemm"); fusion epilogues are element-wise work on the result and add no MACs, so a GEMM
with a fused bias + GELU counts exactly as the bare GEMM. A LOOP's body is not counted (its trip
count is a run-time value); the result's notes say when one was skipped.

Dynamic dims: every IntVar takes the value given in `dims` (by name) or else its upper bound, so a
model built with seq=IntVar("seq", 1, 512) is counted at 512 unless dims={"seq": 128}.

`count_flops_after_passes` runs the compile pipeline first (no build), to count the graph the
kernels are generated from: the MAC totals are the same as before the passes (batch norms fold into
the conv's bias, QKV projections merge into one GEMM, matmul + softmax + matmul becomes one
attention op), while the "other" elements drop where fusion removed intermediates.
"""
from __future__ import annotations

from typing import Mapping, Optional, Union

from ..errors import GraphError, ShapeError, UnknownDimError, op_label
from ..ir.dims import Dim, IntVar
from ..ir.graph import Graph, Outputs, normalize_outputs, topo_order
from ..ir.op import Op, OpKind
from ..ops.elementwise import broadcast_shapes
from ..ops.fused import split_operands
from ..ops.grouped import member_ops
from ..ops.registry import Category, get_opdef

__all__ = ["count_flops", "count_flops_after_passes", "MAC_KINDS", "INT8_KINDS"]

MAC_KINDS = (OpKind.GEMM, OpKind.BMM, OpKind.CONV2D, OpKind.CONV_TRANSPOSE2D, OpKind.ATTENTION)
INT8_KINDS = (OpKind.QGEMM, OpKind.QCONV2D)


class _Values(dict):
    """IntVar -> the size it is counted at: the given value, else (on first use) its upper bound."""

    def __missing__(self, var: IntVar) -> int:
        return var.upper


def _graph_ops(outputs_or_graph: Union[Graph, Outputs]) -> list[Op]:
    if isinstance(outputs_or_graph, Graph):
        return list(outputs_or_graph.ops)
    # The user's own DAG, walked in place: counting reads shapes and attrs only, so no copy.
    ops, _ = topo_order(normalize_outputs(outputs_or_graph).values())
    return ops


def _int_vars(ops: list[Op]) -> dict[str, IntVar]:
    found: dict[str, IntVar] = {}
    for op in ops:
        for t in list(op.inputs) + list(op.outputs):
            for d in t.shape:
                for v in d.vars():
                    found.setdefault(v.name, v)
    return found


def _values(ops: list[Op], dims: Optional[Mapping[str, int]]) -> _Values:
    known = _int_vars(ops)
    values = _Values()
    unknown = sorted(set(dims or {}) - set(known))
    if unknown:
        raise UnknownDimError(f"count_flops: dims names {unknown}, which the model does not have; its symbolic "
                              f"dims are {sorted(known) or 'none'}", unknown, sorted(known))
    for name, value in (dims or {}).items():
        var = known[name]
        if isinstance(value, bool) or not isinstance(value, int) or not var.lower <= value <= var.upper:
            raise ShapeError(f"count_flops: dim '{name}' = {value!r} is not an int in its bounds "
                             f"[{var.lower}, {var.upper}]")
        values[var] = value
    return values


def _size(shape, values: _Values) -> int:
    n = 1
    for d in shape:
        n *= d.evaluate(values) if isinstance(d, Dim) else int(d)
    return n


def _logical_shapes(op: Op, own: list) -> list[tuple]:
    """Each own operand's shape as the op reads it: a strided view's shape where it has one."""
    views = getattr(op.attrs, "operand_views", None) or (None,) * len(own)
    return [tuple(t.shape) if v is None else tuple(v.shape) for t, v in zip(own, views)]


def _macs(op: Op, values: _Values) -> int:
    """Multiply-accumulates of one GEMM-like op (a kind in MAC_KINDS or INT8_KINDS)."""
    own, _ = split_operands(op.inputs, op.attrs)
    kind, a = op.kind, op.attrs
    if kind in (OpKind.GEMM, OpKind.QGEMM):
        # The result is [..., M, N] whatever the layout or A's view; K is read off the 2-D B.
        b = own[1].shape
        k = b[1] if getattr(a, "trans_b", False) else b[0]
        return _size(op.outputs[0].shape, values) * _size((k,), values)
    if kind is OpKind.BMM:
        sa = own[0].shape
        k = sa[-2] if a.trans_a else sa[-1]
        return _size(op.outputs[0].shape, values) * _size((k,), values)
    if kind in (OpKind.CONV2D, OpKind.QCONV2D):
        _, kh, kw, cg = own[1].shape  # OHWI, I = input channels per group
        return _size(op.outputs[0].shape, values) * _size((kh, kw, cg), values)
    if kind is OpKind.CONV_TRANSPOSE2D:
        _, kh, kw, cog = own[1].shape  # [C_in, KH, KW, C_out / groups]
        return _size(own[0].shape, values) * _size((kh, kw, cog), values)
    if kind is OpKind.ATTENTION:
        q, k, v = _logical_shapes(op, own)[:3]
        batch = broadcast_shapes(q[:-2], k[:-2], v[:-2])
        return _size(batch, values) * _size((q[-2], k[-2]), values) * _size((q[-1],), values) \
            + _size(batch, values) * _size((q[-2], k[-2]), values) * _size((v[-1],), values)
    raise GraphError(f"count_flops: no MAC formula for op {op_label(op)}")  # unreachable: callers check


def _add(table: dict, kind: str, **counts: int) -> None:
    row = table.setdefault(kind, {"ops": 0, **{k: 0 for k in counts}})
    row["ops"] += 1
    for k, n in counts.items():
        row[k] += n


def count_flops(outputs_or_graph: Union[Graph, Outputs], dims: Optional[Mapping[str, int]] = None) -> dict:
    """Count the multiply-add work of a graph (a Graph, a Tensor, a list or a dict of outputs).

    Returns a dict (JSON-ready):
      macs, flops            float MACs of GEMM/BMM/CONV2D/CONV_TRANSPOSE2D/ATTENTION, and 2x that
      int8_macs, int8_ops    the same for QGEMM/QCONV2D
      other_elements         elements written by every other op (memory traffic, not FLOPs)
      by_kind                kind -> {ops, macs, flops} for the MAC kinds present (int8 ones included)
      other_by_kind          kind -> {ops, elements}
      dims                   IntVar name -> the value it was counted at
      notes                  what the counts leave out or count in a particular way, for this graph
    """
    ops = _graph_ops(outputs_or_graph)
    values = _values(ops, dims)
    by_kind: dict[str, dict] = {}
    other: dict[str, dict] = {}
    macs = int8_macs = elements = 0
    notes: set[str] = set()
    work = list(ops)
    while work:
        op = work.pop(0)
        if op.kind is OpKind.GROUPED:
            work[:0] = member_ops(op)  # each member is the op it was before grouping
            continue
        if op.kind in MAC_KINDS or op.kind in INT8_KINDS:
            try:
                n = _macs(op, values)
            except (ShapeError, IndexError, ValueError) as e:
                raise ShapeError(f"count_flops: cannot read the shapes of op {op_label(op)}: {e}") from None
            _add(by_kind, op.kind.value, macs=n, flops=2 * n)
            if op.kind in INT8_KINDS:
                int8_macs += n
            else:
                macs += n
            if op.kind is OpKind.ATTENTION and op.attrs.causal:
                notes.add("causal attention is counted in full (Sq*Sk), not the unmasked half")
            continue
        if get_opdef(op.kind).category is Category.VIEW:
            continue
        if op.kind is OpKind.LOOP:
            notes.add("a LOOP's body is not counted (its trip count is known at run time only)")
        n = sum(_size(t.shape, values) for t in op.outputs)
        _add(other, op.kind.value, elements=n)
        elements += n
    dims_used = {v.name: values[v] for v in _int_vars(ops).values()}
    if dims_used:
        notes.add("dynamic dims counted at " + ", ".join(
            f"{k}={n} ({'given' if k in (dims or {}) else 'upper bound'})" for k, n in dims_used.items()))
    return {"macs": macs, "flops": 2 * macs, "int8_macs": int8_macs, "int8_ops": 2 * int8_macs,
            "other_elements": elements, "by_kind": dict(sorted(by_kind.items())),
            "other_by_kind": dict(sorted(other.items())), "dims": dims_used, "notes": sorted(notes)}


def count_flops_after_passes(outputs_or_graph: Union[Graph, Outputs], target: str = "cpu", *, fusion: bool = True,
                             dims: Optional[Mapping[str, int]] = None) -> dict:
    """count_flops of the graph compile_model would generate kernels from (the pass pipeline for
    `target`, run on a copy; nothing is built)."""
    from ..compiler import compile_options
    from ..passes import optimize

    return count_flops(optimize(outputs_or_graph, compile_options(target, fusion=fusion)), dims=dims)
