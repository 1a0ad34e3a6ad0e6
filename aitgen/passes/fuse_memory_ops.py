"""fuse_memory_ops: layout changes fold into the strided reads and writes of the kernels around them.

A reshape is already a view (the memory plan gives it its input's bytes; it launches nothing).
Permute, slice, split and expand copy. Where the op consuming the copy can read a strided window
instead, the copy disappears:

- attention operands: a chain of reshape / permute / slice / split part / expand from a dense
  tensor to q, k, v or the mask becomes one StridedView of that tensor (AttentionAttrs
  .operand_views). BERT's three head transposes, and with fuse_parallel_gemms the split of the
  packed QKV GEMM output, become the kernel's batch and row strides.
- attention result: a chain of reshapes and permutes after it (the head merge [B, H, S, D] ->
  [B, S, H, D]) becomes AttentionAttrs.out_view, so the kernel writes the merged layout directly.
- GEMM and element-wise reads: the same chains in front of a GEMM's A operand (a row-major window
  of rows: ViT's and BERT's class-token slice before the head, a packed GEMM's split part) or of
  any operand of an element-wise op or fused group (a permute, a slice, a split part, an expand)
  become the op's operand_views (ops/operand_views.py); a lone element-wise op becomes a one-node
  fused group to carry them. Only where the target's lowering reads views (opts.caps.operand_views).
- permute of a permute is one permute; an identity permute is nothing.

Only chains whose intermediates have no other reader fold (the copies then die: a chain that must
stay for another reader would keep its copy and only lengthen the source's lifetime), and only
views the CPU kernel reads with a unit stride along the head dim.

Runs after the vertical fusions (epilogues, element-wise groups, norm prologues): a view is the
last thing an op's operand list gets, so those passes never rebuild an op around one.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..capabilities import Capabilities, caps_of
from ..errors import AitgenError
from ..ir.dims import Dim, IntImm, as_dim, prod
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.attention import AttentionAttrs, StridedView
from ..ops.fused import FusedElementwiseAttrs, single_op_expr
from ..ops.operand_views import matrix_view
from ..ops.registry import Category, get_opdef, make_op, make_op1
from ..ops.operand_views import is_constant_prefix
from ..options import CompileOptions
from ._util import output_ids

READ_CHAIN = (OpKind.RESHAPE, OpKind.PERMUTE, OpKind.SLICE, OpKind.SPLIT, OpKind.EXPAND)


@dataclasses.dataclass(frozen=True)
class View:
    """Logical tensor of `shape` at element offset + sum(i * strides) of a dense root buffer."""
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim

    def __post_init__(self):  # ints are welcome (tests, static shapes); Dims are what is kept
        object.__setattr__(self, "shape", tuple(as_dim(d) for d in self.shape))
        object.__setattr__(self, "strides", tuple(as_dim(d) for d in self.strides))
        object.__setattr__(self, "offset", as_dim(self.offset))

    @staticmethod
    def dense(shape) -> "View":
        shape = tuple(as_dim(d) for d in shape)
        strides, acc = [], IntImm(1)
        for d in reversed(shape):
            strides.append(acc)
            acc = acc * d
        return View(shape, tuple(strides[::-1]), IntImm(0))

    def as_attr(self) -> StridedView:
        return StridedView(self.shape, self.strides, self.offset)


def reshape_view(v: View, new_shape) -> Optional[View]:
    """The same bytes seen with `new_shape`, or None when the reshape regroups dims that are not
    contiguous with each other (it would need a copy). Groups of dims whose products are equal as
    polynomials map onto each other, so the strides hold for every value of the symbolic dims."""
    new_shape = tuple(as_dim(d) for d in new_shape)
    if any(d.is_static and d.value == 0 for d in tuple(v.shape) + new_shape):
        return None
    old = [(n, s) for n, s in zip(v.shape, v.strides) if n != 1]
    new_idx = [j for j, n in enumerate(new_shape) if n != 1]
    new = [new_shape[j] for j in new_idx]
    out: list[Dim] = [IntImm(0)] * len(new_shape)  # a size-1 dim is only ever read at index 0
    i = j = 0
    while i < len(old) and j < len(new):
        group = None
        for total in range(2, len(old) - i + len(new) - j + 1):  # the smallest matching groups
            for a in range(1, total):
                b = total - a
                if i + a <= len(old) and j + b <= len(new) and \
                        prod(n for n, _ in old[i:i + a]) == prod(new[j:j + b]):
                    group = (a, b)
                    break
            if group:
                break
        if group is None:
            return None
        a, b = group
        dims = old[i:i + a]
        if any(dims[k][1] != dims[k + 1][1] * dims[k + 1][0] for k in range(a - 1)):
            return None
        st = dims[-1][1]
        for jj in reversed(range(j, j + b)):
            out[new_idx[jj]] = st
            st = st * new[jj]
        i, j = i + a, j + b
    if i != len(old) or j != len(new):
        return None
    return View(new_shape, tuple(out), v.offset)


def apply_read(op: Op, out: Tensor, v: View) -> Optional[View]:
    """The view of `out` (an output of the memory op `op`) given the view `v` of op's input."""
    a = op.attrs
    if op.kind is OpKind.RESHAPE:
        return reshape_view(v, out.shape)
    if op.kind is OpKind.PERMUTE:
        return View(tuple(v.shape[p] for p in a.perm), tuple(v.strides[p] for p in a.perm), v.offset)
    if op.kind is OpKind.SPLIT:
        idx = next(i for i, o in enumerate(op.outputs) if o is out)
        start = sum((o.shape[a.axis] for o in op.outputs[:idx]), IntImm(0))
        return View(tuple(out.shape), v.strides, v.offset + start * v.strides[a.axis])
    if op.kind is OpKind.SLICE:
        if any(st < 0 for st in a.steps):
            return None  # negative strides: the kernels index forward only
        off = v.offset
        for n, s, stride in zip(v.shape, a.starts, v.strides):
            off = off + ((n + s) if s < 0 else as_dim(s)) * stride
        return View(tuple(out.shape), tuple(st * s for st, s in zip(a.steps, v.strides)), off)
    if op.kind is OpKind.EXPAND:
        lead = len(out.shape) - len(v.shape)
        strides = [IntImm(0)] * lead + [IntImm(0) if (n == 1 and m != 1) else s
                                        for n, s, m in zip(v.shape, v.strides, out.shape[lead:])]
        return View(tuple(out.shape), tuple(strides), v.offset)
    return None


def trace_read(t: Tensor, outs: set[int]) -> Optional[tuple[Tensor, View]]:
    """(root, view of root that is t) through the longest foldable chain of memory ops behind t;
    None when there is nothing to fold. Each intermediate must be read only by the chain."""
    chain: list[tuple[Op, Tensor]] = []
    cur = t
    while cur.producer is not None and cur.producer.kind in READ_CHAIN:
        if cur is not t and (len(cur.users) != 1 or id(cur) in outs):
            break
        chain.append((cur.producer, cur))
        cur = cur.producer.inputs[0]
    # Compose forward from the root; where a step cannot be a view, start again after it.
    # A chain of reshapes alone is already free: folding it would change nothing but the text.
    root, view, copies = cur, View.dense(cur.shape), False
    for op, out in reversed(chain):
        nv = apply_read(op, out, view)
        if nv is None:
            root, view, copies = out, View.dense(out.shape), False
        else:
            # a constant's prefix is free too (the memory plan makes it a view of the weights)
            view, copies = nv, copies or not (op.kind is OpKind.RESHAPE or is_constant_prefix(op))
    return (root, view) if copies else None


def trace_write(t: Tensor, outs: set[int]) -> Optional[tuple[Tensor, View]]:
    """(final, view of final's dense buffer that t's elements are written at) through the longest
    chain of reshapes and permutes after t that ends in a permute (a trailing reshape is free)."""
    chain: list[Op] = []
    cur = t
    while len(cur.users) == 1 and id(cur) not in outs and cur.users[0].kind in (OpKind.RESHAPE, OpKind.PERMUTE):
        chain.append(cur.users[0])
        cur = cur.users[0].outputs[0]
    while chain and chain[-1].kind is not OpKind.PERMUTE:
        chain.pop()
    while chain:
        final = chain[-1].outputs[0]
        view: Optional[View] = View.dense(final.shape)
        for op in reversed(chain):
            x = op.inputs[0]
            if op.kind is OpKind.PERMUTE:
                strides: list[Dim] = [IntImm(0)] * len(x.shape)
                for i, p in enumerate(op.attrs.perm):
                    strides[p] = view.strides[i]
                view = View(tuple(x.shape), tuple(strides), view.offset)
            else:
                view = reshape_view(view, x.shape)
            if view is None:
                break
        if view is not None:
            return final, view
        chain.pop()  # try the shorter chain
        while chain and chain[-1].kind is not OpKind.PERMUTE:
            chain.pop()
    return None


def _unit_inner(v: View) -> bool:
    return v.shape[-1] == 1 or v.strides[-1] == 1


def _fold_attention(graph: Graph, op: Op, outs: set[int]) -> bool:
    a: AttentionAttrs = op.attrs
    views = list(a.operand_views or (None,) * len(op.inputs))
    inputs = list(op.inputs)
    hit = False
    for i, t in enumerate(op.inputs):
        if views[i] is not None:
            continue  # already a view of its root (a second run of the pass)
        found = trace_read(t, outs)
        # The kernel walks q, k and v rows with a unit stride along the head dim; the mask is
        # read element by element with any strides.
        if found is None or (i < 3 and not _unit_inner(found[1])):
            continue
        inputs[i], views[i] = found[0], found[1].as_attr()
        hit = True
    attrs = dataclasses.replace(a, operand_views=tuple(views) if any(v is not None for v in views) else None)
    old_out = op.outputs[0]
    final = None
    if a.out_view is None:
        w = trace_write(old_out, outs)
        if w is not None and _unit_inner(w[1]):
            final = w[0]
            attrs = dataclasses.replace(attrs, out_view=w[1].as_attr(), out_shape=tuple(final.shape))
    if not hit and final is None:
        return False
    try:
        new_out = make_op1(OpKind.ATTENTION, inputs, attrs, op.name)
    except AitgenError:
        return False  # a view the op rejects (it should not happen): keep the copies
    replaced = final if final is not None else old_out
    new_out.name = old_out.name if final is None else final.name
    graph.replace_all_uses(replaced, new_out)
    return True


def _fold_permutes(graph: Graph, op: Op, outs: set[int]) -> bool:
    """permute(permute(x, p1), p2) = permute(x, p1[p2]); an identity permute is x itself."""
    x = op.inputs[0]
    perm = op.attrs.perm
    src = x.producer
    if src is not None and src.kind is OpKind.PERMUTE and len(x.users) == 1 and id(x) not in outs:
        perm = tuple(src.attrs.perm[p] for p in perm)
        x = src.inputs[0]
    y = op.outputs[0]
    # An output may not alias an input, a constant or another output: an identity permute is then
    # the one copy it needs.
    if perm == tuple(range(len(perm))) and not (id(y) in outs and (x.producer is None or id(x) in outs)):
        graph.replace_all_uses(y, x)
        return True
    if x is op.inputs[0]:
        return False
    new = make_op1(OpKind.PERMUTE, [x], type(op.attrs)(perm), op.name)
    new.name = y.name
    graph.replace_all_uses(y, new)
    return True


def gemm_reads(view: View) -> bool:
    """Whether a GEMM reads `view` as its A operand: leading dims that fold into rows, and a unit
    stride along K or along the rows (oneDNN's fast kernels; any other stride is slow)."""
    m = matrix_view(view.as_attr())
    return m is not None and (m[3] == 1 or m[1] == 1)


def reads_views(op: Op, caps: Capabilities) -> list[int]:
    """The operand slots of `op` that the target's kernel can read through a view."""
    if op.kind is OpKind.GEMM:
        return [0] if not op.attrs.trans_a and OpKind.GEMM in caps.operand_views else []
    try:
        elementwise = get_opdef(op.kind).category is Category.ELEMENTWISE
    except AitgenError:
        return []
    if elementwise and OpKind.FUSED_ELEMENTWISE in caps.operand_views:
        return list(range(len(op.inputs)))
    return []


def _fold_reads(graph: Graph, op: Op, outs: set[int], caps: Capabilities) -> bool:
    slots = reads_views(op, caps)
    if not slots:
        return False
    views = list(getattr(op.attrs, "operand_views", None) or (None,) * len(op.inputs))
    inputs = list(op.inputs)
    hit = False
    for i in slots:
        t = op.inputs[i]
        if views[i] is not None or len(t.users) != 1 or id(t) in outs or op.inputs.count(t) != 1:
            continue  # another reader keeps the copy alive: reading around it would save nothing
        found = trace_read(t, outs)
        if found is None or op.kind is OpKind.GEMM and not gemm_reads(found[1]):
            continue
        inputs[i], views[i] = found[0], found[1].as_attr()
        hit = True
    if not hit:
        return False
    if op.kind is OpKind.GEMM or op.kind is OpKind.FUSED_ELEMENTWISE:
        attrs = dataclasses.replace(op.attrs, operand_views=tuple(views))
        kind = op.kind
    else:  # a lone element-wise op: a one-node group carries the views
        attrs, kind = FusedElementwiseAttrs(single_op_expr(op), tuple(views)), OpKind.FUSED_ELEMENTWISE
    try:
        new = make_op(kind, inputs, attrs, op.name)
    except AitgenError:
        return False  # a view the op rejects (it should not happen): keep the copies
    for old, t in zip(op.outputs, new):
        t.name = old.name
        graph.replace_all_uses(old, t)
    for t in op.inputs:
        t.users = [u for u in t.users if u is not op]
    return True


def fuse_memory_ops(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    caps = caps_of(opts)
    outs = output_ids(graph)
    changed = False
    for op in list(graph.ops):
        if op.kind is OpKind.PERMUTE:
            changed |= _fold_permutes(graph, op, outs)
            outs = output_ids(graph)
    if changed:
        graph.sort()
    for op in list(graph.ops):
        if op.kind is OpKind.ATTENTION:
            changed |= _fold_attention(graph, op, outs)
    if changed:
        graph.sort()
        outs = output_ids(graph)
    folded = False
    for op in list(graph.ops):
        folded |= _fold_reads(graph, op, outs, caps)
    if folded:
        graph.sort()
    return graph
