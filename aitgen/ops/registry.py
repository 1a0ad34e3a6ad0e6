"""The op catalogue: for each OpKind, its attribute type, shape/dtype inference and numpy reference.

Builders (`aitgen.ops.relu`, ...) call `make_op`; the oracle, the verifier and the passes look an
op up here, so every op family needs only its own file.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..errors import AitgenError, DTypeError, ShapeError
from ..ir.dims import Dim, IntVar
from ..ir.dtype import DType
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor


class Category(enum.Enum):
    ELEMENTWISE = "elementwise"
    GEMM = "gemm"
    CONV = "conv"
    POOL = "pool"
    NORM = "norm"
    SOFTMAX = "softmax"
    REDUCE = "reduce"
    VIEW = "view"        # no data movement: reshape (a different shape over the same bytes)
    MEMORY = "memory"    # data movement: permute, concat, split, slice, pad, expand
    GATHER = "gather"
    ATTENTION = "attention"
    GROUPED = "grouped"  # several independent ops of one kind as one kernel


TensorType = tuple[tuple[Dim, ...], DType]


@dataclasses.dataclass(frozen=True)
class RefContext:
    """What a reference function may need beyond its inputs: concrete output shapes and dim values."""
    out_shapes: tuple[tuple[int, ...], ...]
    env: Mapping[IntVar, int]


InferFn = Callable[[Sequence[Tensor], Any], list[TensorType]]
RefFn = Callable[[list[np.ndarray], Any, RefContext], list[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class OpDef:
    kind: OpKind
    category: Category
    attrs_type: type
    infer: InferFn
    reference: RefFn
    num_inputs: tuple[int, int]  # (min, max) operand count
    float_only: bool = False     # integer operands raise DTypeError


_REGISTRY: dict[OpKind, OpDef] = {}


def register(kind: OpKind, category: Category, attrs_type: type, infer: InferFn, reference: RefFn,
             num_inputs: tuple[int, int] = (1, 1), float_only: bool = False) -> OpDef:
    d = OpDef(kind, category, attrs_type, infer, reference, num_inputs, float_only)
    _REGISTRY[kind] = d
    return d


def get_opdef(kind: OpKind) -> OpDef:
    try:
        return _REGISTRY[kind]
    except KeyError:
        from ..errors import UnsupportedOpError
        raise UnsupportedOpError(f"op kind '{kind.value}' has no definition registered") from None


def registered_kinds() -> list[OpKind]:
    return list(_REGISTRY)


def infer_types(kind: OpKind, inputs: Sequence[Tensor], attrs: Any, name: Optional[str] = None) -> list[TensorType]:
    """Run the kind's inference, with errors prefixed by the op's label and operand shapes."""
    d = get_opdef(kind)
    label = f"{kind.value}" + (f" '{name}'" if name else "")
    lo, hi = d.num_inputs
    if not lo <= len(inputs) <= hi:
        raise ShapeError(f"{label}: takes {lo}..{hi} operands, got {len(inputs)}")
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise DTypeError(f"{label}: operand {i} is a {type(t).__name__}, not a Tensor")
    if d.float_only:
        for t in inputs[:1]:
            if not t.dtype.is_float:
                raise DTypeError(f"{label}: needs a float operand, got {t.dtype} ({_desc(t)})")
    if not isinstance(attrs, d.attrs_type):
        raise TypeError(f"{label}: attrs must be {d.attrs_type.__name__}, got {type(attrs).__name__}")
    try:
        return d.infer(inputs, attrs)
    except AitgenError as e:
        shapes = ", ".join(_desc(t) for t in inputs)
        raise type(e)(f"{label}: {e} (operands: {shapes})") from None


def make_op(kind: OpKind, inputs: Sequence[Tensor], attrs: Any, name: Optional[str] = None) -> list[Tensor]:
    """Create an op and its output tensors, linked into the graph; returns the outputs."""
    types = infer_types(kind, inputs, attrs, name)
    outs = [Tensor(shape, dtype) for shape, dtype in types]
    op = Op(kind, list(inputs), outs, attrs, name=name)
    for o in outs:
        o.producer = op
    for t in op.inputs:
        if not any(u is op for u in t.users):
            t.users.append(op)
    return outs


def make_op1(kind: OpKind, inputs: Sequence[Tensor], attrs: Any, name: Optional[str] = None) -> Tensor:
    (out,) = make_op(kind, inputs, attrs, name)
    return out


def _desc(t: Tensor) -> str:
    nm = f"'{t.name}' " if t.name else ""
    return f"{nm}{t.dtype.short}[{', '.join(str(d) for d in t.shape)}]"


def check(cond: bool, msg: str, err: type = ShapeError) -> None:
    """Raise `err(msg)` unless cond; used by inference functions."""
    if not cond:
        raise err(msg)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {ndim}")
    return axis % ndim if ndim else 0
