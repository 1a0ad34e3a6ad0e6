"""convert_precision: run a float32 graph in float16 or bfloat16 (opts.precision).

Two policies (opts.precision_policy; None takes the backend's default, Capabilities.mixed_precision):
- "mixed" (the CPU's bfloat16): torch.autocast's. GEMM/BMM/conv/attention read the narrow type; every
  other op computes in the dtypes its operands bring; an element-wise op is float32 when a full-size
  operand is (torch's promotion; constants and broadcast operands follow the others). So BERT's
  residual stream and layernorms stay float32 and a bf16 score plus a float32 mask stays bf16 (an
  ATTENTION op's own additive mask stays float32: its kernels add it in float32). Where
  the backend lets a bf16 product's epilogue end in float32 (Capabilities.epilogue_widen), the fusion
  passes then give the residual add to the GEMM, which writes its float32 accumulator unrounded.
- "uniform" (described below): every float tensor narrow.

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
from typing import Any, Optional

from ..errors import DTypeError
from ..ir.dtype import DType, as_dtype
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.opdef import Category
from ..ir.tensor import Tensor
from ..ops.elementwise import broadcast_shapes
from ..ops.elementwise import CastAttrs
from ..ops.registry import get_opdef, infer_types, make_op1
from ..options import CompileOptions

_TARGETS = (DType.float16, DType.bfloat16)


def convert_precision(graph: Graph, opts: CompileOptions) -> Graph:
    """The uniform policy here; the mixed one in _mixed."""
    if opts.precision is None or opts.precision == "int8":   # int8: quantize_int8's
        return graph
    target = as_dtype(opts.precision)
    if target not in _TARGETS:
        raise DTypeError(f"precision {opts.precision!r}: expected one of {[t.value for t in _TARGETS]} "
                         "(or 'int8': passes/quantize_int8.py)")
    if _policy(opts, target) == "mixed":  # the CPU bfloat16 default: torch.autocast's policy
        return _mixed(graph, target)
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
        if op.kind is OpKind.LOOP:
            _loop_boundary(op, target)
            continue
        op.attrs = _retarget(op.attrs, target)
        types = infer_types(op.kind, op.inputs, op.attrs, op.name)
        for out, (_, dtype) in zip(op.outputs, types):
            out.dtype = dtype

    _restore_outputs(graph, declared)
    graph.sort()
    return graph


def _loop_boundary(op: Op, target: DType) -> None:
    """A LOOP keeps its body's interface: its operands are cast back to the dtypes the body takes,
    its float32 results narrowed for their readers. The body converts inside itself when
    codegen/loop_body.py runs the pipeline on it (its outputs restored to float32 there too)."""
    a = op.attrs
    takes = [DType.int64] * a.has_trip + [DType.bool] * a.has_cond + [p.dtype for p in a.body.inputs[2:]]
    for x, want in list(zip(op.inputs, takes)):
        if x.dtype is not want:
            op.replace_input(x, make_op1(OpKind.CAST, [x], CastAttrs(want)))
    for o in op.outputs:
        readers = list(o.users)
        if o.dtype is DType.float32 and readers:
            narrow = make_op1(OpKind.CAST, [o], CastAttrs(target))
            for u in readers:
                u.replace_input(o, narrow)


def precision_policy(opts: CompileOptions) -> Optional[str]:
    """The policy `opts.precision` runs under ("mixed" / "uniform"), None without a precision;
    report.json's precision.policy."""
    if opts.precision == "int8":  # quantize_int8's: GEMM/conv int8, everything else float32
        return "int8 gemm/conv"
    return None if opts.precision is None else _policy(opts, as_dtype(opts.precision))


def _policy(opts: CompileOptions, target: DType) -> str:
    """opts.precision_policy, else the backend's default (backend.yaml mixed_precision, through
    opts.caps); "uniform" where no backend was asked (passes run by hand on bare options)."""
    if opts.precision_policy is not None:  # CompileOptions checked it
        return opts.precision_policy
    mixed = opts.caps.mixed_precision if opts.caps is not None else frozenset()
    return "mixed" if target.value in mixed else "uniform"


# -- the mixed policy -------------------------------------------------------------------------
# torch.autocast's, so that the narrow build is at least as accurate as autocast on the same model:
# the matmul family reads bf16 (and accumulates in float32 in its kernel); every other op computes in
# what its operands bring, and element-wise ops promote as torch does, so a float32 residual stream
# (embeddings -> layernorm -> residual adds -> layernorm) stays float32 while the GEMMs between run bf16.

_NARROW = frozenset({OpKind.GEMM, OpKind.BMM, OpKind.CONV2D, OpKind.CONV_TRANSPOSE2D, OpKind.ATTENTION})


def _operand_dtypes(op: Op, cur: list[DType], target: DType) -> list[DType]:
    """The dtype `op` reads each operand in, given the operands' (new) dtypes `cur`."""
    f32 = DType.float32
    floats = [i for i, c in enumerate(cur) if c.is_float]
    if any(cur[i] not in (f32, target) for i in floats):
        return cur   # float16/float64 operands: the user chose those; leave the op alone
    if op.kind is OpKind.ATTENTION and len(cur) == 4 and cur[3] is f32:
        # q, k, v narrow; the additive mask stays float32, as autocast's bf16 scores plus a float32
        # bias promote to float32 (the kernels add the mask in float32 whatever it stores)
        return [target, target, target, f32]
    if op.kind in _NARROW:
        return [target if c.is_float else c for c in cur]
    if get_opdef(op.kind).category is Category.ELEMENTWISE:
        if op.kind is OpKind.CAST or not floats:
            return cur
        full = broadcast_shapes(*[t.shape for t in op.inputs])
        # "Strong" operands are full-size activations; constants and broadcast operands (a bias, a
        # scale, an attention mask) are "weak" and follow them (torch's scalars do the same), so
        # that a bf16 score plus a float32 mask stays bf16 and the attention pattern stays whole.
        strong = {cur[i] for i in floats if not op.inputs[i].is_constant and tuple(op.inputs[i].shape) == tuple(full)}
        d = f32 if f32 in strong else target if target in strong or target in {cur[i] for i in floats} else f32
        return [d if c.is_float else c for c in cur]
    # Norms, softmax, reductions, pools, views, gathers: their kernels compute in float32 whatever
    # they store; operands follow the first computed float operand (a norm's weights follow x).
    first = next((cur[i] for i in floats if not op.inputs[i].is_constant), None)
    return cur if first is None else [first if c.is_float else c for c in cur]


def _mixed(graph: Graph, target: DType) -> Graph:
    ops = list(graph.ops)
    declared = {name: t.dtype for name, t in graph.outputs.items()}
    # Phase 1, in schedule order: the dtype each op reads each operand in, and its results' dtypes.
    # Stand-in tensors carry new dtypes into inference, so nothing changes before every reader of a
    # constant has been seen.
    eff: dict[int, DType] = {}                   # id(result) -> its new dtype
    uses: list[tuple[Op, Tensor, DType, DType]] = []  # float operand uses: (reader, tensor, its dtype, read in)
    plan: dict[int, tuple[Any, list[DType]]] = {}
    for op in ops:
        cur = [eff.get(id(t), t.dtype) for t in op.inputs]
        want = _operand_dtypes(op, cur, target)
        stand = [t if w is t.dtype else Tensor(t.shape, w) for t, w in zip(op.inputs, want)]
        attrs = _retarget(op.attrs, target) if op.kind in _NARROW else op.attrs
        types = [d for _, d in infer_types(op.kind, stand, attrs, op.name)]
        plan[id(op)] = (attrs, types)
        eff.update((id(o), d) for o, d in zip(op.outputs, types))
        uses += [(op, t, c, w) for t, c, w in zip(op.inputs, cur, want) if w.is_float]
    # Phase 2: a constant every reader wants in one dtype becomes that dtype in place (it keeps its
    # name: set_constants then takes arrays of that dtype, as in the uniform policy). Any other
    # tensor read in another dtype gets one cast per dtype, shared by its readers; fusion later takes
    # the cast into the producer's epilogue, the reader's prologue or an element-wise group.
    const_wants: dict[int, set] = {}
    for _, t, _, w in uses:
        if t.is_constant:
            const_wants.setdefault(id(t), set()).add(w)
    casts: dict[tuple[int, DType], Tensor] = {}
    for op, t, cur, w in uses:
        if w is cur or (t.is_constant and w is t.dtype):   # cur: the operand's new dtype
            continue
        if t.is_constant and len(const_wants[id(t)]) == 1:
            value = t.value.astype(w.np)   # a new array: the float32 one may be shared
            value.setflags(write=False)
            t.dtype, t.value = w, value
            continue
        key = (id(t), w)
        if key not in casts:
            casts[key] = make_op1(OpKind.CAST, [t], CastAttrs(w))
        op.replace_input(t, casts[key])
    for op in ops:
        op.attrs, types = plan[id(op)]
        for out, d in zip(op.outputs, types):
            out.dtype = d
    _restore_outputs(graph, declared)
    graph.sort()
    return graph


def _restore_outputs(graph: Graph, declared: dict) -> None:
    """A float32 output that is now narrower is cast back where it leaves; it keeps its name."""
    for name, t in list(graph.outputs.items()):
        if declared[name] is DType.float32 and t.dtype is not DType.float32 and t.dtype.is_float:
            wide = make_op1(OpKind.CAST, [t], CastAttrs(DType.float32))
            wide.name = t.name
            t.name = None   # the output keeps its name; the narrow value gets one from name_graph
            t.is_output = False
            graph.outputs[name] = wide


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
