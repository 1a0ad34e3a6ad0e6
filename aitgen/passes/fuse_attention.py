"""fuse_attention: softmax(Q·Kᵀ·scale + mask)·V written out op by op becomes one ATTENTION op.

Imported and hand-written models spell attention as matmuls, a scale, a mask and a softmax; the
fused kernel (blocked over keys, online softmax) never materialises the [Sq, Sk] scores. Matched,
anchored on a softmax over the last axis whose result only feeds the second product:

    scores = q @ kᵀ      bmm(q, k, trans_b) | bmm(q, kt) | gemm(q, k, rcr) | gemm(q, kt, rrr),
                         where q (or k) may itself be a multiply by a scalar constant
    scores = scores * c  | scores / c             (c a constant whose elements are all equal)
    scores = scores + m  | m + scores             (additive mask, broadcast to the scores)
    scores = where(keep, scores, -inf)            (bool mask; a finite fill <= -1e30 only for
                                                   the causal pattern with no additive mask)
    out    = softmax(scores, -1) @ v              bmm | gemm (v transposed by trans_b is fine)

A constant mask that is exactly the top-left causal pattern (0 / -inf added, or True kept, on and
below the diagonal) becomes causal=True instead of an operand. Every intermediate must have no
other reader and not be a graph output. k = ktᵀ is taken from a permute that makes kt when there
is one (a new permute otherwise), which fuse_memory_ops later folds into the kernel's reads.

The only difference from the op-by-op graph: a query row whose every key is masked out (all
-inf) gives NaN there and zeros here. Scores are computed in float32 without per-op rounding.

Guards that zero such rows are taken in with the rest, since the fused op already gives zeros
there (see _row_guard): torch's decomposition of F.scaled_dot_product_attention and
nn.MultiheadAttention writes `where(~any(s != -inf, -1, keepdim), 0, softmax(s))`, and torch's
ONNX export of a bool-masked SDPA writes `where(isnan(softmax(s)), 0, softmax(s))`. With the
first the fused op is exactly the guarded graph (zeros on the same rows, the same softmax
elsewhere). With the second too for every input that is not itself NaN or infinite: softmax
gives NaN on a row only when the row is all -inf or holds a NaN or +inf score.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..errors import AitgenError
from ..ir.dims import IntVar
from ..ir.dtype import DType
from ..ir.opdef import Category
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from .. import ops
from ..ops import attention as attention_ops
from ..ops import view as view_ops
from ..ops.registry import get_opdef, make_op1
from ..reference import eval_op
from ..options import CompileOptions
from ._util import constant_source, new_constant, output_ids, same_type
from .convert_precision import precision_policy

MAX_EVALUATED_MASK = 1 << 26  # elements: a computed mask is evaluated at build time up to this size
FINITE_FILL_MAX = -1e30  # a where-fill at or below this masks a key as surely as -inf (exp underflows)


def _scalar(t: Tensor) -> Optional[float]:
    """The value of a constant (or a broadcast constant) whose elements are all equal, else None."""
    t = constant_source(t)
    if t is None or t.value.size == 0:
        return None
    v = np.asarray(t.value, np.float64).reshape(-1)
    return float(v[0]) if np.all(v == v[0]) and np.isfinite(v[0]) else None


def _only_reader(t: Tensor, op: Op, outs: set[int], also: tuple[Op, ...] = ()) -> bool:
    """op is t's only reader (besides the ops in `also`) and t is no graph output."""
    readers = [u for u in t.users if all(u is not a for a in also)]
    return len(readers) == 1 and readers[0] is op and id(t) not in outs


def _other(op: Op, t: Tensor) -> Tensor:
    return op.inputs[1] if op.inputs[0] is t else op.inputs[0]


def _causal_pattern(value: np.ndarray, keep_value, drop_value) -> bool:
    """Whether a constant is exactly the top-left causal pattern over its last two dims."""
    if value.ndim < 2 or any(n != 1 for n in value.shape[:-2]):
        return False
    sq, sk = value.shape[-2:]
    tril = np.arange(sk)[None, :] <= np.arange(sq)[:, None]
    v = value.reshape(sq, sk)
    return bool(np.all(v[tril] == keep_value) and np.all(v[~tril] == drop_value))


def _plain_product(op: Op) -> bool:
    """A bmm, or a gemm without bias, with A read as stored and no fused epilogue."""
    if op.kind not in (OpKind.BMM, OpKind.GEMM) or getattr(op.attrs, "epilogue", None) is not None:
        return False
    return not op.attrs.trans_a and len(op.inputs) == 2


def _transposed(t: Tensor, outs: set[int]) -> Tensor:
    """tᵀ over the last two dims, reusing the permute that produced t when it has no other reader."""
    p = t.producer
    if p is not None and p.kind is OpKind.PERMUTE and len(t.users) == 1 and id(t) not in outs:
        perm = list(p.attrs.perm)
        perm[-1], perm[-2] = perm[-2], perm[-1]
        if perm == list(range(len(perm))):
            return p.inputs[0]
        return view_ops.permute(p.inputs[0], perm, name=(p.name or "k") + "_t")
    return view_ops.transpose(t, -1, -2, name=(t.name or "k") + "_t")


def _prescale(t: Tensor, consumer: Op, outs: set[int]) -> tuple[Tensor, float]:
    """(views(x), c) when t = views(x * c) for a scalar constant c, where views is a chain of
    permutes and reshapes (torch's MHA scales q and k before splitting the heads; a scalar
    commutes with both) and each step is read only on the way to `consumer`; else (t, 1)."""
    chain: list[Op] = []
    cur, reader = t, consumer
    while (cur.producer is not None and cur.producer.kind in (OpKind.PERMUTE, OpKind.RESHAPE)
           and _only_reader(cur, reader, outs)):
        reader = cur.producer
        chain.append(reader)
        cur = reader.inputs[0]
    p = cur.producer
    if p is not None and p.kind is OpKind.MUL and _only_reader(cur, reader, outs):
        for x, c in ((p.inputs[0], p.inputs[1]), (p.inputs[1], p.inputs[0])):
            s = _scalar(c)
            if s is not None and same_type(x, cur):
                for view in reversed(chain):
                    x = make_op1(view.kind, [x], view.attrs, view.name)
                return x, s
    return t, 1.0


def _match(sm: Op, outs: set[int]) -> Optional[tuple[Op, dict]]:
    probs = sm.outputs[0]
    if sm.attrs.axis != probs.ndim - 1 or id(probs) in outs:
        return None
    guard = _row_guard(probs, sm.inputs[0], outs)
    p, readers = guard if guard is not None else (probs, ())
    if len(p.users) != 1 or id(p) in outs:
        return None
    pv = p.users[0]
    if not _plain_product(pv) or pv.inputs[0] is not p or pv.inputs[1] is p:
        return None
    found = _walk(sm.inputs[0], sm, outs, {"scale": None, "add": None, "keep": None, "fill": None}, readers)
    return None if found is None else (pv, found)


def _walk(x: Tensor, consumer: Op, outs: set[int], found: dict, also: tuple[Op, ...] = ()) -> Optional[dict]:
    """Walk from the softmax's operand back to the first product; `found` collects the mask and
    the scale. At an add either operand may be the scores (the mask may be computed too).
    `also`: a row guard's ops that may read the softmax's operand besides the softmax."""
    if not _only_reader(x, consumer, outs, also) or x.producer is None:
        return None
    p = x.producer
    if _plain_product(p):
        return {**found, "qk": p}
    if p.kind is OpKind.ADD and found["add"] is None and found["scale"] is None:
        # the scale must sit inside the mask: (s * c) + m, never (s + m) * c
        for s, m in ((p.inputs[0], p.inputs[1]), (p.inputs[1], p.inputs[0])):
            if same_type(s, x) and m.dtype == x.dtype and s is not m:
                r = _walk(s, p, outs, {**found, "add": m})
                if r is not None:
                    return r
        return None
    if p.kind is OpKind.WHERE and found["keep"] is None and found["scale"] is None:
        cond, a, b = p.inputs
        for s, fill, keep in ((a, b, cond), (b, a, None)):  # where(keep, s, -inf) | where(drop, -inf, s)
            f = -math.inf if _is_neg_inf(fill) else _scalar(fill)
            if cond.dtype != DType.bool or f is None or not same_type(s, x) or s is fill:
                continue
            r = _walk(s, p, outs, {**found, "keep": keep, "drop": cond if keep is None else None, "fill": f})
            if r is not None:
                return r
        return None
    if p.kind in (OpKind.MUL, OpKind.DIV) and found["scale"] is None:
        pairs = [(p.inputs[0], p.inputs[1])]
        if p.kind is OpKind.MUL:
            pairs.append((p.inputs[1], p.inputs[0]))
        for s, c in pairs:
            v = _scalar(c)
            if v is not None and v != 0 and same_type(s, x):
                return _walk(s, p, outs, {**found, "scale": v if p.kind is OpKind.MUL else 1.0 / v})
    return None


def _is_neg_inf(t: Tensor) -> bool:
    t = constant_source(t)
    if t is None or t.value.size == 0:
        return False
    v = np.asarray(t.value, np.float64)
    return bool(np.all(np.isneginf(v)))


def _is_zero(t: Tensor) -> bool:
    t = constant_source(t)
    return t is not None and t.dtype.is_float and t.value.size > 0 and not np.any(np.asarray(t.value))


# -- guards that zero fully masked rows ---------------------------------------------------------
# A guard condition is read as a predicate over the softmax operand s:
#   ("elem", n)       element-wise: isneginf(s) xor n       (a bool, or 0/1 after a cast)
#   ("row", q, n)     q in {"any", "all"} over s's last axis of isneginf(s) xor n
# logical_not and `== 0` negate it (for rows by De Morgan: not any(x) = all(not x)); a cast of a
# bool to a number and `!= 0` keep it; reduce_max / reduce_min over the last axis (keepdims) of 0/1
# numbers are any / all. Nothing else is recognised, so the match cannot mistake another guard.

def _negate(pred: tuple) -> tuple:
    if pred[0] == "elem":
        return ("elem", not pred[1])
    return ("row", "all" if pred[1] == "any" else "any", not pred[2])


def _reads(op: Op, t: Tensor) -> bool:
    return any(i is t for i in op.inputs)


def _predicate(t: Tensor, s: Tensor, consumer: Op, outs: set[int], seen: list[Op]) -> Optional[tuple[tuple, bool]]:
    """(predicate, is_bool) of the guard tensor t, read only by `consumer`; walked ops go to seen."""
    if not _only_reader(t, consumer, outs) or t.producer is None:
        return None
    p = t.producer
    seen.append(p)
    if p.kind is OpKind.EQUAL and _reads(p, s):  # s == -inf, element-wise
        other = _other(p, s)
        ok = other is not s and _is_neg_inf(other) and tuple(t.shape) == tuple(s.shape)
        return (("elem", False), True) if ok else None
    if p.kind is OpKind.LOGICAL_NOT:
        r = _predicate(p.inputs[0], s, p, outs, seen)
        return (_negate(r[0]), True) if r is not None and r[1] else None
    if p.kind is OpKind.CAST:  # bool -> 0/1 number
        r = _predicate(p.inputs[0], s, p, outs, seen)
        return (r[0], False) if r is not None and r[1] and p.attrs.dtype != DType.bool else None
    if p.kind in (OpKind.EQUAL, OpKind.NOT_EQUAL):  # x != 0 is x as a bool; x == 0 its negation
        for x, c in ((p.inputs[0], p.inputs[1]), (p.inputs[1], p.inputs[0])):
            if c.is_constant and _scalar(c) == 0 and x is not c:
                r = _predicate(x, s, p, outs, seen)
                if r is None:
                    return None
                return (r[0] if p.kind is OpKind.NOT_EQUAL else _negate(r[0])), True
        return None
    if p.kind in (OpKind.REDUCE_MAX, OpKind.REDUCE_MIN):
        x = p.inputs[0]
        if tuple(p.attrs.axes) != (s.ndim - 1,) or not p.attrs.keepdims or x.ndim != s.ndim:
            return None
        r = _predicate(x, s, p, outs, seen)
        if r is None or r[1] or r[0][0] != "elem":
            return None
        return ("row", "any" if p.kind is OpKind.REDUCE_MAX else "all", r[0][1]), False
    return None


def _row_guard(probs: Tensor, s: Tensor, outs: set[int]) -> Optional[tuple[Tensor, tuple[Op, ...]]]:
    """When softmax(s) = probs feeds only a guard that zeroes the rows the mask empties:
    (the guarded probabilities, the guard's ops that read s), else None. Recognised:
        where(all(s == -inf, -1, keepdim), 0, probs)    and    where(any(s != -inf, ...), probs, 0)
    in any spelling _predicate reads (torch: where(~any(~(s == -inf)), 0, probs)), and
        where(isnan(probs), 0, probs)                   (torch's ONNX export, bool masks)
    On such rows the attention op gives zeros, and elsewhere the guard passes probs through."""
    if id(probs) in outs:
        return None
    if len(probs.users) == 2:
        nan = next((u for u in probs.users if u.kind is OpKind.ISNAN), None)
        w = next((u for u in probs.users if u.kind is OpKind.WHERE), None)
        if nan is None or w is None or not _only_reader(nan.outputs[0], w, outs):
            return None
        cond, zero, x = w.inputs
        ok = cond is nan.outputs[0] and x is probs and _is_zero(zero) and same_type(w.outputs[0], probs)
        return (w.outputs[0], ()) if ok else None
    if len(probs.users) != 1 or probs.users[0].kind is not OpKind.WHERE:
        return None
    w = probs.users[0]
    cond, a, b = w.inputs
    if b is probs and a is not probs and _is_zero(a):
        want = ("row", "all", False)   # where(row empty, 0, probs)
    elif a is probs and b is not probs and _is_zero(b):
        want = ("row", "any", True)    # where(row has a key, probs, 0)
    else:
        return None
    if not same_type(w.outputs[0], probs):
        return None
    seen: list[Op] = []
    r = _predicate(cond, s, w, outs, seen)
    if r is None or not r[1] or r[0] != want:
        return None
    return w.outputs[0], tuple(op for op in seen if _reads(op, s))


def _causal_mask(mask: Tensor, rows_cols: tuple, keep_value, drop_value) -> bool:
    """Whether a mask is the top-left causal pattern: a constant that is, or (torch.export with a
    dynamic seq, where a static import holds the folded constant) a mask computed from prefixes
    of constants, arange(seq)[None, :] <= arange(seq)[:, None] and the like.

    A computed mask qualifies when it is built from constants only by element-wise ops, prefix
    slices (starts 0, step 1), reshapes that only add or drop unit dims and expands of one-element
    tensors, with every dim static or one IntVar, and covers the scores' [Sq, Sk] itself (not a
    row broadcast over queries). Each of its tensors at a size n is then the top-left corner of
    the one at the IntVars' upper bounds, so the pattern there holds at every size."""
    if tuple(mask.shape[-2:]) != rows_cols:
        return False
    if mask.is_constant:
        return _causal_pattern(mask.value, keep_value, drop_value)
    if math.prod(d.upper for d in mask.shape) > MAX_EVALUATED_MASK:
        return False
    env: dict = {}
    value = _at_upper_bounds(mask, env, {})
    return value is not None and _causal_pattern(value, keep_value, drop_value)


def _at_upper_bounds(t: Tensor, env: dict, memo: dict) -> Optional[np.ndarray]:
    """t's value with every IntVar at its upper bound, when t is a prefix-built mask; else None."""
    if id(t) in memo:
        return memo[id(t)]
    if t.is_constant:
        return np.asarray(t.value)
    p = t.producer
    if p is None or any(not (d.is_static or isinstance(d, IntVar)) for d in t.shape):
        return None
    for d in t.shape:
        if isinstance(d, IntVar):
            env[d] = d.upper
    category = get_opdef(p.kind).category
    if p.kind is OpKind.SLICE:
        ok = all(s == 0 for s in p.attrs.starts) and all(st == 1 for st in p.attrs.steps)
    elif p.kind is OpKind.RESHAPE:
        ok = [d for d in t.shape if not d == 1] == [d for d in p.inputs[0].shape if not d == 1]
    elif p.kind is OpKind.EXPAND:
        ok = all(d == 1 for d in p.inputs[0].shape)
    else:
        ok = category is Category.ELEMENTWISE and len(p.outputs) == 1
    args = [_at_upper_bounds(x, env, memo) for x in p.inputs] if ok else [None]
    if any(a is None for a in args):
        memo[id(t)] = None
        return None
    for x in p.inputs:
        for d in x.shape:
            if isinstance(d, IntVar):
                env[d] = d.upper
    memo[id(t)] = eval_op(p, args, env)[0]
    return memo[id(t)]


def _float32_source(m: Tensor, narrow: DType) -> Tensor:
    """Under the mixed precision policy, an additive mask that is a cast of a float32 tensor to the
    scores' narrow type (convert_precision's cast of a float32 mask meeting bf16 scores): its float32
    source, which the ATTENTION op takes beside narrow q/k/v and adds in float32, as autocast does."""
    p = m.producer
    if (narrow in (DType.float16, DType.bfloat16) and p is not None and p.kind is OpKind.CAST
            and m.dtype is narrow and p.inputs[0].dtype is DType.float32):
        return p.inputs[0]
    return m


def _build(pv: Op, f: dict, outs: set[int], mixed: bool = False) -> Optional[Tensor]:
    qk: Op = f["qk"]
    q, qs = _prescale(qk.inputs[0], qk, outs)
    kk, ks = _prescale(qk.inputs[1], qk, outs)
    trans_b = qk.attrs.trans_b
    scale = (1.0 if f["scale"] is None else f["scale"]) * qs * ks
    add, keep, fill = f["add"], f["keep"], f["fill"]
    if f.get("drop") is not None:  # where(drop, -inf, s): the keys kept are the others
        drop = f["drop"]
        keep = new_constant(~drop.value, DType.bool) if drop.is_constant else ops.logical_not(drop)
    causal = False
    rows_cols = tuple(qk.outputs[0].shape[-2:])
    if keep is not None:
        if fill != -math.inf and fill > FINITE_FILL_MAX:
            return None
        if fill != -math.inf and add is not None:
            return None  # rows the additive mask empties would average over the causal fill
        if _causal_mask(keep, rows_cols, True, False):
            causal, keep = True, None
        elif fill != -math.inf or add is not None:
            return None  # one mask operand only; a finite fill is exact only for the causal pattern
    if add is not None and not causal and _causal_mask(add, rows_cols, 0.0, -np.inf):
        causal, add = True, None
    if add is not None and mixed:
        add = _float32_source(add, q.dtype)
    mask = keep if keep is not None else add
    k = kk if trans_b else _transposed(kk, outs)
    vv = pv.inputs[1]
    v = _transposed(vv, outs) if pv.attrs.trans_b else vv
    try:
        out = attention_ops.scaled_dot_product_attention(q, k, v, mask, causal=causal, scale=scale,
                                                         name=pv.name)
    except (AitgenError, ValueError):
        return None
    old = pv.outputs[0]
    if not same_type(out, old):
        return None  # batch dims that broadcast differently: leave the graph alone
    return out


def fuse_attention(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    outs = output_ids(graph)
    mixed = precision_policy(opts) == "mixed"
    for op in list(graph.ops):
        if op.kind is not OpKind.SOFTMAX:
            continue
        m = _match(op, outs)
        if m is None:
            continue
        pv, found = m
        out = _build(pv, found, outs, mixed)
        if out is None:
            continue
        old = pv.outputs[0]
        out.name = old.name
        graph.replace_all_uses(old, out)
        outs = output_ids(graph)
    # Always: a match given up half-way may have left a new transpose among some tensor's users.
    graph.sort()
    return graph
