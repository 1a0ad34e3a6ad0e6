"""What a torch tensor is while importing: an IR tensor plus the order its axes are stored in.

torch is NCHW and the IR's convolutions are NHWC. Rather than wrapping every conv in
NCHW -> NHWC -> NCHW permutes and hoping a pass cancels pairs with a ReLU or a residual add
between them, the importer tracks the layout: a Value holds `t`, an IR tensor whose axis i is torch
axis `perm[i]`. A conv's output is kept NHWC (perm (0, 2, 3, 1)); element-wise ops, batchnorm,
pooling, softmax, concat and reductions work in whatever layout their operand has; only an op
that needs torch's order (a view, a matmul) gets a permute, once per Value. torch's own
permute/transpose are layouts too, so `addmm(b, x, w.t())` reads `w` as it is (a gemm 'rcr').
A ResNet then has one permute at the input and none inside.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import Dim, IntImm
from ...ir.tensor import Tensor, constant

Perm = Optional[tuple[int, ...]]  # None: the IR tensor is in torch's axis order

NHWC = (0, 2, 3, 1)


def norm_perm(p) -> Perm:
    if p is None:
        return None
    p = tuple(int(i) for i in p)
    return None if p == tuple(range(len(p))) else p


def compose(outer: Perm, inner: Perm, ndim: int) -> Perm:
    """The layout of permute(value, outer) when value has layout inner (ir axis j = torch axis inner[j]).

    torch's y = x.permute(outer) has y axis i = x axis outer[i]. The stored tensor keeps its order,
    so stored axis j, which is x axis inner[j], is y axis outer.index(inner[j])."""
    inner = tuple(range(ndim)) if inner is None else inner
    outer = tuple(range(ndim)) if outer is None else outer
    return norm_perm(tuple(outer.index(a) for a in inner))


@dataclasses.dataclass(eq=False)
class Value:
    t: Tensor
    perm: Perm = None
    # Views of t in other layouts made so far (a permute op or a transposed constant), by layout.
    views: dict = dataclasses.field(default_factory=dict)

    @property
    def ndim(self) -> int:
        return self.t.ndim

    @property
    def shape(self) -> tuple[Dim, ...]:
        """torch's shape (the logical one)."""
        if self.perm is None:
            return self.t.shape
        out: list = [None] * self.ndim
        for i, a in enumerate(self.perm):
            out[a] = self.t.shape[i]
        return tuple(out)

    @property
    def dtype(self):
        return self.t.dtype


class Layouts:
    """Moves Values between layouts; remembers which constant derives from which parameter."""

    def __init__(self):
        # id(derived constant) -> (parameter name, layout tag), for naming at the end
        self.derived: dict[int, tuple[str, str]] = {}
        self.param_of: dict[int, str] = {}  # id(original constant) -> parameter name

    def get(self, v: Value, perm: Perm) -> Tensor:
        """v's data as an IR tensor whose axis i is torch axis perm[i] (None: torch's order)."""
        perm = norm_perm(perm)
        if v.perm == perm:
            return v.t
        key = perm if perm is not None else ()
        if key in v.views:
            return v.views[key]
        cur = v.perm if v.perm is not None else tuple(range(v.ndim))
        want = perm if perm is not None else tuple(range(v.ndim))
        q = tuple(cur.index(a) for a in want)  # stored axis feeding each wanted axis
        if v.t.is_constant:
            out = constant(np.ascontiguousarray(np.transpose(v.t.value, q)), dtype=v.t.dtype)
            self.derive(v.t, out, "".join(map(str, q)))
        elif _moves_only_unit_dims(v.t.shape, q):
            out = ops.reshape(v.t, [v.t.shape[i] for i in q])
        else:
            out = ops.permute(v.t, q)
        v.views[key] = out
        return out

    def derive(self, src: Tensor, out: Tensor, tag: str) -> Tensor:
        """Record that constant `out` is parameter-derived `src` transformed (`tag` names how)."""
        if id(src) in self.param_of:
            self.derived[id(out)] = (self.param_of[id(src)], tag)
        elif id(src) in self.derived:
            name, old = self.derived[id(src)]
            self.derived[id(out)] = (name, f"{old}_{tag}")
        return out

    def torch_order(self, v: Value) -> Tensor:
        return self.get(v, None)


def _moves_only_unit_dims(shape, q) -> bool:
    """A permute that keeps every non-1 dim in its order is a reshape (no data moves)."""
    big = [i for i in q if not (shape[i].is_static and shape[i] == IntImm(1))]
    return big == sorted(big)
