"""The numpy oracle: evaluates any graph (before or after any pass) on concrete inputs.

float16, bfloat16 and float8 ops compute in float32 and round to their storage type after each op,
which is what a backend that stores in 8 or 16 bits and computes in 32 does; float64 computes in
float64. Integers compute in their own width and wrap, as the kernels do.
"""
from __future__ import annotations

import sys
from typing import Mapping, Optional, Union

import numpy as np

from .errors import AitgenError, RuntimeInputError
from .ir.dims import IntVar, evaluate_shape
from .ir.dtype import DType
from .ir.graph import Graph, Outputs, normalize_outputs, topo_order
from .ir.op import Op, OpKind
from .ir.tensor import Tensor
from .ops import dynamic
from .ops.registry import RefContext, get_opdef

_LOW = [t for t in DType if t.is_low_float]
Feeds = Mapping[Union[str, Tensor], np.ndarray]


def _low_floats() -> tuple[np.dtype, ...]:
    """numpy dtypes of the float storage types that compute in float32 (float16, bfloat16, float8).
    ml_dtypes' are compared only once it is loaded: an array of one cannot exist before."""
    if "ml_dtypes" not in sys.modules:
        return (np.dtype(np.float16),)
    return tuple(t.np for t in _LOW)


def _subbyte_ints() -> tuple[np.dtype, ...]:
    return tuple(t.np for t in DType if t.is_subbyte_int)


def bind_dims(inputs: list[Tensor], feeds: Feeds) -> tuple[dict[int, np.ndarray], dict[IntVar, int]]:
    """Match feeds to inputs by name (or Tensor), check dtype/rank/shape/bounds, bind the IntVars."""
    by_name: dict[str, np.ndarray] = {}
    by_id: dict[int, np.ndarray] = {}
    for k, v in feeds.items():
        if isinstance(k, Tensor):
            by_id[id(k)] = v
        else:
            by_name[str(k)] = v
    known = {t.name for t in inputs}
    extra = [k for k in by_name if k not in known]
    if extra:
        raise RuntimeInputError(f"unknown input '{extra[0]}'; the inputs are {sorted(n for n in known if n)}")
    values: dict[int, np.ndarray] = {}
    env: dict[IntVar, int] = {}
    for t in inputs:
        v = by_id.get(id(t), by_name.get(t.name) if t.name is not None else None)
        if v is None:
            raise RuntimeInputError(f"missing input '{t.name}'")
        arr = np.asarray(v)
        if arr.dtype != t.dtype.np:
            raise RuntimeInputError(f"input '{t.name}': dtype {arr.dtype}, expected {t.dtype}")
        if arr.ndim != len(t.shape):
            raise RuntimeInputError(f"input '{t.name}': rank {arr.ndim} (shape {list(arr.shape)}), "
                                    f"expected rank {len(t.shape)} {[str(d) for d in t.shape]}")
        for axis, (d, n) in enumerate(zip(t.shape, arr.shape)):
            if d.is_static:
                if d.value != n:
                    raise RuntimeInputError(f"input '{t.name}': dim {axis} is {n}, expected {d.value}")
            elif isinstance(d, IntVar):
                if not d.lb <= n <= d.ub:
                    raise RuntimeInputError(f"input '{t.name}': dim {axis} ('{d.name}') is {n}, "
                                            f"outside its bounds [{d.lb}, {d.ub}]")
                if d in env and env[d] != n:
                    raise RuntimeInputError(f"input '{t.name}': dim {axis} ('{d.name}') is {n}, but another "
                                            f"input gave '{d.name}' = {env[d]}")
                env[d] = n
        values[id(t)] = arr
    # Derived dims of inputs (2*n, ...) can be checked only once every IntVar is bound.
    for t in inputs:
        for axis, (d, n) in enumerate(zip(t.shape, values[id(t)].shape)):
            if not d.is_static and not isinstance(d, IntVar) and all(v in env for v in d.vars()):
                if d.evaluate(env) != n:
                    raise RuntimeInputError(f"input '{t.name}': dim {axis} is {n}, expected {d} = {d.evaluate(env)}")
    return values, env


def eval_op(op: Op, args: list[np.ndarray], env: Mapping[IntVar, int]) -> list[np.ndarray]:
    """One op on concrete arrays: compute in float32 for float storage types, round per op."""
    d = get_opdef(op.kind)
    # Contiguous operands: numpy's BLAS and reductions round differently by memory layout, and the
    # oracle must give the same bits before and after a pass that removes a copy or a no-op.
    low = _low_floats()
    cargs = [a.astype(np.float32) if a.dtype in low else a for a in args]
    if "ml_dtypes" in sys.modules:  # sub-byte integers compute in int32 (ir/dtype.py compute_dtype)
        sub = _subbyte_ints()
        cargs = [a.astype(np.int32) if a.dtype in sub else a for a in cargs]
    cargs = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in cargs]  # keeps 0-d arrays 0-d
    if op.kind is OpKind.BIND_DIMS:  # binds produced sizes (ops/dynamic.py) before its output's shape
        env.update(dynamic.bindings(op.attrs, args[1:], env))  # type: ignore[attr-defined] # the run's own dict
    # An output with a size produced by this very op (NonZero's count) has no shape until it ran.
    shapes = tuple(evaluate_shape(o.shape, env) if all(v in env for d in o.shape for v in d.vars()) else None
                   for o in op.outputs)
    ctx = RefContext(shapes, env, run_graph=evaluate)
    try:
        outs = d.reference(cargs, op.attrs, ctx)
    except AitgenError:
        raise
    except Exception as e:  # a numpy failure here is a bug in an op definition; name the op
        raise RuntimeError(f"reference of {op.kind.value} '{op.name}' failed: {e}") from e
    res = []
    for o, a, want in zip(op.outputs, outs, shapes):
        a = np.asarray(a)
        if want is None:
            _bind_produced(op, o, a.shape, env)
        res.append(a.astype(o.dtype.np, copy=False) if a.dtype != o.dtype.np else a)
    return res


def _bind_produced(op: Op, o: Tensor, shape: tuple, env: dict) -> None:
    """Bind the produced IntVars of o's shape from the array the op gave (checked against bounds)."""
    for d, n in zip(o.shape, shape):
        if isinstance(d, IntVar) and d.produced and d not in env:
            if not d.lb <= n <= d.ub:
                raise RuntimeInputError(f"op {op.kind.value} '{op.name}': size '{d.name}' is {n}, outside "
                                        f"its bounds [{d.lb}, {d.ub}]")
            env[d] = n


def evaluate(graph: Graph, feeds: Feeds, *, keep: Optional[list[Tensor]] = None) -> dict[int, np.ndarray]:
    """Evaluate a Graph; returns id(tensor) -> value for the outputs (and every tensor in keep)."""
    values, env = bind_dims(graph.inputs, feeds)
    return _run_ops(graph.ops, values, env, graph.outputs.values(), keep)


def _run_ops(ops, values, env, outputs, keep) -> dict[int, np.ndarray]:
    want = {id(t) for t in outputs} | {id(t) for t in (keep or [])}
    remaining: dict[int, int] = {}
    for op in ops:
        for t in op.inputs:
            remaining[id(t)] = remaining.get(id(t), 0) + 1
    for op in ops:
        args = []
        for t in op.inputs:
            if id(t) in values:
                args.append(values[id(t)])
            elif t.is_constant:
                args.append(t.value)
            else:
                raise RuntimeInputError(f"op {op.kind.value} '{op.name}' reads '{t.name}', which has no value")
        for o, v in zip(op.outputs, eval_op(op, args, env)):
            values[id(o)] = v
        for t in op.inputs:  # free intermediates early: whole-model oracles run in bounded memory
            remaining[id(t)] -= 1
            if remaining[id(t)] == 0 and id(t) not in want and t.producer is not None:
                values.pop(id(t), None)
    for t in outputs:
        if id(t) not in values and t.is_constant:
            values[id(t)] = t.value
    return values


def run(outputs: Union[Outputs, Graph], feeds: Feeds) -> dict[str, np.ndarray]:
    """Evaluate the graph that ends in `outputs` (a Tensor, list, dict or Graph) on `feeds`.

    `feeds` maps input names (or input Tensors) to arrays. Returns output name -> array.
    """
    if isinstance(outputs, Graph):
        res = evaluate(outputs, feeds)
        return {k: res[id(t)] for k, t in outputs.outputs.items()}
    outs = normalize_outputs(outputs)
    ops, tensors = topo_order(outs.values())
    inputs = [t for t in tensors if t.is_input]
    values, env = bind_dims(inputs, feeds)
    res = _run_ops(ops, values, env, outs.values(), None)
    return {k: res[id(t)] for k, t in outs.items()}
