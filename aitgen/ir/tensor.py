"""Tensors: graph inputs, constants (holding numpy values), intermediates and outputs."""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np

from ..errors import DTypeError, LimitError, ShapeError
from .dims import MAX_SIZE, Dim, DimLike, as_shape, shape_str
from .dtype import DType, as_dtype
from .names import check_optional_name

if TYPE_CHECKING:
    from .op import Op


# aitgen.ops, once imported. ops builds on ir, so ir never imports it: ops hands itself over
# (install_operators) and Tensor's operators call through it.
_ops_module = None


def install_operators(ops_module) -> None:
    """Called by aitgen.ops on import: Tensor's operators (+, @, reshape, [...]) build its ops."""
    global _ops_module
    _ops_module = ops_module


class Role(enum.Enum):
    input = "input"
    constant = "constant"
    intermediate = "intermediate"
    output = "output"


class Tensor:
    """A node of the tensor graph. Equal by identity; knows its producer and its users.

    `Tensor(shape, dtype, name=...)` is a graph input; `constant(array)` (or `value=`) a constant;
    ops create intermediates. A Graph marks the ones it returns as outputs.
    """

    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, shape: Iterable[DimLike], dtype="float32", name: Optional[str] = None,
                 value: Optional[np.ndarray] = None, producer: "Optional[Op]" = None):
        self.name = name
        self.shape: tuple[Dim, ...] = _checked_shape(shape, name)
        self.dtype: DType = as_dtype(dtype)
        self.producer = producer
        self.users: list[Op] = []
        self.is_output = False  # set by Graph for the tensors it returns
        self._value: Optional[np.ndarray] = None
        if value is not None:
            self.value = value

    @property
    def name(self) -> Optional[str]:
        return self._name

    @name.setter
    def name(self, name: Optional[str]) -> None:
        # Checked on every assignment, not only in __init__: passes and importers rename tensors.
        self._name = check_optional_name(name, "tensor name")

    # -- constants ---------------------------------------------------------------------------
    @property
    def value(self) -> Optional[np.ndarray]:
        return self._value

    @value.setter
    def value(self, v: np.ndarray) -> None:
        v = np.asarray(v)
        want = tuple(d.value if d.is_static else None for d in self.shape)
        if None in want:
            raise ShapeError(f"constant '{self.name}' must have a static shape, got {shape_str(self.shape)}")
        if tuple(v.shape) != want:
            raise ShapeError(f"constant '{self.name}': value has shape {list(v.shape)}, "
                             f"tensor has {list(want)}")
        if v.dtype != self.dtype.np:
            if self.dtype.is_float and v.dtype.kind == "f" or self.dtype.is_int and v.dtype.kind in "iu" \
                    or self.dtype == DType.bool and v.dtype.kind == "b":
                v = v.astype(self.dtype.np)
            else:
                raise DTypeError(f"constant '{self.name}': value of dtype {v.dtype} for a {self.dtype} tensor")
        self._value = v

    @property
    def role(self) -> Role:
        if self.is_output:
            return Role.output
        if self.producer is not None:
            return Role.intermediate
        return Role.constant if self._value is not None else Role.input

    @property
    def is_constant(self) -> bool:
        return self.producer is None and self._value is not None

    @property
    def is_input(self) -> bool:
        return self.producer is None and self._value is None

    # -- shape helpers -------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        raise TypeError("len() of a Tensor is ambiguous; use t.shape[0]")

    def nbytes_upper(self) -> int:
        """Bytes at the upper bound of every dynamic dim."""
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d.upper
        return n

    def __repr__(self) -> str:
        nm = f" '{self.name}'" if self.name else ""
        return f"Tensor{nm}({self.dtype.short}{shape_str(self.shape)}, {self.role.value})"

    # -- operators: thin sugar over aitgen.ops ------------------------------------------------
    def _ops(self):
        if _ops_module is None:
            raise TypeError("Tensor operators are aitgen.ops builders: import aitgen.ops (or aitgen) first")
        return _ops_module

    def __add__(self, o): return self._ops().add(self, o)
    def __radd__(self, o): return self._ops().add(o, self)
    def __sub__(self, o): return self._ops().sub(self, o)
    def __rsub__(self, o): return self._ops().sub(o, self)
    def __mul__(self, o): return self._ops().mul(self, o)
    def __rmul__(self, o): return self._ops().mul(o, self)
    def __truediv__(self, o): return self._ops().div(self, o)
    def __rtruediv__(self, o): return self._ops().div(o, self)
    def __pow__(self, o): return self._ops().pow(self, o)
    def __rpow__(self, o): return self._ops().pow(o, self)
    def __neg__(self): return self._ops().neg(self)
    def __matmul__(self, o): return self._ops().matmul(self, o)

    def reshape(self, *shape): return self._ops().reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape)
    def permute(self, *perm): return self._ops().permute(self, perm[0] if len(perm) == 1 and isinstance(perm[0], (list, tuple)) else perm)
    def transpose(self, a: int, b: int): return self._ops().transpose(self, a, b)
    def __getitem__(self, idx): return self._ops().getitem(self, idx)

    # Identity semantics: Tensors are dict keys and set members.
    __hash__ = object.__hash__

    def __eq__(self, other):  # noqa: D105 - comparisons are ops.equal, never ==
        return self is other


def _checked_shape(shape: Iterable[DimLike], name: Optional[str]) -> tuple[Dim, ...]:
    """The shape as Dims; a static dim must be a size (>= 0) that generated code can hold."""
    what = f"tensor '{name}'" if name is not None else "a tensor"
    try:
        dims = as_shape(shape)
    except ShapeError as e:  # LimitError too: say which tensor the dim was for
        raise type(e)(f"{what}: {e}") from None
    except TypeError:
        raise ShapeError(f"{what}: shape must be a sequence of dims, got {shape!r}") from None
    for axis, d in enumerate(dims):
        if not d.is_static:
            continue
        if d.value < 0:
            raise ShapeError(f"{what}: dim {axis} is {d.value}; a size cannot be negative")
        if d.value > MAX_SIZE:
            raise LimitError(f"{what}: dim {axis} is {d.value}, past the largest size aitgen compiles "
                             f"(2**62 - 1)")
    return dims


def constant(value, dtype=None, name: Optional[str] = None) -> Tensor:
    """A constant tensor holding `value` (copied into the requested dtype)."""
    arr = np.asarray(value)
    dt = as_dtype(dtype) if dtype is not None else as_dtype(arr.dtype if arr.dtype != np.float64 else np.float32)
    if arr.dtype == np.float64 and dtype is None:
        arr = arr.astype(np.float32)
    return Tensor(arr.shape, dt, name=name, value=arr.astype(dt.np, copy=False))
