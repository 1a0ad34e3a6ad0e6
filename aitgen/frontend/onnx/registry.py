"""The ONNX converter registry and the context a converter sees.

A converter is `fn(ctx: NodeContext) -> list[Tensor | None]` (one entry per node output; a single
Tensor is accepted for one-output nodes). It builds IR ops from `ctx.inputs`, reads attributes with
`ctx.attr`, and reads import-time values with `ctx.const` / `ctx.shape_value`. It may return
`ctx.constant_value(array)` or `ctx.shape_result(dims)` for a value known while importing: the
loader keeps those as numpy (or symbolic) values, so Shape -> Gather -> Concat -> Reshape chains
never reach the graph.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from ...errors import ImportError_, UnsupportedOpError
from ...ir.dims import Dim, IntImm
from ...ir.tensor import Tensor

Converter = Callable[["NodeContext"], Any]

# op type -> [(min_opset, fn)], highest min_opset first; CONVERTERS holds the newest for listings.
_VERSIONS: dict[str, list[tuple[int, Converter]]] = {}
CONVERTERS: dict[str, Converter] = {}


def onnx_op(*op_types: str, min_opset: int = 1, domain: str = ""):
    """Register a converter for op types of the default domain, valid from `min_opset` on (of
    `domain`'s opset for another domain: its op types register as "domain.OpType").

    Several registrations of one op type at different min_opsets pick the newest one not above the
    model's opset (Squeeze's axes: an attribute before 13, an input from 13)."""
    def deco(fn: Converter) -> Converter:
        for t in op_types:
            t = f"{domain}.{t}" if domain else t
            vs = [v for v in _VERSIONS.get(t, []) if v[0] != min_opset] + [(min_opset, fn)]
            vs.sort(key=lambda v: -v[0])
            _VERSIONS[t] = vs
            CONVERTERS[t] = vs[0][1]
        return fn
    return deco


def op_key(domain: str, op_type: str) -> str:
    """The registry's name of an op type: bare for the default domain, else "domain.OpType"."""
    return f"{domain}.{op_type}" if domain else op_type


def converter_for(op_type: str, opset: int) -> Optional[Converter]:
    for lo, fn in _VERSIONS.get(op_type, []):
        if opset >= lo:
            return fn
    return None


def min_opset_of(op_type: str) -> Optional[int]:
    vs = _VERSIONS.get(op_type)
    return min(v[0] for v in vs) if vs else None


REQUIRED = object()


@dataclasses.dataclass(frozen=True)
class Folded:
    """An import-time result: a numpy array, or an object array of Dims (a symbolic shape value)."""
    value: np.ndarray


def dims_array(dims: Sequence[Union[Dim, int]]) -> np.ndarray:
    """A 1-D shape value: int64 when every dim is static, else an object array of Dims."""
    ds = [d if isinstance(d, Dim) else IntImm(int(d)) for d in dims]
    if all(d.is_static for d in ds):
        return np.array([d.value for d in ds], dtype=np.int64)
    arr = np.empty(len(ds), dtype=object)
    arr[:] = ds
    return arr


class _Inputs(Sequence):
    """ctx.inputs: materialised on access, so a converter that reads an import-time value through
    ctx.const / ctx.shape_value never turns it into a graph tensor."""

    def __init__(self, ctx: "NodeContext"):
        self._ctx = ctx

    def __len__(self) -> int:
        return len(self._ctx.input_names)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            return None  # an optional input that the node omits at the end
        return self._ctx._tensor(i % len(self))


class NodeContext:
    """What a converter sees of one node. Built by the loader (_loader.py)."""

    def __init__(self, node, index: int, opset: int, input_names: list[str], loader):
        self.node = node
        self.op_type: str = node.op_type
        self.domain: str = "" if node.domain == "ai.onnx" else node.domain
        self.name: str = node.name or f"{node.op_type}_{index}"
        self.opset = opset
        self.input_names = input_names   # "" for an omitted optional input
        self.num_outputs = len(node.output)
        self._loader = loader
        self._attrs = {a.name: a for a in node.attribute}
        self.inputs = _Inputs(self)

    # -- labelling and errors ----------------------------------------------------------------
    @property
    def label(self) -> str:
        if self.domain:  # as the loader names a node of another domain
            return f"node '{self.name}' ({self.domain}.{self.op_type}, {self.domain} opset {self.opset})"
        return f"node '{self.name}' ({self.op_type}, opset {self.opset})"

    def unsupported(self, msg: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.label}: {msg}")

    def malformed(self, msg: str) -> ImportError_:
        return ImportError_(f"{self.label}: {msg}")

    # -- inputs -------------------------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self.input_names)

    def has_input(self, i: int) -> bool:
        return i < len(self.input_names) and self.input_names[i] != ""

    def _tensor(self, i: int) -> Optional[Tensor]:
        if not self.has_input(i):
            return None
        return self._loader.tensor_of(self.input_names[i], self)

    def input(self, i: int, what: str = "") -> Tensor:
        """Input i as a Tensor; ImportError_ if the node omits it."""
        t = self._tensor(i) if i < len(self.input_names) else None
        if t is None:
            raise self.malformed(f"input {i}{' (' + what + ')' if what else ''} is required")
        return t

    def value(self, i: int) -> Any:
        """The raw value of input i: a Tensor, an ndarray (constant), an object ndarray (symbolic)."""
        if not self.has_input(i):
            return None
        return self._loader.value_of(self.input_names[i], self)

    def const(self, i: int) -> Optional[np.ndarray]:
        """Input i's value when known at import time (and free of dynamic dims), else None."""
        v = self.value(i)
        if isinstance(v, np.ndarray) and v.dtype != object:
            return v
        if isinstance(v, Tensor) and v.is_constant:
            return v.value
        return None

    def require_const(self, i: int, what: str) -> np.ndarray:
        v = self.const(i)
        if v is None:
            if not self.has_input(i):
                raise self.malformed(f"input {i} ({what}) is required")
            raise self.unsupported(self.needs_value(i, what))
        return v

    def needs_value(self, i: int, what: str) -> str:
        """Why input i cannot be used: a graph input (freezable) or a run-time computation."""
        v = self.value(i)
        head = f"input {i} ({what}, '{self.input_names[i]}') must be known at import time"
        if isinstance(v, Tensor) and v.is_input:
            return f"{head}; it is a graph input: pass its value with load(..., constant_inputs=...)"
        return f"{head} (a constant or a foldable chain); it is computed at run time"

    def shape_value(self, i: int) -> Optional[list[Dim]]:
        """A 1-D (or 0-D) integer input known at import time, as Dims (symbolic where dynamic)."""
        v = self.value(i)
        if isinstance(v, Tensor) and v.is_constant:
            v = v.value
        if not isinstance(v, np.ndarray) or v.ndim > 1:
            return None
        if v.dtype == object:
            return [d if isinstance(d, Dim) else IntImm(int(d)) for d in v.reshape(-1)]
        if v.dtype.kind not in "iub":
            return None
        return [IntImm(int(x)) for x in v.reshape(-1)]

    def ints(self, i: int, what: str) -> Optional[list[int]]:
        """An optional 1-D integer constant input as Python ints (None when omitted)."""
        if not self.has_input(i):
            return None
        v = self.require_const(i, what)
        if v.dtype.kind not in "iu":
            raise self.malformed(f"input {i} ({what}) must be integer, got {v.dtype}")
        return [int(x) for x in v.reshape(-1)]

    # -- attributes ---------------------------------------------------------------------------
    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        a = self._attrs.get(name)
        if a is None:
            if default is REQUIRED:
                raise self.malformed(f"attribute '{name}' is required")
            return default
        try:
            v = self._loader.attr_value(a)
        except ImportError_ as e:
            raise self.malformed(f"attribute '{name}': {e}") from None
        if default is not REQUIRED and default is not None:
            _check_attr_type(self, name, v, default)
        return v

    def inline(self, graph, inputs: Optional[Sequence[Tensor]] = None) -> list:
        """Convert a subgraph attribute (GraphProto) in this node's scope: its outputs, as converter
        results (Tensors, or import-time values). `inputs` bind the subgraph's formal inputs (a
        FlexAttention modifier's scores); an If branch has none."""
        return self._loader.inline(graph, self, inputs)

    def call(self, graph, bindings: list) -> list:
        """Convert a loop body (GraphProto) with its inputs bound to `bindings`: its outputs, as
        converter results. Each call converts the body afresh (one unrolled iteration)."""
        return self._loader.call(graph, self, bindings)

    def scope_tensors(self) -> list[Tensor]:
        """The Tensors visible by name now (the graph's and enclosing scopes' values): what a loop
        body converted next reads from outside itself."""
        return self._loader.scope_tensors()

    # -- import-time results ------------------------------------------------------------------
    def constant_value(self, arr) -> Folded:
        return Folded(np.asarray(arr))

    def shape_result(self, dims: Sequence[Union[Dim, int]]) -> Folded:
        return Folded(dims_array(dims))


def _check_attr_type(ctx: NodeContext, name: str, v: Any, default: Any) -> None:
    """An attribute whose ONNX type disagrees with the default's kind is a malformed node."""
    if isinstance(default, bool) or isinstance(default, int):
        ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    elif isinstance(default, float):
        ok = isinstance(v, (int, float))
    elif isinstance(default, str):
        ok = isinstance(v, str)
    elif isinstance(default, (list, tuple)):
        ok = isinstance(v, list)
    else:
        ok = True
    if not ok:
        raise ctx.malformed(f"attribute '{name}' has the wrong type ({type(v).__name__}, "
                            f"expected {type(default).__name__})")


MAX_CONSTANT = 1 << 24  # entries of one constant a converter builds at import (64 MiB in float32)


def check_constant_size(ctx: NodeContext, entries: int, what: str) -> None:
    """Refuse a constant that a converter would build from a node's attributes or shapes (a DFT
    matrix, one-hot weights, an index table) above MAX_CONSTANT entries: a hostile or mistaken
    model must give an error, not exhaust memory while importing."""
    if entries > MAX_CONSTANT:
        raise ctx.unsupported(f"{what} would be a constant of {entries} entries, over aitgen's limit of "
                              f"{MAX_CONSTANT} for one import-time constant")
