"""match_gelu: GELU written out op by op (erf or tanh form) becomes one GELU op.

ONNX has Gelu only from opset 20, so exported BERT/ViT (erf) and GPT-2 (tanh) MLPs arrive as
five to nine element-wise ops. Fused into the GEMM's epilogue they cost no extra kernel, but the
GEMM then runs them as a generic expression loop after the product, where a GELU epilogue is one
oneDNN post-op (eltwise_gelu_erf / _tanh) applied while the tile is in cache. Matched, with the
products and the sums in any order and grouping:

    0.5 * x * (1 + erf(x * c))            c = 1/sqrt(2) (or x / sqrt(2))
    0.5 * x * (1 + tanh(a * (x + b * x^3)))   a = sqrt(2/pi), b = 0.044715; x^3 = x*x*x | pow(x, 3)

Each constant must equal its exact value to float32 precision (relative 1e-6). Every intermediate
must be read only by the next op of the pattern and not be a graph output; x may be read anywhere.

Not bit-identical: the GELU op computes erf(x / sqrt(2)) where the graph may compute
erf(x * 0.70710677), and orders the products its own way; the difference is a few float32 ulps
(tested at rtol 1e-5).

Runs after constant_folding (sqrt(2) imported as Sqrt(2.0) is a constant then) and before the
epilogue and element-wise fusions, which would take the pieces into their expressions.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops import elementwise as ew
from ..options import CompileOptions
from ._util import output_ids

_ERF_C = 1.0 / math.sqrt(2.0)
_TANH_A = math.sqrt(2.0 / math.pi)
_TANH_B = 0.044715


def match_gelu(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fusion:
        return graph
    outs = output_ids(graph)
    changed = False
    for op in list(graph.ops):
        if op.kind is not OpKind.MUL or not op.outputs[0].dtype.is_float:
            continue
        y = op.outputs[0]
        m = _match(y, outs)
        if m is None:
            continue
        x, approximate = m
        new = ew.gelu(x, approximate=approximate, name=op.name)
        new.name = y.name
        graph.replace_all_uses(y, new)
        changed = True
    if changed:
        graph.sort()
    return graph


def _close(v: float, want: float) -> bool:
    return abs(v - want) <= 1e-6 * abs(want)


def _scalar(t: Tensor) -> Optional[float]:
    if not t.is_constant or t.value.size == 0 or t.ndim > 0 and any(d.value != 1 for d in t.shape):
        return None  # (a constant of shape [1, .., 1] is a scalar; a larger one could grow x)
    return float(np.asarray(t.value, np.float64).reshape(-1)[0])


def _inner(t: Tensor, outs: set[int]) -> bool:
    """t feeds one op only (possibly as both operands) and is not a graph output."""
    return len({id(u) for u in t.users}) == 1 and id(t) not in outs


def _factors(t: Tensor, outs: set[int], top: bool = True) -> tuple[float, list[Tensor]]:
    """t as coefficient * product of tensors, through multiplies, divisions by scalar constants
    and pow(_, 2 | 3) whose results are read only inside the product."""
    c = _scalar(t)
    if c is not None:
        return c, []
    p = t.producer
    if p is None or (not top and not _inner(t, outs)):
        return 1.0, [t]
    if p.kind is OpKind.MUL:
        ca, fa = _factors(p.inputs[0], outs, False)
        cb, fb = _factors(p.inputs[1], outs, False)
        return ca * cb, fa + fb
    if p.kind is OpKind.DIV:
        d = _scalar(p.inputs[1])
        if d is not None and d != 0:
            ca, fa = _factors(p.inputs[0], outs, False)
            return ca / d, fa
    if p.kind is OpKind.POW:
        e = _scalar(p.inputs[1])
        if e in (2.0, 3.0):
            ca, fa = _factors(p.inputs[0], outs, False)
            return ca ** int(e), fa * int(e)
    return 1.0, [t]


def _one_plus(t: Tensor, kind: OpKind, outs: set[int]) -> Optional[Tensor]:
    """u when t = 1 + f(u) (either order) for the unary op `kind`, each step read only here."""
    p = t.producer
    if p is None or p.kind is not OpKind.ADD or not _inner(t, outs):
        return None
    for one, f in ((p.inputs[0], p.inputs[1]), (p.inputs[1], p.inputs[0])):
        c = _scalar(one)
        fp = f.producer
        if c == 1.0 and fp is not None and fp.kind is kind and _inner(f, outs):
            return fp.inputs[0]
    return None


def _match(y: Tensor, outs: set[int]) -> Optional[tuple[Tensor, str]]:
    coef, fs = _factors(y, outs)
    if len(fs) != 2 or not _close(coef, 0.5):
        return None
    for x, t in ((fs[0], fs[1]), (fs[1], fs[0])):
        if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
            continue
        u = _one_plus(t, OpKind.ERF, outs)
        if u is not None and _inner(u, outs):
            cu, fu = _factors(u, outs)
            if len(fu) == 1 and fu[0] is x and _close(cu, _ERF_C):
                return x, "none"
        w = _one_plus(t, OpKind.TANH, outs)
        if w is not None and _inner(w, outs) and _tanh_arg(w, x, outs):
            return x, "tanh"
    return None


def _tanh_arg(w: Tensor, x: Tensor, outs: set[int]) -> bool:
    """w = a * (x + b * x^3)."""
    ca, fa = _factors(w, outs)
    if len(fa) != 1 or not _close(ca, _TANH_A):
        return False
    s = fa[0]
    p = s.producer
    if p is None or p.kind is not OpKind.ADD or not _inner(s, outs):
        return False
    for lin, cube in ((p.inputs[0], p.inputs[1]), (p.inputs[1], p.inputs[0])):
        if lin is not x:
            continue
        cb, fb = _factors(cube, outs, top=False) if _inner(cube, outs) else (1.0, [cube])
        if len(fb) == 3 and all(f is x for f in fb) and _close(cb, _TANH_B):
            return True
    return False
