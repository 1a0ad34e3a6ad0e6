"""Lowering: every op of the final graph becomes zero or more KernelCalls for a backend.

Lowering functions are registered per (backend, OpKind) by the files in codegen/kernels/; a view
(reshape) lowers to nothing, since the memory plan gives it its input's bytes.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from ..errors import UnsupportedOpError
from ..ir.dims import prod
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..options import CompileOptions
from ..passes.memory_planning import MemoryPlan
from .backend import load_backend
from .spec import KernelCall, KernelSpec

@dataclasses.dataclass(frozen=True)
class OutputRef:
    """Graph output `name` as a copy destination, where its tensor also lives elsewhere (it is an
    input, a constant, or the tensor of an earlier output)."""
    name: str


LowerFn = Callable[[Op, "LowerContext"], list[KernelCall]]
_LOWERINGS: dict[tuple[str, OpKind], LowerFn] = {}
_EPILOGUES: set[tuple[str, OpKind]] = set()  # lowerings that render a fused epilogue
_FEATURES: dict[tuple[str, OpKind], frozenset] = {}  # what else a lowering renders (see supports)


def lowering(backend: str, *kinds: OpKind, epilogue: bool = False, features=()):
    """Register a lowering function for these op kinds on a backend; `epilogue=True` says it
    renders attrs.epilogue (a fused element-wise DAG on the result); `features` names optional
    forms of the op it renders (see `supports`)."""
    def deco(fn: LowerFn) -> LowerFn:
        for k in kinds:
            _LOWERINGS[(backend, k)] = fn
            if epilogue:
                _EPILOGUES.add((backend, k))
            if features:
                _FEATURES[(backend, k)] = _FEATURES.get((backend, k), frozenset()) | frozenset(features)
        return fn
    return deco


def supports(backend: str, kind: OpKind, feature: str) -> bool:
    """Whether `backend` renders `kind` in the optional form `feature`. A pass that creates a form
    only some backends render asks first (group_ops: "grouped" member kinds such as "gemm";
    fuse_memory_ops: "operand_views"), so a backend without it gets the plain graph, not an error."""
    _load_kernels()
    return feature in _FEATURES.get((backend, kind), frozenset())


def supported_kinds(backend: str) -> set[OpKind]:
    _load_kernels()
    return {k for (b, k) in _LOWERINGS if b == backend}


@dataclasses.dataclass
class LowerContext:
    backend: str
    plan: MemoryPlan
    graph: Graph
    arch: Optional[str] = None          # the build's arch ("sm_80", "sm_90a"); None on the CPU
    opts: Optional[CompileOptions] = None

    def template(self, name: str) -> str:
        return f"{self.backend}/templates/{name}"


def copy_call(ctx: LowerContext, dst: "Tensor | OutputRef", src: Tensor, op: str) -> KernelCall:
    """A dense byte copy (views that must own their bytes, outputs that are inputs or constants)."""
    nbytes = prod(src.shape) * src.dtype.itemsize
    return KernelCall(KernelSpec.make(load_backend(ctx.backend).template("copy")), [dst, src], [nbytes], op)


def lower_graph(graph: Graph, backend: str, arch: Optional[str] = None,
                opts: Optional[CompileOptions] = None) -> list[KernelCall]:
    """The run sequence of a graph that has been through the pipeline and memory planning."""
    _load_kernels()
    plan: Optional[MemoryPlan] = graph.annotations.get("memory_plan")
    if plan is None:
        raise ValueError("lower_graph needs graph.annotations['memory_plan'] (run memory_planning)")
    ctx = LowerContext(backend, plan, graph, arch=arch, opts=opts)
    calls: list[KernelCall] = []
    copies = set(plan.view_copies)
    for op in graph.ops:
        if op.kind is OpKind.RESHAPE:
            if (op.name or "") in copies:
                calls.append(copy_call(ctx, op.outputs[0], op.inputs[0], op.name or "reshape"))
            continue
        fn = _LOWERINGS.get((backend, op.kind))
        if fn is None:
            raise UnsupportedOpError(f"op {op.kind.value} '{op.name}' has no {backend} kernel yet")
        if getattr(op.attrs, "epilogue", None) is not None and (backend, op.kind) not in _EPILOGUES:
            raise UnsupportedOpError(f"op {op.kind.value} '{op.name}' carries a fused epilogue that the "
                                     f"{backend} kernel cannot render")
        calls.extend(fn(op, ctx))
    # An output that is a graph input, a constant, or the same tensor as an earlier output is a
    # buffer of its own that no kernel writes: copy into it.
    seen: set[int] = set()
    for name, t in graph.outputs.items():
        if t.producer is None or id(t) in seen:
            calls.append(copy_call(ctx, OutputRef(name), t, f"output {name}"))
        seen.add(id(t))
    return calls


_loaded = False


def _load_kernels() -> None:
    global _loaded
    if not _loaded:
        from . import kernels  # noqa: F401 - registers the lowering functions
        _loaded = True
