"""torch's symbolic sizes (sympy expressions over s0, s1, ...) as aitgen Dims.

Each free symbol of the user inputs' shapes becomes one IntVar. Its name is the torch.export.Dim's
name when the exported program still knows it, else `<input>_<axis>` of the first input that has it.
Its bounds are, in order: `dim_bounds[name]`, torch's range when that range has an upper bound,
else (torch's lower bound, `default_dim_bound`). A lower bound of 0 is raised to 1: memory is
planned for the upper bound, and no kernel is asked to handle an empty batch.

Expressions (2*s0, s0 - 1, s0*s1, (s0 - 1)//2 + 1) become Dim polynomials and floor divisions.
Where an IR op computes a size in another form than torch does (a conv's output height), the
importer records torch's expression -> the IR's Dim once both are known to agree, so a later
`view(x, [s0, (s1 - 1)//2 + 1, ...])` speaks in the same Dims as the tensor it reshapes.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from ...errors import ShapeError, UnsupportedOpError
from ...ir.dims import Dim, IntImm, IntVar, as_dim

# torch's "no upper bound" is int_oo (older versions: a very large int).
_UNBOUNDED = 1 << 62


def _range(vr) -> tuple[int, Optional[int]]:
    lo = int(vr.lower) if _finite(vr.lower) else 0
    hi = int(vr.upper) if _finite(vr.upper) else None
    return lo, (hi if hi is not None and hi < _UNBOUNDED else None)


def _finite(v) -> bool:
    if getattr(v, "is_finite", True) is False:  # torch's int_oo (int() of it fails inside sympy)
        return False
    try:
        int(v)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return False
    return True


def _ident(s: str) -> str:
    s = re.sub(r"\W", "_", s)
    return s if s and not s[0].isdigit() else f"d_{s}"


class SymbolTable:
    """sympy symbol -> IntVar, and torch size expression -> Dim."""

    def __init__(self, range_constraints: Mapping[Any, Any], dim_bounds: Optional[Mapping[str, tuple[int, int]]],
                 default_dim_bound: int):
        self.ranges = {str(k): _range(v) for k, v in range_constraints.items()}
        self.dim_bounds = dict(dim_bounds or {})
        self.default_dim_bound = int(default_dim_bound)
        self.vars: dict[str, IntVar] = {}   # symbol name -> IntVar
        self.known: dict[str, Dim] = {}     # str(expr) -> Dim agreed with the IR
        self._used_names: set[str] = set()
        self._bound_keys_used: set[str] = set()

    # -- creating IntVars --------------------------------------------------------------------
    def declare(self, sym, preferred: str) -> IntVar:
        """The IntVar of symbol `sym` (created on first sight, named `preferred` if free)."""
        key = str(sym)
        if key in self.vars:
            return self.vars[key]
        name = _ident(preferred)
        base, k = name, 1
        while name in self._used_names:
            k += 1
            name = f"{base}_{k}"
        lo, hi = self.ranges.get(key, (0, None))
        if name in self.dim_bounds or key in self.dim_bounds:
            bkey = name if name in self.dim_bounds else key
            self._bound_keys_used.add(bkey)
            try:
                lo, hi = (int(b) for b in self.dim_bounds[bkey])
            except (TypeError, ValueError):
                raise ShapeError(f"dim_bounds['{bkey}'] must be a pair of ints (lb, ub), "
                                 f"got {self.dim_bounds[bkey]!r}") from None
        elif hi is None:
            hi = max(self.default_dim_bound, lo, 1)
        lo = max(lo, 1)
        if hi < lo:
            raise ShapeError(f"dimension '{name}' (torch symbol {key}): upper bound {hi} is below "
                             f"the lower bound {lo}")
        v = IntVar(name, lo, hi)
        self.vars[key] = v
        self._used_names.add(name)
        return v

    def unused_bounds(self) -> list[str]:
        return sorted(set(self.dim_bounds) - self._bound_keys_used)

    # -- expressions ---------------------------------------------------------------------------
    def dim(self, x) -> Dim:
        """An int, a torch.SymInt or a sympy expression as a Dim."""
        if isinstance(x, Dim):
            return x
        if isinstance(x, bool):
            raise ShapeError(f"a size cannot be a bool ({x!r})")
        if isinstance(x, int):
            return IntImm(x)
        node = getattr(x, "node", None)  # torch.SymInt
        if node is not None:
            expr = getattr(node, "expr", None)
            if expr is None:
                return as_dim(int(x))
            return self.expr(expr)
        return self.expr(x)

    def expr(self, e) -> Dim:
        known = self.known.get(str(e))
        if known is not None:
            return known
        if getattr(e, "is_Integer", False):
            return IntImm(int(e))
        if getattr(e, "is_Symbol", False):
            v = self.vars.get(str(e))
            if v is None:
                if str(e).startswith("u"):
                    raise UnsupportedOpError(f"size {e} depends on tensor data (an unbacked symbol), "
                                             "which a static plan cannot express")
                raise ShapeError(f"symbolic size {e} does not come from any input's shape")
            return v
        if getattr(e, "is_Add", False):
            out: Dim = IntImm(0)
            for a in e.args:
                out = out + self.expr(a)
            return out
        if getattr(e, "is_Mul", False):
            out = IntImm(1)
            for a in e.args:
                out = out * self.expr(a)
            return out
        if getattr(e, "is_Pow", False) and getattr(e.args[1], "is_Integer", False) and int(e.args[1]) >= 0:
            out, base = IntImm(1), self.expr(e.args[0])
            for _ in range(int(e.args[1])):
                out = out * base
            return out
        fname = type(e).__name__
        if fname in ("FloorDiv", "CleanDiv") and len(e.args) == 2:
            den = self.expr(e.args[1])
            if den.is_static and den.value > 0:
                return self.expr(e.args[0]) // den.value
        if fname in ("Mod", "PythonMod") and len(e.args) == 2:
            den = self.expr(e.args[1])
            if den.is_static and den.value > 0:
                num = self.expr(e.args[0])
                return num - (num // den.value) * den.value
        raise UnsupportedOpError(f"symbolic size {e} ({fname}) has no aitgen dimension form")

    def record(self, e, d: Dim) -> None:
        """Remember that torch's expression `e` is the IR's `d` (checked equal by the caller)."""
        if not getattr(e, "is_Integer", False) and not getattr(e, "is_Symbol", False):
            self.known.setdefault(str(e), d)

    # -- checking ------------------------------------------------------------------------------
    def sample_envs(self) -> list[tuple[dict, dict]]:
        """(sympy substitutions, IntVar env) pairs at the low, middle and high end of every range."""
        out = []
        for pick in (lambda lo, hi: lo, lambda lo, hi: (lo + hi) // 2, lambda lo, hi: hi):
            subs, env = {}, {}
            for key, v in self.vars.items():
                tlo, thi = self.ranges.get(key, (0, None))
                lo, hi = max(v.lb, tlo), min(v.ub, thi if thi is not None else v.ub)
                val = pick(lo, hi) if lo <= hi else v.lb
                subs[key], env[v] = val, val
            out.append((subs, env))
        return out
