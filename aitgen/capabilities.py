"""Capabilities: what a backend's kernels render beyond the plain op, as data.

Passes and memory planning create forms of ops that only some backends render (a fused epilogue,
strided operand reads, a strided result, a grouped kernel). They ask this object, never codegen:
the compiler asks the chosen backend once (aitgen.codegen.lower.capabilities, computed from the
lowerings it registers) and hands the answer down in CompileOptions.caps.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .ir.op import OpKind

if TYPE_CHECKING:
    from .options import CompileOptions


@dataclasses.dataclass(frozen=True)
class Capabilities:
    target: str
    kinds: frozenset[OpKind] = frozenset()           # op kinds with a lowering at all
    epilogue: frozenset[OpKind] = frozenset()        # render attrs.epilogue (a fused element-wise DAG)
    operand_views: frozenset[OpKind] = frozenset()   # read operands through attrs.operand_views
    strided_output: frozenset[OpKind] = frozenset()  # write the result at strides the memory plan gives
    grouped: frozenset[OpKind] = frozenset()         # member kinds of a GROUPED op they render
    # Kinds whose epilogue may end in float32 from bfloat16 operands (the kernel writes its float32
    # accumulator): a bf16 GEMM feeding a float32 residual add takes the add without rounding.
    epilogue_widen: frozenset[OpKind] = frozenset()
    # Byte alignment of every arena tensor's base (backend.yaml `alignment`): memory planning
    # places buffers and in-place concat slices at multiples of it.
    alignment: int = 64
    # Precisions ("bfloat16") that convert_precision applies as the mixed (autocast) policy by
    # default (backend.yaml mixed_precision): the kernels there gain from narrow matmul operands
    # and lose little to float32 element-wise traffic.
    mixed_precision: frozenset[str] = frozenset()
    # Whether int8 weights must leave headroom (passes/quantize_int8.py): CPUs without VNNI sum
    # u8 x s8 pairs in int16 (vpmaddubsw), which saturates, and oneDNN halves s8-activation
    # weights there; on those the weights get 7 bits (6 for s8 activations) and stay exact.
    int8_reduced_weights: bool = False


def caps_of(opts: "CompileOptions") -> Capabilities:
    """opts.caps, or a ValueError saying how to get one: a pass that would guess creates forms the
    backend may not render, or silently misses the fusions it does."""
    if opts.caps is None:
        raise ValueError(f"CompileOptions.caps is not set (target '{opts.target}'): compile_model asks the "
                         "backend for it; to run passes by hand, build the options with "
                         "aitgen.compiler.compile_options(target, ...)")
    return opts.caps
