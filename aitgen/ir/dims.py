"""Symbolic dimensions.

A dimension is an integer polynomial over *atoms*. An atom is an `IntVar` (a named, bounded size
given at run time) or a `FloorDiv` of a dimension by a constant (what strided convolutions and
pooling produce from a dynamic size). Sums and products of dimensions stay exact, which is what
reshape, flatten and concat need; the same IntVar object in two places means equal sizes.
`IntImm` is the constant polynomial. Arithmetic always returns the simplest class.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Iterable, Mapping, Union

from ..errors import LimitError, ShapeError
from .names import check_name

DimLike = Union["Dim", int]

# Generated code holds every size, bound and offset in an int64. A static dim or an IntVar bound
# must fit one; anything derived from them (a tensor's bytes, an arena offset, a kernel's size
# argument) is checked against MAX_SIZE at code generation, which leaves a factor of two below
# int64's limit so that the sum of two checked values (offset + size) still cannot wrap.
INT64_MAX = 2**63 - 1
MAX_SIZE = 2**62 - 1


def as_int(v: Any, what: str) -> int:
    """v as a Python int: ints and numpy integers (anything with __index__), never a bool or a float."""
    if isinstance(v, bool) or getattr(getattr(v, "dtype", None), "kind", None) == "b":
        raise ShapeError(f"{what} is a bool ({v!r}), not an integer")
    try:
        return operator.index(v)
    except TypeError:
        raise ShapeError(f"{what} must be an integer, got {type(v).__name__} {v!r}") from None

# A polynomial: {monomial: coefficient}, monomial = sorted tuple of atoms (repeats for powers).
_Poly = dict


class Dim:
    """Base of IntImm, IntVar, FloorDiv and DimExpr."""

    # -- polynomial view -------------------------------------------------------------------
    def _poly(self) -> _Poly:
        raise NotImplementedError

    def evaluate(self, env: Mapping["IntVar", int]) -> int:
        """The concrete size, given values for the IntVars."""
        total = 0
        for mono, c in self._poly().items():
            v = c
            for a in mono:
                v *= a._eval_atom(env)
            total += v
        return total

    @property
    def lower(self) -> int:
        return self._bound(low=True)

    @property
    def upper(self) -> int:
        return self._bound(low=False)

    def _bound(self, low: bool) -> int:
        # Atoms are non-negative, so each monomial spans [c*lows, c*highs]; a negative coefficient
        # (rare: H - k) swaps which end gives the bound.
        total = 0
        for mono, c in self._poly().items():
            lo = hi = c
            for a in mono:
                lo, hi = lo * a.lower, hi * a.upper
            if c < 0:
                lo, hi = hi, lo
            total += lo if low else hi
        return total

    @property
    def is_static(self) -> bool:
        return all(len(m) == 0 for m in self._poly())

    @property
    def value(self) -> int:
        """The size of a static dimension; ShapeError for a symbolic one."""
        if not self.is_static:
            raise ShapeError(f"dimension {self} is symbolic, not a constant")
        return self._poly().get((), 0)

    def vars(self) -> list["IntVar"]:
        """The IntVars this dimension depends on, in first-seen order."""
        out: list[IntVar] = []
        for mono in self._poly():
            for a in mono:
                for v in a._vars():
                    if v not in out:
                        out.append(v)
        return out

    # -- arithmetic ------------------------------------------------------------------------
    def __add__(self, o: DimLike) -> "Dim":
        p = dict(self._poly())
        for m, c in as_dim(o)._poly().items():
            p[m] = p.get(m, 0) + c
        return _from_poly(p)

    __radd__ = __add__

    def __neg__(self) -> "Dim":
        return _from_poly({m: -c for m, c in self._poly().items()})

    def __sub__(self, o: DimLike) -> "Dim":
        return self + (-as_dim(o))

    def __rsub__(self, o: DimLike) -> "Dim":
        return as_dim(o) - self

    def __mul__(self, o: DimLike) -> "Dim":
        p: _Poly = {}
        for m1, c1 in self._poly().items():
            for m2, c2 in as_dim(o)._poly().items():
                m = tuple(sorted(m1 + m2, key=_atom_key))
                p[m] = p.get(m, 0) + c1 * c2
        return _from_poly(p)

    __rmul__ = __mul__

    def __floordiv__(self, o: DimLike) -> "Dim":
        """Exact division where the divisor divides every term; otherwise a FloorDiv atom."""
        q = self.exact_div(o)
        if q is not None:
            return q
        od = as_dim(o)
        if od.is_static and od.value > 0:
            if self.is_static:
                return IntImm(self.value // od.value)
            return FloorDiv(self, od.value)
        raise ShapeError(f"cannot divide dimension {self} by {od}")

    def exact_div(self, o: DimLike) -> "Dim | None":
        """self / o when o is a monomial that divides every term exactly, else None."""
        op = as_dim(o)._poly()
        if len(op) != 1:  # a polynomial divisor divides only itself exactly
            return IntImm(1) if _poly_eq(op, self._poly()) else None
        (dm, dc), = op.items()
        if dc == 0:
            return None
        out: _Poly = {}
        for m, c in self._poly().items():
            rest = list(m)
            for a in dm:
                if a in rest:
                    rest.remove(a)
                else:
                    return None
            if c % dc:
                return None
            out[tuple(rest)] = out.get(tuple(rest), 0) + c // dc
        return _from_poly(out)

    # -- comparison ------------------------------------------------------------------------
    def __eq__(self, o) -> bool:
        if isinstance(o, (int,)) and not isinstance(o, bool):
            o = IntImm(o)
        if not isinstance(o, Dim):
            return NotImplemented
        return _poly_eq(self._poly(), o._poly())

    def __hash__(self) -> int:
        return hash(frozenset((tuple(id(a) if isinstance(a, IntVar) else hash(a) for a in m), c)
                              for m, c in self._poly().items()))

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        terms = []
        for m, c in sorted(self._poly().items(), key=lambda mc: (-len(mc[0]), [_atom_key(a) for a in mc[0]])):
            if not m:
                terms.append(str(c))
                continue
            # A floor division inside a product gets its own parentheses: 2*((h - 1)//2).
            wrap = len(m) > 1 or c != 1
            body = "*".join(f"({a})" if wrap and isinstance(a, FloorDiv) else str(a) for a in m)
            terms.append(body if c == 1 else f"-{body}" if c == -1 else f"{c}*{body}")
        s = " + ".join(terms) if terms else "0"
        return s.replace("+ -", "- ")



def _atom_key(a) -> tuple:
    return (0, a.name, a.lower, a.upper) if isinstance(a, IntVar) else (1, str(a))


def _poly_eq(p: _Poly, q: _Poly) -> bool:
    p = {m: c for m, c in p.items() if c}
    q = {m: c for m, c in q.items() if c}
    return p == q


def _from_poly(p: _Poly) -> Dim:
    p = {m: c for m, c in p.items() if c}
    if not p:
        return IntImm(0)
    if len(p) == 1:
        (m, c), = p.items()
        if not m:
            return IntImm(c)
        if len(m) == 1 and c == 1:
            return m[0]
    return DimExpr(p)


class IntImm(Dim):
    """A static size."""

    def __init__(self, value: int):
        value = as_int(value, "IntImm value")
        # Negative values are legal here (H - k is built from IntImm(-k)); a Tensor refuses a
        # negative static dim. A value past int64 would wrap in generated code.
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise LimitError(f"dimension {value} does not fit an int64")
        self._value = value

    def _poly(self) -> _Poly:
        return {(): self._value} if self._value else {}

    @property
    def value(self) -> int:
        return self._value

    def __int__(self) -> int:
        return self._value

    def __index__(self) -> int:
        return self._value

    def __str__(self) -> str:
        return str(self._value)


class _Atom(Dim):
    def _poly(self) -> _Poly:
        return {(self,): 1}


class IntVar(_Atom):
    """A dynamic size with bounds [lb, ub], bound from the inputs at run time. Equal by identity.

    `produced=True`: no input's shape gives it; the kernel of the op that creates it (a
    data-dependent size: NonZero's count, a Reshape whose shape is a run-time tensor) binds it
    during the run, and buffers are planned at ub (aitgen/ops/dynamic.py)."""

    def __init__(self, name: str, lb: int, ub: int, produced: bool = False):
        check_name(name, "IntVar name")
        lb, ub = as_int(lb, f"IntVar '{name}': lower bound"), as_int(ub, f"IntVar '{name}': upper bound")
        if lb < 0 or ub < lb:
            raise ShapeError(f"IntVar '{name}': bounds must satisfy 0 <= lb <= ub, got [{lb}, {ub}]")
        if ub > INT64_MAX:
            raise LimitError(f"IntVar '{name}': upper bound {ub} does not fit an int64 (at most {INT64_MAX})")
        self.name, self.lb, self.ub = name, lb, ub
        self.produced = bool(produced)

    lower = property(lambda self: self.lb)
    upper = property(lambda self: self.ub)

    def _eval_atom(self, env: Mapping["IntVar", int]) -> int:
        try:
            return int(env[self])
        except KeyError:
            raise ShapeError(f"no value bound for dimension '{self.name}'") from None

    def _vars(self):
        return [self]

    def __eq__(self, o) -> bool:
        if isinstance(o, IntVar):
            return self is o
        return Dim.__eq__(self, o)

    def __hash__(self) -> int:
        return id(self)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"IntVar({self.name!r}, {self.lb}, {self.ub})"


class FloorDiv(_Atom):
    """floor(num / den) for a symbolic numerator and a positive constant denominator."""

    def __init__(self, num: Dim, den: int):
        self.num, self.den = num, int(den)

    lower = property(lambda self: self.num.lower // self.den)
    upper = property(lambda self: self.num.upper // self.den)

    def _eval_atom(self, env) -> int:
        return self.num.evaluate(env) // self.den

    def _vars(self):
        return self.num.vars()

    def __eq__(self, o) -> bool:
        if isinstance(o, FloorDiv):
            return self.den == o.den and self.num == o.num
        return Dim.__eq__(self, o)

    def __hash__(self) -> int:
        return hash(("floordiv", hash(self.num), self.den))

    def __str__(self) -> str:
        return f"({self.num})//{self.den}"


class DimExpr(Dim):
    """Any other polynomial (batch*seq, 2*n + 1, ...)."""

    def __init__(self, poly: _Poly):
        self._p = dict(poly)

    def _poly(self) -> _Poly:
        return self._p


def as_dim(d: DimLike) -> Dim:
    if isinstance(d, Dim):
        return d
    if isinstance(d, bool):
        raise ShapeError(f"a dimension cannot be a bool ({d!r})")
    try:
        v = operator.index(d)
    except TypeError:
        raise ShapeError(f"not a dimension: {d!r}") from None
    return IntImm(v)


def as_shape(shape: Iterable[DimLike]) -> tuple[Dim, ...]:
    return tuple(as_dim(d) for d in shape)


def prod(dims: Iterable[DimLike]) -> Dim:
    out: Dim = IntImm(1)
    for d in dims:
        out = out * as_dim(d)
    return out


def shape_str(shape: Iterable[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def evaluate_shape(shape: Iterable[Dim], env: Mapping[IntVar, int]) -> tuple[int, ...]:
    return tuple(d.evaluate(env) for d in shape)


def max_shape(shape: Iterable[Dim]) -> tuple[int, ...]:
    return tuple(d.upper for d in shape)


def ceil_div(a: DimLike, b: int) -> Dim:
    return (as_dim(a) + (b - 1)) // b


def gcd_static(d: Dim) -> int:
    """Largest constant that divides every coefficient (used to check exact reshapes)."""
    g = 0
    for c in d._poly().values():
        g = math.gcd(g, c)
    return g
