"""Random graphs for the pass tests (hypothesis).

A graph grows from one or two inputs (float32, float16 or bfloat16; sometimes with a symbolic
batch dim) by a drawn sequence of steps, each aimed at something a pass rewrites: element-wise unary and binary ops with
broadcasting, constant subexpressions, reshapes and permutes (identity ones and pairs that cancel
included), linear/gemm, conv2d + batchnorm, linear + batchnorm, duplicated subexpressions and
duplicated constants, x*1 / x+0 / x-0 / x/1 (and their broadcasting look-alikes that are not
identities), and branches that no output reads. Structure is drawn by hypothesis (so it shrinks);
constant values come from a drawn seed.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.ir import Graph, IntVar, Tensor

_UNARY = ["relu", "tanh", "sigmoid", "neg", "abs", "gelu", "silu"]
_BINARY = ["add", "sub", "mul", "maximum", "minimum"]
_SWAPPABLE = {ops.add, ops.sub, ops.mul, ops.maximum, ops.minimum}  # no div: x / 0 when swapped
STEPS = ["binary", "unary", "binary", "const_div", "identity", "identity", "const_expr", "dup", "dup",
         "twins", "twins", "dup_const", "reshape", "permute", "permute", "linear", "conv_bn", "conv_bn",
         "linear_bn", "cast"]


class _Builder:
    def __init__(self, draw: Callable, rng: np.random.Generator, dtype: str):
        self.draw, self.rng, self.dtype = draw, rng, dtype
        self.pool: list[Tensor] = []
        self.recipes: list[tuple[Callable, tuple, Tensor]] = []  # how each result was built

    def const(self, shape: tuple[int, ...], low: float = -1.0, high: float = 1.0) -> Tensor:
        return self.lit(self.rng.uniform(low, high, size=shape))

    def lit(self, value) -> Tensor:
        """A constant of the graph's dtype."""
        return ag.constant(np.asarray(value, np.float32), dtype=self.dtype)

    def call(self, fn: Callable, *args) -> Tensor:
        out = fn(*args)
        self.recipes.append((fn, args, out))
        self.pool.append(out)
        return out

    def pick(self) -> Tensor:
        # Counted from the end, so draws (and shrinking) favour chaining onto the latest result.
        return self.pool[-1 - self.draw(st.integers(0, len(self.pool) - 1))]

    def bcast_shape(self, t: Tensor) -> tuple[int, ...]:
        """A shape that broadcasts against t without growing it: a suffix, with some dims 1."""
        k = self.draw(st.integers(0, t.ndim))
        dims = t.shape[t.ndim - k:]
        return tuple(d.value if d.is_static and self.draw(st.booleans()) else 1 for d in dims)


def _compatible(a: Tensor, b: Tensor) -> bool:
    try:
        ops.broadcast_shapes(a.shape, b.shape)
        return True
    except Exception:
        return False


def _step(b: _Builder, kind: str) -> None:
    draw = b.draw
    t = b.pick()
    if kind == "unary":
        b.call(getattr(ops, draw(st.sampled_from(_UNARY))), t)
    elif kind == "binary":
        fn = getattr(ops, draw(st.sampled_from(_BINARY)))
        others = [u for u in b.pool if _compatible(t, u)]
        other = draw(st.sampled_from(others)) if others and draw(st.booleans()) else b.const(b.bcast_shape(t))
        b.call(fn, *((t, other) if draw(st.booleans()) else (other, t)))
    elif kind == "const_div":  # denominators away from zero keep every value finite
        sign = np.float32(draw(st.sampled_from([-1.0, 1.0])))
        b.call(ops.div, t, b.lit(sign * b.rng.uniform(0.5, 2.0, size=b.bcast_shape(t))))
    elif kind == "identity":
        op, fill = draw(st.sampled_from([("mul", 1.0), ("add", 0.0), ("sub", 0.0), ("div", 1.0), ("rmul", 1.0),
                                         ("radd", 0.0)]))
        shape = b.bcast_shape(t)
        if draw(st.integers(0, 4)) == 0:  # a look-alike that broadcasts t to a larger shape
            shape = (2,) + tuple(d.value if d.is_static else 1 for d in t.shape)
        c = b.lit(np.full(shape, fill))
        fn = getattr(ops, op.lstrip("r"))
        b.call(fn, *((c, t) if op.startswith("r") else (t, c)))
    elif kind == "const_expr":  # a constant subgraph, sometimes folding to exactly one
        shape = b.bcast_shape(t)
        c1 = b.const(shape)
        if draw(st.booleans()):
            three, two = (b.lit(np.full(shape, v)) for v in (3.0, 2.0))
            ones = ops.sub(three, two)
            b.call(ops.mul, t, ops.tanh(ops.mul(c1, ops.sub(ones, ones))) + ones)
        else:
            b.call(ops.add, t, ops.relu(ops.mul(c1, b.const(shape))))
    elif kind == "dup" and b.recipes:
        fn, args, first = b.recipes[-1 - draw(st.integers(0, len(b.recipes) - 1))]
        if fn in _SWAPPABLE and draw(st.booleans()):
            args = args[::-1]  # b - a next to a - b: only commutative kinds may merge
        again = fn(*args)
        # Read both, or the output might depend on only one of the twins and nothing would merge.
        b.call(draw(st.sampled_from([ops.add, ops.sub, ops.mul])), first, again)
    elif kind == "twins":  # f(t, u) next to f(u, t): only commutative kinds may merge
        fn = draw(st.sampled_from([ops.sub, ops.add, ops.maximum, ops.mul, ops.minimum]))
        others = [u for u in b.pool if u is not t and _compatible(t, u)]
        u = draw(st.sampled_from(others)) if others and draw(st.booleans()) else b.const(b.bcast_shape(t))
        b.call(draw(st.sampled_from([ops.add, ops.sub, ops.mul])), fn(t, u), fn(u, t))
    elif kind == "dup_const":
        c = b.const(b.bcast_shape(t))
        b.call(ops.add, ops.mul(t, c), ag.constant(c.value.copy(), dtype=b.dtype))
    elif kind == "reshape" and all(d.is_static for d in t.shape):
        dims = [d.value for d in t.shape]
        choice = draw(st.sampled_from(["reverse", "flat", "same", "roundtrip"]))
        if choice == "reverse":
            b.call(ops.reshape, t, dims[::-1])
        elif choice == "flat":
            b.call(ops.reshape, t, [int(np.prod(dims))])
        elif choice == "same":
            b.call(ops.reshape, t, dims)
        else:
            b.call(ops.reshape, ops.reshape(t, [int(np.prod(dims))]), dims)
    elif kind == "permute" and t.ndim >= 2:
        perm = draw(st.permutations(range(t.ndim)))
        p = b.call(ops.permute, t, list(perm))
        if draw(st.booleans()):  # undo it: permute by the inverse
            b.call(ops.permute, p, [int(i) for i in np.argsort(perm)])
    elif kind == "linear" and t.ndim >= 2 and t.shape[-1].is_static:
        k, n = t.shape[-1].value, draw(st.integers(1, 4))
        if draw(st.booleans()):
            bias = b.const((n,)) if draw(st.booleans()) else None
            b.call(ops.linear, t, b.const((n, k)), bias)
        else:
            b.call(lambda x, w: ops.gemm(x, w, layout="rrr"), t, b.const((k, n)))
    elif kind == "linear_bn" and t.ndim >= 2 and t.shape[-1].is_static:
        k, n = t.shape[-1].value, draw(st.integers(1, 4))
        trans = draw(st.booleans())
        w = b.const((n, k) if trans else (k, n))
        bias = b.const((n,)) if draw(st.booleans()) else None
        y = ops.gemm(t, w, bias, layout="rcr" if trans else "rrr")
        b.call(_bn, y, *_bn_params(b, n))
        if draw(st.integers(0, 3)) == 0:
            b.pool.append(ops.relu(y))  # a second reader of the gemm blocks the fold
    elif kind == "conv_bn":
        _conv_bn(b, t)
    elif kind == "cast":
        b.call(lambda x: ops.cast(x, x.dtype), t)


def _bn(y: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    return ops.batchnorm(y, scale, bias, mean, var, eps=1e-5)


def _bn_params(b: _Builder, n: int) -> tuple[Tensor, ...]:
    return (b.const((n,), 0.5, 1.5), b.const((n,)), b.const((n,)), b.const((n,), 0.5, 2.0))


def _conv_bn(b: _Builder, t: Tensor) -> None:
    draw = b.draw
    if t.ndim == 3 and all(d.is_static for d in t.shape):
        t = ops.reshape(t, [1] + [d.value for d in t.shape])
    if t.ndim != 4 or not t.shape[-1].is_static:
        return
    c = t.shape[-1].value
    o = draw(st.integers(1, 4))
    k = draw(st.sampled_from([1, 3]))
    groups = c if draw(st.booleans()) and c > 1 else 1
    if groups > 1:
        o = c  # depthwise
    w = b.const((o, k, k, c // groups))
    bias = b.const((o,)) if draw(st.booleans()) else None
    y = ops.conv2d(t, w, bias, stride=draw(st.sampled_from([1, 2])), padding=k // 2, groups=groups)
    b.call(_bn, y, *_bn_params(b, o))
    if draw(st.integers(0, 3)) == 0:
        b.pool.append(ops.relu(y))


@st.composite
def random_graphs(draw: Callable, max_steps: int = 12) -> Graph:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Mostly float32; 16-bit floats exercise the oracle's per-op rounding and ml_dtypes arrays.
    dtype = draw(st.sampled_from(["float32", "float32", "float16", "bfloat16"]))
    b = _Builder(draw, rng, dtype)
    batch: Optional[IntVar] = IntVar("batch", 1, 4) if draw(st.integers(0, 3)) == 0 else None
    rank = draw(st.integers(2, 4))
    dims = [draw(st.integers(1, 4)) for _ in range(rank)]
    shape = [batch if batch is not None else dims[0]] + dims[1:]
    inputs = [Tensor(shape, dtype, name="x")]
    if draw(st.booleans()):  # a second input that broadcasts against the first
        inputs.append(Tensor(dims[draw(st.integers(1, rank - 1)):], dtype, name="layer.0.y"))
    b.pool.extend(inputs)
    for _ in range(draw(st.integers(3, max_steps))):
        try:
            _step(b, draw(st.sampled_from(STEPS)))
        except NotImplementedError:
            pass  # an op family that has not landed yet: that step is skipped, the graph goes on
    results = [t for t in b.pool if t.producer is not None] or [ops.relu(inputs[0])]
    picked = {id(results[-1]): results[-1]}
    for _ in range(draw(st.integers(0, 2))):
        t = draw(st.sampled_from(results[::-1]))  # reversed: shrinking favours recent, larger results
        picked.setdefault(id(t), t)
    outputs = {f"out{i}": t for i, t in enumerate(picked.values())}
    # Dead code inside the Graph, not just in the user's DAG (which from_outputs never copies):
    # results built as outputs, then dropped from the outputs without re-sorting, the way a
    # rewrite leaves them. The graph still verifies; only remove_unused-like cleaning removes them.
    dead = [draw(st.sampled_from(results)) for _ in range(draw(st.integers(0, 2)))]
    dead = [t for t in dict.fromkeys(dead) if id(t) not in picked]
    graph = Graph.from_outputs({**outputs, **{f"dead{i}": t for i, t in enumerate(dead)}}, inputs=inputs)
    for i in range(len(dead)):
        graph.outputs.pop(f"dead{i}").is_output = False
    return graph
