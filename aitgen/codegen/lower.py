"""Lowering: every op of the final graph becomes zero or more KernelCalls for a backend.

Lowering functions are registered per (backend, OpKind) by the files of the backend's package
(BACKENDS: codegen/kernels/<backend>/), imported only when that backend is the target; a view
(reshape) lowers to nothing, since the memory plan gives it its input's bytes.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable, Optional

from ..capabilities import Capabilities
from ..errors import TargetError, UnsupportedOpError
from ..ir.dims import prod
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..memory import MemoryPlan, is_view
from ..options import CompileOptions
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
_FEATURES: dict[tuple[str, OpKind], frozenset] = {}  # optional forms a lowering renders (Capabilities)
_GROUPED: dict[str, frozenset] = {}  # backend -> member kinds its GROUPED lowering renders
FEATURES = ("operand_views", "strided_output", "epilogue_widen")

# The backends whose lowerings ship with aitgen: name -> the package whose import registers them.
# Only the target's package is imported. A new backend adds its line here.
BACKENDS: dict[str, str] = {
    "cpu": "aitgen.codegen.kernels.cpu",
    "cuda": "aitgen.codegen.kernels.cuda",
    "rocm": "aitgen.codegen.kernels.rocm",
}


def lowering(backend: "str | tuple[str, ...]", *kinds: OpKind, epilogue: bool = False, features=(), grouped=()):
    """Register a lowering function for these op kinds on a backend (or on several: a tuple, for
    lowerings shared by backends, as codegen/kernels/gpu's are by CUDA and ROCm); `epilogue=True` says it
    renders attrs.epilogue (a fused element-wise DAG on the result); `features` names optional
    forms of the op it renders (FEATURES); `grouped` (on the GROUPED lowering) the member kinds of
    the groups it renders. capabilities() turns them into the data the passes read."""
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown lowering features {sorted(unknown)}; known: {list(FEATURES)}")

    backends = (backend,) if isinstance(backend, str) else tuple(backend)

    def deco(fn: LowerFn) -> LowerFn:
        for b in backends:
            for k in kinds:
                _LOWERINGS[(b, k)] = fn
                if epilogue:
                    _EPILOGUES.add((b, k))
                if features:
                    _FEATURES[(b, k)] = _FEATURES.get((b, k), frozenset()) | frozenset(features)
            if grouped:
                _GROUPED[b] = _GROUPED.get(b, frozenset()) | frozenset(grouped)
        return fn
    return deco


def capabilities(target: str) -> Capabilities:
    """What `target`'s lowerings render, as the data passes and memory planning read
    (CompileOptions.caps). A pass that creates a form only some backends render (group_ops:
    grouped member kinds; fuse_memory_ops: operand views; memory planning: strided results)
    checks it there, so a backend without it gets the plain graph, not an error."""
    _load_kernels(target)

    def having(feature: str) -> frozenset:
        return frozenset(k for (b, k), fs in _FEATURES.items() if b == target and feature in fs)

    return Capabilities(target=target, kinds=frozenset(k for (b, k) in _LOWERINGS if b == target),
                        epilogue=frozenset(k for (b, k) in _EPILOGUES if b == target),
                        operand_views=having("operand_views"), strided_output=having("strided_output"),
                        epilogue_widen=having("epilogue_widen"),
                        grouped=_GROUPED.get(target, frozenset()),
                        alignment=_alignment(target), mixed_precision=_mixed_precision(target),
                        int8_reduced_weights=_INT8_REDUCED.get(target, lambda: False)())


# backend -> whether its int8 kernels need reduced-range weights here (Capabilities.int8_reduced_weights);
# a backend's kernels register the rule (kernels/cpu/gemm.py: no VNNI).
_INT8_REDUCED: dict[str, Callable[[], bool]] = {}


def int8_reduced_weights_rule(backend: str, rule: Callable[[], bool]) -> None:
    """Register whether `backend`'s int8 kernels need reduced-range weights on this machine."""
    _INT8_REDUCED[backend] = rule


def _mixed_precision(target: str) -> frozenset:
    try:
        return frozenset(load_backend(target).mixed_precision)
    except TargetError:
        return frozenset()


def _alignment(target: str) -> int:
    """backend.yaml's alignment; the default for a backend registered without a folder (tests)."""
    try:
        return load_backend(target).alignment
    except TargetError:
        return Capabilities.alignment


def supported_kinds(backend: str) -> set[OpKind]:
    return set(capabilities(backend).kinds)


@dataclasses.dataclass
class LowerContext:
    backend: str
    plan: MemoryPlan
    graph: Graph
    arch: Optional[str] = None          # the build's arch ("sm_80", "sm_90a"); None on the CPU
    opts: Optional[CompileOptions] = None

    def template(self, name: str) -> str:
        return f"{self.backend}/templates/{name}"


def copy_call(ctx: LowerContext, dst: "Tensor | OutputRef", src: Tensor, op: str, nbytes=None) -> KernelCall:
    """A dense byte copy (views that must own their bytes, outputs that are inputs or constants);
    nbytes: the first bytes of src only (a prefix view), else all of them."""
    nbytes = prod(src.shape) * src.dtype.itemsize if nbytes is None else nbytes
    return KernelCall(KernelSpec.make(load_backend(ctx.backend).template("copy")), [dst, src], [nbytes], op, writes=[0])


# Kernels (every backend's) that compute in float32 whatever they store: a float64 operand would
# silently lose its precision there, so it is refused instead. (ops.softmax/layernorm/rmsnorm and
# most attention of float64 never make these ops: ops/float64.py builds them from primitives.)
FLOAT32_ONLY = frozenset({OpKind.SOFTMAX, OpKind.LAYERNORM, OpKind.RMSNORM, OpKind.GROUPNORM, OpKind.BATCHNORM,
                          OpKind.ATTENTION})


# Kernels that bind sizes during the run (they write the run's dim table; ops/dynamic.py).
BINDS_SIZES = frozenset({OpKind.BIND_DIMS, OpKind.NONZERO, OpKind.NMS, OpKind.UNIQUE})


def lower_graph(graph: Graph, plan: MemoryPlan, backend: str, arch: Optional[str] = None,
                opts: Optional[CompileOptions] = None) -> list[KernelCall]:
    """The run sequence of a graph that has been through the pipeline, with its memory plan
    (aitgen.memory.plan_memory)."""
    _load_kernels(backend)
    ctx = LowerContext(backend, plan, graph, arch=arch, opts=opts)
    calls: list[KernelCall] = []
    copies = set(plan.view_copies)
    for op in graph.ops:
        if is_view(op):  # a reshape, or a constant's prefix: its operand's first bytes
            if (op.name or "") in copies:
                calls.append(copy_call(ctx, op.outputs[0], op.inputs[0], op.name or op.kind.value,
                                       nbytes=prod(op.outputs[0].shape) * op.outputs[0].dtype.itemsize))
            continue
        fn = _LOWERINGS.get((backend, op.kind))
        kind = op.attrs.kind if op.kind is OpKind.GROUPED else op.kind
        if kind in FLOAT32_ONLY and any(t.dtype is DType.float64 for t in op.inputs):
            raise UnsupportedOpError(f"op {op.kind.value} '{op.name}': its kernels compute in float32, and "
                                     "float64 computes in float64 (cast to float32 around it)")
        if fn is None and op.kind in BINDS_SIZES:
            raise UnsupportedOpError(
                f"op {op.kind.value} '{op.name}' binds sizes during the run (a data-dependent shape), which "
                f"the {backend} backend does not support: its later launches would need each size copied "
                "back to the host, with a sync and no CUDA graph; build for the CPU, or freeze the input "
                "with load(..., constant_inputs=...)")
        if fn is None and op.kind is OpKind.LOOP:
            raise UnsupportedOpError(f"op loop '{op.name}' has no {backend} kernel yet: Loop runs on the CPU "
                                     "backend (target='cpu'), as a host-side loop over its compiled body")
        if fn is None:
            raise UnsupportedOpError(f"op {op.kind.value} '{op.name}' has no {backend} kernel yet")
        if getattr(op.attrs, "epilogue", None) is not None and (backend, op.kind) not in _EPILOGUES:
            raise UnsupportedOpError(f"op {op.kind.value} '{op.name}' carries a fused epilogue that the "
                                     f"{backend} kernel cannot render")
        for c in fn(op, ctx):
            if c.writes is None:
                c.writes = [j for j, t in enumerate(c.ptrs) if any(t is o for o in op.outputs)] or [0]
            calls.append(c)
    # An output that is a graph input, a constant, or the same tensor as an earlier output is a
    # buffer of its own that no kernel writes: copy into it.
    seen: set[int] = set()
    for name, t in graph.outputs.items():
        if t.producer is None or id(t) in seen:
            calls.append(copy_call(ctx, OutputRef(name), t, f"output {name}"))
        seen.add(id(t))
    return calls


def _load_kernels(backend: str) -> None:
    """Import `backend`'s lowerings (BACKENDS); a backend not listed there registers its own."""
    package = BACKENDS.get(backend)
    if package is not None:
        importlib.import_module(package)
