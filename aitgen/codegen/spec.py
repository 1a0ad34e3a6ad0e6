"""What lowering produces: KernelSpecs (one translation unit each) and the calls of the run sequence."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Optional, Union

from ..ir.dims import Dim
from ..ir.tensor import Tensor


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """A kernel: a template under backends/ and the parameters Python chose for it.

    Equal specs are one kernel: the function name is a hash of (template, params), so twelve BERT
    layers share one set of translation units. Params are sorted (name, value) pairs of JSON-able
    values; every kernel has the signature `void f(void* const* ptrs, const int64_t* dims)`.
    """
    template: str
    params: tuple[tuple[str, Any], ...]

    @staticmethod
    def make(template: str, **params: Any) -> "KernelSpec":
        return KernelSpec(template, tuple(sorted((k, _freeze(v)) for k, v in params.items())))

    @property
    def func(self) -> str:
        blob = json.dumps([self.template, self.params], sort_keys=True, default=str).encode()
        return "k_" + hashlib.sha256(blob).hexdigest()[:16]

    def param_dict(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self.params}


@dataclasses.dataclass
class KernelCall:
    """One launch of the run sequence: pointers to tensors (resolved to storage by the model
    renderer) and int64 arguments (Dims, evaluated at run time from the bound IntVars)."""
    spec: KernelSpec
    ptrs: list[Any]  # Tensor, or lower.OutputRef for a copy into a graph output
    dims: list[Union[Dim, int, str]]  # a str is a run-context field: CONSTANTS_VERSION
    op: str  # the op it runs, for comments and reports
    # Indices of the pointers it writes (lower_graph fills it from the op's outputs); the mock
    # device orders launches by what they read and write.
    writes: Optional[list[int]] = None
    # Kernels this one calls itself (a LOOP's body kernels): built and linked with the model too.
    nested: list = dataclasses.field(default_factory=list)


# A dims entry that reads the run context instead of a shape: kernels that prepack constant
# weights compare it with the version they packed at, since set_constants may replace them.
CONSTANTS_VERSION = "ctx->constants_version"

# A ptrs entry for kernels that bind produced IntVars (ops/dynamic.py): the run's dim table. It is
# const in the run context because no other kernel may write it; the table itself is the
# runtime's per-run vector, so writing through it is defined.
VARS_PTR = "const_cast<int64_t*>(ctx->vars)"


@dataclasses.dataclass(frozen=True, eq=False)
class BoundRef:
    """A ptrs entry: where a bound on |values| of `tensor` lies during the run (a double in the
    arena), for kernels that carry bounds from producer to reader (codegen/bounds.py links them;
    one left unlinked is a null pointer)."""
    tensor: Any


@dataclasses.dataclass(frozen=True)
class BoundSlot:
    """A linked BoundRef: slot `index` of the run's bound slots (after the arena's tensors)."""
    index: int


@dataclasses.dataclass(frozen=True)
class VarSlot:
    """A dims entry: the index of `var` in the dim table (where a kernel writes a produced size)."""
    var: Any

_DICT = "__dict__"  # marks a frozen dict so _thaw can give it back


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return (_DICT,) + tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _thaw(v: Any) -> Any:
    if isinstance(v, tuple) and v[:1] == (_DICT,):
        return {k: _thaw(x) for k, x in v[1:]}
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v
