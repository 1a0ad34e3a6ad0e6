"""ONNX Einsum; a letter repeated inside one operand takes its diagonal first (static sizes).

Operands are contracted left to right, two at a time, onto the IR's bmm: letters summed in one
operand only are reduced first; then shared letters kept by the result are batch dims, shared
letters dropped are the contraction K, the rest M (first operand) and N (second). Each operand is
permuted to [batch, M letters, K letters] / [batch, K letters, N letters] and reshaped to one M,
K and N dim, so any number of letters per group needs one bmm. An ellipsis stands for the
operand's unnamed leading dims, right-aligned across operands (numpy broadcasting).
"""
from __future__ import annotations

import string

import numpy as np

from ... import ops
from ...ir.dims import prod
from ...ir.tensor import Tensor
from .registry import NodeContext, onnx_op

_FREE = [c for c in string.ascii_uppercase + string.ascii_lowercase]


def parse(ctx: NodeContext, eq: str, ranks: list[int]) -> tuple[list[str], str]:
    """Per-operand letter strings and the output's, with any ellipsis spelled out in letters."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.malformed(f"equation '{eq}' has {len(terms)} operands, the node {len(ranks)}")
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in _FREE if c not in used]
    n_ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(spare[:n_ell])
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - len(t.replace("...", ""))
            if k < 0:
                raise ctx.malformed(f"term '{t}' has more letters than its operand's rank {r}")
            t = t.replace("...", ell[n_ell - k:])
        if len(t) != r or (t and not t.isalpha()):  # '' is a scalar's term
            raise ctx.malformed(f"term '{t}' does not match an operand of rank {r}")
        out_terms.append(t)  # a repeated letter is a diagonal: _diagonal takes it before contracting
    if arrow:
        out = rhs.replace("...", ell)
        if not out.isalpha() and out != "":
            raise ctx.malformed(f"output term '{rhs}' is not letters")
    else:  # implicit output: the ellipsis dims, then letters seen once, sorted
        counts = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    for c in out:
        if not any(c in t for t in out_terms):
            raise ctx.malformed(f"output letter '{c}' appears in no operand")
    return out_terms, out


def _diagonal(ctx: NodeContext, x: Tensor, term: str) -> tuple[Tensor, str]:
    """x's diagonal over each letter repeated in `term` ('ii' -> 'i'): the two axes moved last,
    merged (n * n) and gathered at the constant indices i * (n + 1). Sizes must be static."""
    from ...ir.tensor import constant
    while len(set(term)) != len(term):
        c = next(ch for ch in term if term.count(ch) > 1)
        p = term.index(c)
        q = term.index(c, p + 1)
        rest = [i for i in range(len(term)) if i not in (p, q)]
        n, n2 = x.shape[p], x.shape[q]
        if not (n.is_static and n2.is_static) or n.value != n2.value:
            raise ctx.unsupported(f"the diagonal over '{c}' in '{term}' needs two static, equal sizes, got {n}, {n2}")
        x = ops.permute(x, rest + [p, q]) if rest + [p, q] != list(range(len(term))) else x
        x = ops.reshape(x, list(x.shape[:-2]) + [n.value * n.value])
        idx = constant(np.arange(n.value, dtype=np.int64) * (n.value + 1))
        x = ops.gather(x, idx, len(rest))
        term = "".join(term[i] for i in rest) + c
    return x, term


def _sum_out(x: Tensor, term: str, keep: set) -> tuple[Tensor, str]:
    drop = [i for i, c in enumerate(term) if c not in keep]
    if not drop:
        return x, term
    return ops.reduce_sum(x, drop), "".join(c for c in term if c in keep)


def _to(x: Tensor, term: str, order: str) -> Tensor:
    perm = [term.index(c) for c in order]
    return x if perm == list(range(len(perm))) else ops.permute(x, perm)


def _pair(a: Tensor, ta: str, b: Tensor, tb: str, keep: set) -> tuple[Tensor, str]:
    a, ta = _sum_out(a, ta, keep | set(tb))
    b, tb = _sum_out(b, tb, keep | set(ta))
    batch = "".join(c for c in ta if c in tb and c in keep)
    contract = "".join(c for c in ta if c in tb and c not in keep)
    m = "".join(c for c in ta if c not in tb)
    n = "".join(c for c in tb if c not in ta)
    a = _to(a, ta, batch + m + contract)
    b = _to(b, tb, batch + contract + n)
    nb = len(batch)
    a_sz, b_sz = list(a.shape), list(b.shape)
    for c, da, db in zip(contract, a_sz[nb + len(m):], b_sz[nb:nb + len(contract)]):
        if da != db:
            raise ValueError(f"letter '{c}' has size {da} in one operand and {db} in the other")
    mm, kk, nn = prod(a_sz[nb:nb + len(m)]), prod(a_sz[nb + len(m):]), prod(b_sz[nb + len(contract):])
    a3 = ops.reshape(a, a_sz[:nb] + [mm, kk])
    b3 = ops.reshape(b, b_sz[:nb] + [kk, nn])
    y = ops.bmm(a3, b3)
    y = ops.reshape(y, list(y.shape[:nb]) + a_sz[nb:nb + len(m)] + b_sz[nb + len(contract):])
    return y, batch + m + n


@onnx_op("Einsum", min_opset=12)
def _einsum(ctx: NodeContext):
    xs = [ctx.input(i, f"Inputs[{i}]") for i in range(ctx.num_inputs)]
    if not xs:
        raise ctx.malformed("Einsum needs at least one input")
    for x in xs:
        if not x.dtype.is_float or x.dtype != xs[0].dtype:
            raise ctx.unsupported(f"Einsum over {[str(t.dtype) for t in xs]}: aitgen contracts float "
                                  "operands of one dtype")
    terms, out = parse(ctx, ctx.attr("equation"), [x.ndim for x in xs])
    for i, (x, t) in enumerate(zip(xs, terms)):
        xs[i], terms[i] = _diagonal(ctx, x, t)
    y, ty = xs[0], terms[0]
    for i in range(1, len(xs)):
        later = set(out).union(*[set(t) for t in terms[i + 1:]])
        try:
            y, ty = _pair(y, ty, xs[i], terms[i], later)
        except ValueError as e:
            raise ctx.malformed(str(e)) from None
    y, ty = _sum_out(y, ty, set(out))
    return _to(y, ty, out)
