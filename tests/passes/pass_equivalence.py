"""The check every pass test uses: the oracle gives the same outputs before and after a pass.

Exact passes (toposort, remove_unused, dedup, remove_no_ops, constant_folding, name_graph) must give
bit-identical outputs, compared with ==, so -0.0 equals +0.0 (x + 0 -> x may flip a zero's sign)
and NaN equals NaN. Passes that reorder float arithmetic (fold_batchnorm, and hence the whole
PIPELINE) must agree to rtol 1e-5 in float32, with atol 1e-5 scaled by the output's largest
magnitude: rounding error scales with the values a deep random model produces, not with one
element. 16-bit outputs get 8 units in the last place of their type instead (folded weights are
rounded to it once, the unfolded graph rounds after the conv and again after the batchnorm).

The check also verifies the rewritten graph and proves the pass left the constant arrays it
shares with the original untouched (passes make new arrays, never write into old ones).

The oracle runs op by op through reference.eval_op, with every operand made C-contiguous first.
Without that, "exact" would test numpy's memory layout rather than the pass: the conv2d
reference can return a strided (non-C-contiguous) array, a following gemm's BLAS call then sums in
another order than on a contiguous copy of the same values, and removing an x/1 in between (whose
output is contiguous) changes the last bit. Found by hypothesis; layout is not semantics.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Optional, Sequence

import ml_dtypes
import numpy as np

from aitgen import reference
from aitgen.compiler import compile_options
from aitgen.ir import Graph, Tensor, verify
from aitgen.ir.dims import IntVar
from aitgen.options import CompileOptions

PassFn = Callable[[Graph, CompileOptions], Graph]
RTOL = 1e-5  # float32; see _tolerance for 16-bit types


def make_feeds(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    """One random array per graph input, in input order (passes never reorder the signature).

    Integer inputs (token ids, positions, token types) get 0 or 1, valid for any vocabulary
    and sequence length the zoo's test configs use.
    """
    rng = np.random.default_rng(seed)
    env: dict[IntVar, int] = {}
    arrays = []
    for t in graph.inputs:
        dims = []
        for d in t.shape:
            if d.is_static:
                dims.append(d.value)
                continue
            for v in d.vars():
                env.setdefault(v, min(v.upper, max(v.lower, 2)))
            dims.append(d.evaluate(env))
        if t.dtype.is_float:
            arrays.append(rng.standard_normal(dims).astype(t.dtype.np))
        elif t.dtype.is_int:
            arrays.append(rng.integers(0, 2, size=dims).astype(t.dtype.np))
        else:
            arrays.append(rng.integers(0, 2, size=dims).astype(bool))
    return arrays


def run_oracle(graph: Graph, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The oracle's outputs for inputs given in input order, with canonical (C) operand layout."""
    # Fed by Tensor, not by name: name_graph may rename an input ('input.1' -> 'input_1').
    values, env = reference.bind_dims(graph.inputs, {t: a for t, a in zip(graph.inputs, arrays)})

    def value(t: Tensor) -> np.ndarray:
        v = values.get(id(t))
        if v is None:
            assert t.is_constant, f"'{t.name}' is read before it is computed"
            v = t.value
        return np.ascontiguousarray(v).reshape(np.shape(v))  # ascontiguousarray makes 0-d 1-d

    for op in graph.ops:
        for o, v in zip(op.outputs, reference.eval_op(op, [value(t) for t in op.inputs], env)):
            values[id(o)] = v
    return {k: value(t) for k, t in graph.outputs.items()}


def compare_outputs(before: dict[str, np.ndarray], after: dict[str, np.ndarray], *, exact: bool,
                    what: str = "") -> None:
    """AssertionError naming the first output that differs."""
    assert list(before) == list(after), f"{what}: outputs changed from {list(before)} to {list(after)}"
    for k, a in before.items():
        b = after[k]
        assert a.shape == b.shape and a.dtype == b.dtype, \
            f"{what}: output '{k}' was {a.dtype}{list(a.shape)}, is {b.dtype}{list(b.shape)}"
        if exact:
            same = np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
            if not same:
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
                raise AssertionError(f"{what}: output '{k}' differs (must be exact); max |diff| = "
                                     f"{np.nanmax(diff) if diff.size else 0}")
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            scale = max(1.0, float(np.nanmax(np.abs(a64)))) if a64.size else 1.0
            tol = _tolerance(a.dtype)
            np.testing.assert_allclose(b64, a64, rtol=tol, atol=tol * scale, equal_nan=True,
                                       err_msg=f"{what}: output '{k}'")


def _tolerance(dtype: np.dtype) -> float:
    if dtype.itemsize >= 4 or dtype.kind not in "fV":
        return RTOL
    return 8 * float(ml_dtypes.finfo(dtype).eps)


def _constant_digests(graph: Graph) -> dict[int, bytes]:
    return {id(t.value): hashlib.blake2b(np.ascontiguousarray(t.value).reshape(-1).view(np.uint8),
                                         digest_size=16).digest()
            for t in graph.constants}


def check_pass(pass_fn: PassFn, graph: Graph, *, exact: bool, opts: Optional[CompileOptions] = None,
               seed: int = 0, verify_after: bool = True) -> Graph:
    """Run pass_fn on a copy of graph; assert the oracle agrees before and after. Returns the result."""
    opts = opts if opts is not None else compile_options()
    arrays = make_feeds(graph, seed)
    before = run_oracle(graph, arrays)
    digests = _constant_digests(graph)
    work = graph.copy()
    after_graph = pass_fn(work, opts)
    name = getattr(pass_fn, "__name__", "pass")
    if verify_after:
        verify(after_graph)
    assert [t.dtype for t in after_graph.inputs] == [t.dtype for t in graph.inputs], \
        f"{name}: the input signature changed"
    after = run_oracle(after_graph, arrays)
    compare_outputs(before, after, exact=exact, what=name)
    now = _constant_digests(graph)
    changed = [t.name for t in graph.constants if now[id(t.value)] != digests[id(t.value)]]
    assert not changed, f"{name}: wrote into constant arrays it shares with the original graph: {changed}"
    return after_graph
