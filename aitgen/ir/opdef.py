"""The op catalogue's table: for each OpKind, its attribute type, shape/dtype inference and numpy
reference.

The table belongs to the IR, which reads it (`Op.opdef`, `verify`), and aitgen.ops fills it: each
op family registers its kinds when it is imported. ops builds on ir, so the table cannot live in
ops without ir importing ops back. Op families, passes and the oracle reach it through
aitgen.ops.registry.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..errors import AitgenError, DTypeError, ShapeError, UnsupportedOpError
from .dims import Dim, IntVar
from .dtype import DType
from .tensor import Tensor

if TYPE_CHECKING:  # an Op's kind names its OpDef and Op.opdef reads this table: op.py imports us
    from .op import OpKind


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
    CONTROL = "control"  # runs a subgraph (LOOP): opaque to the fusions


TensorType = tuple[tuple[Dim, ...], DType]


@dataclasses.dataclass(frozen=True)
class RefContext:
    """What a reference function may need beyond its inputs: concrete output shapes and dim values."""
    out_shapes: tuple[tuple[int, ...], ...]
    env: Mapping[IntVar, int]
    # The oracle's evaluation of a subgraph, (graph, feeds by Tensor) -> id(tensor) -> value: what
    # LOOP's reference runs its body with (the oracle passes itself; ops cannot import it back).
    run_graph: Optional[Callable] = None


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
        raise UnsupportedOpError(f"op kind '{kind.value}' has no definition registered "
                                 "(aitgen.ops registers every kind when it is imported)") from None


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
                raise DTypeError(f"{label}: needs a float operand, got {t.dtype} ({describe(t)})")
    if not isinstance(attrs, d.attrs_type):
        raise TypeError(f"{label}: attrs must be {d.attrs_type.__name__}, got {type(attrs).__name__}")
    try:
        return d.infer(inputs, attrs)
    except AitgenError as e:
        shapes = ", ".join(describe(t) for t in inputs)
        raise type(e)(f"{label}: {e} (operands: {shapes})") from None


def describe(t: Tensor) -> str:
    """'name' f32[batch, 768]: a tensor as error messages name it."""
    nm = f"'{t.name}' " if t.name else ""
    return f"{nm}{t.dtype.short}[{', '.join(str(d) for d in t.shape)}]"
