"""convert_precision: run a float32 graph in float16 or bfloat16 (opts.precision).

Every float32 constant becomes a new array of the target type (the old one may be shared), every
float32 result the target type (casts *to* float32 inside the graph, and float32 nodes of fused
expressions and epilogues, retarget too), and the graph's edges keep their declared dtypes: a
float32 input is cast to the target type once, where it enters, and a float32 output is cast back
where it leaves. Callers feed and get float32 exactly as before; only the inside is narrower.
Integer and bool tensors are untouched; tensors already float16/bfloat16 stay as they are.

Kernels store the narrow type and compute in float32 (norms, softmax and reductions accumulate in
float32, GEMMs accumulate in float32), as the oracle does per op, so the converted graph matches
the original to the target type's rounding: the tests use rtol/atol about 2e-2 for float16.
Constants that overflow float16 (|x| > 65504) become inf; bfloat16 keeps float32's range.
Weights keep their names, in the target type: Model.set_constants then takes arrays of that type.

Placed after fold_batchnorm (folds in float32, rounds once) and before remove_no_ops and dedup,
which remove the identity casts the conversion leaves (a user's cast to float32 of a value that
is now float16 becomes a cast to float16 of a float16 value) and merge the casts it inserts.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import DTypeError
from ..ir.dtype import DType, as_dtype
from ..ir.graph import Graph
from ..ir.op import OpKind
from ..ops.elementwise import CastAttrs
from ..ops.registry import infer_types, make_op1
from ..options import CompileOptions

_TARGETS = (DType.float16, DType.bfloat16)


def convert_precision(graph: Graph, opts: CompileOptions) -> Graph:
    if opts.precision is None:
        return graph
    target = as_dtype(opts.precision)
    if target not in _TARGETS:
        raise DTypeError(f"precision {opts.precision!r}: expected one of {[t.value for t in _TARGETS]}")
    f32 = DType.float32
    ops = list(graph.ops)   # the ops of the original graph, in order; the casts added below are not among them
    declared = {name: t.dtype for name, t in graph.outputs.items()}

    for t in graph.constants:
        if t.dtype is f32:
            value = t.value.astype(target.np)   # a new array: the float32 one may be shared
            value.setflags(write=False)
            t.dtype = target
            t.value = value

    for x in graph.inputs:
        if x.dtype is f32 and x.users:
            narrow = make_op1(OpKind.CAST, [x], CastAttrs(target))
            for user in list(x.users):
                if user is not narrow.producer:
                    user.replace_input(x, narrow)

    for op in ops:
        op.attrs = _retarget(op.attrs, target)
        types = infer_types(op.kind, op.inputs, op.attrs, op.name)
        for out, (_, dtype) in zip(op.outputs, types):
            out.dtype = dtype

    for name, t in list(graph.outputs.items()):
        if declared[name] is f32 and t.dtype is target:
            wide = make_op1(OpKind.CAST, [t], CastAttrs(f32))
            wide.name = t.name
            t.name = None   # the output keeps its name; the narrow value gets one from name_graph
            t.is_output = False
            graph.outputs[name] = wide
    graph.sort()
    return graph


def _retarget(value: Any, target: DType) -> Any:
    """`value` with every DType.float32 inside it (dataclass fields, tuples) replaced by target."""
    if value is DType.float32:
        return target
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _retarget(old, target)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, tuple):
        items = tuple(_retarget(v, target) for v in value)
        return items if any(a is not b for a, b in zip(items, value)) else value
    return value
