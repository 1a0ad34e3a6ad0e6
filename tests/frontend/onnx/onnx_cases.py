"""Helpers for the ONNX importer tests: one-node models built with onnx.helper, checked against
onnxruntime through the oracle and through ONE CPU build per batch of cases.

Tolerance (float32): rtol 1e-5, atol 1e-6 against onnxruntime (both compute in float32; the
oracle and our kernels differ from ORT only in the last bits of libm results). Integer and bool
outputs are compared exactly.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
try:  # the numpy-reference checks (check_cases_ref) run without it; ort_run skips
    import onnxruntime as ort
except ImportError:
    ort = None
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import aitgen as ag  # noqa: E402
from aitgen.frontend import onnx as ox  # noqa: E402
from aitgen.ir.graph import topo_order  # noqa: E402

F32 = dict(rtol=1e-5, atol=1e-6)


@dataclasses.dataclass
class Case:
    name: str
    model: "onnx.ModelProto"
    feeds: dict
    dim_bounds: Optional[dict] = None
    sizes: Sequence[dict] = ()  # extra feeds (other run-time sizes) for the CPU build
    ort: bool = True  # check_cases_ref: onnxruntime has a kernel that follows the spec here
    ref: bool = True  # check_cases_ref: onnx.reference handles the case (else onnxruntime is the reference)


class In:
    """A node input: a graph input (fed at run time) or, with const=True, an initializer."""

    def __init__(self, name: str, value, const: bool = False, dims: Optional[Sequence] = None):
        self.name, self.value, self.const = name, np.asarray(value), const
        self.dims = dims  # symbolic shape for a graph input: ["N", 3]


def node_model(op: str, inputs: Sequence[Optional[In]], attrs: Optional[dict] = None, *, opset: int = 17,
               n_out: int = 1, infer: bool = True) -> "onnx.ModelProto":
    graph_inputs, inits, names = [], [], []
    for i in inputs:
        if i is None:
            names.append("")
            continue
        names.append(i.name)
        if i.const:
            inits.append(numpy_helper.from_array(i.value, i.name))
        else:
            et = helper.np_dtype_to_tensor_dtype(i.value.dtype)
            graph_inputs.append(helper.make_tensor_value_info(i.name, et, list(i.dims or i.value.shape)))
    outs = [f"y{k}" if n_out > 1 else "y" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    g = helper.make_graph([node], op.lower(), graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outs],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)  # onnxruntime reads IR versions up to its own
    # infer=False: a malformed node that onnx's shape inference would reject (importer error tests)
    return onnx.shape_inference.infer_shapes(m, strict_mode=True) if infer else m


def case(name: str, op: str, inputs: Sequence[Optional[In]], attrs: Optional[dict] = None, *, opset: int = 17,
         n_out: int = 1, dim_bounds=None, sizes=(), ort: bool = True, ref: bool = True, infer: bool = True) -> Case:
    feeds = {i.name: i.value for i in inputs if i is not None and not i.const}
    return Case(name, node_model(op, inputs, attrs, opset=opset, n_out=n_out, infer=infer), feeds, dim_bounds, sizes, ort, ref)


def ort_run(model, feeds: dict) -> dict:
    if ort is None:
        pytest.skip("onnxruntime is not installed")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs onnxruntime {want.shape}"
    if want.dtype.kind in "iub":
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs onnxruntime {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), err_msg=what,
                                   equal_nan=True, **F32)


def used_inputs(outputs: dict) -> dict:
    return {t.name: t for t in topo_order(outputs.values())[1] if t.is_input}


def check_cases(cases: Sequence[Case], workdir) -> dict:
    """Each case: import, oracle == onnxruntime; then all cases in ONE CPU build == onnxruntime.

    Returns {case name: its imported outputs} for further checks."""
    merged, feeds_list, wants, imported = {}, [], [], {}
    for c in cases:
        _, outs = ox.load(c.model, dim_bounds=c.dim_bounds)
        imported[c.name] = outs
        runs = [c.feeds, *({**c.feeds, **s} for s in c.sizes)]
        for feeds in runs:
            want = ort_run(c.model, feeds)
            used = used_inputs(outs)
            ref = ag.reference.run(outs, {k: v for k, v in feeds.items() if k in used})
            for k in want:
                assert_close(ref[k], want[k], f"{c.name}: oracle output {k}")
        # One build for every case: prefix names so inputs of different cases stay apart.
        prefix = re.sub(r"\W", "_", c.name) + "__"
        for t in used_inputs(outs).values():
            if not t.name.startswith(prefix):
                t.name = prefix + t.name
        for k, t in outs.items():
            if not t.is_constant:  # a folded output has nothing to build
                merged[prefix + k] = t
        for feeds in runs:
            feeds_list.append({prefix + k: v for k, v in feeds.items()})
            wants.append({prefix + k: v for k, v in ort_run(c.model, feeds).items()})
    if merged:
        model = ag.compile_model(merged, target="cpu", workdir=workdir)
        inputs, checked = set(model.input_specs), set()
        for feeds, want in zip(feeds_list, wants):
            run_feeds = {k: v for k, v in feeds.items() if k in inputs}
            # Cases whose inputs another case's run-time size does not cover run on their own
            # feeds only: the merged model needs every input, so fill the rest from the first run.
            full = {**first_feeds(feeds_list, inputs), **run_feeds}
            got = model.run(full)
            for k, v in want.items():
                if k in merged:  # every output that was not folded at import time
                    assert_close(got[k], v, f"CPU build: {k}")
                    checked.add(k)
        assert checked == set(merged), sorted(set(merged) - checked)
        model.close()
    return imported


def check_cases_ref(cases: Sequence[Case], workdir, tol: Optional[dict] = None) -> None:
    """Each case against onnx's numpy reference (onnx.reference.ReferenceEvaluator): the oracle on
    the imported graph, then ONE CPU build for all cases; the build also against onnxruntime where
    it is installed and the case's op has a kernel there (Case.ort). Tolerance `tol` (default F32)."""
    from onnx.reference import ReferenceEvaluator
    tol = tol or F32
    merged, runs = {}, []
    for c in cases:
        _, outs = ox.load(c.model, dim_bounds=c.dim_bounds)
        used = used_inputs(outs)
        prefix = re.sub(r"\W", "_", c.name) + "__"
        for feeds in [c.feeds, *({**c.feeds, **s} for s in c.sizes)]:
            theirs = ort_run(c.model, feeds) if c.ort and (ort is not None or not c.ref) else {}
            want = dict(zip([o.name for o in c.model.graph.output], ReferenceEvaluator(c.model).run(None, feeds))) \
                if c.ref else theirs
            ref = ag.reference.run(outs, {k: v for k, v in feeds.items() if k in used})
            for k, v in want.items():
                _close(ref[k], v, f"{c.name}: oracle output {k} vs {'onnx.reference' if c.ref else 'onnxruntime'}", tol)
                if outs[k].is_constant and k in theirs:  # folded at import: no build checks it
                    _close(ref[k], theirs[k], f"{c.name}: import-time output {k} vs onnxruntime", tol)
            runs.append(({prefix + k: v for k, v in feeds.items()}, {prefix + k: v for k, v in want.items()},
                         {prefix + k: v for k, v in theirs.items()}))
        for t in used.values():
            if not t.name.startswith(prefix):
                t.name = prefix + t.name
        merged.update({prefix + k: t for k, t in outs.items() if not t.is_constant})
    model = ag.compile_model(merged, target="cpu", workdir=workdir)
    inputs = set(model.input_specs)
    base = first_feeds([f for f, _, _ in runs], inputs)
    for feeds, want, theirs in runs:
        got = model.run({**base, **{k: v for k, v in feeds.items() if k in inputs}})
        for k in want:
            if k in merged:
                _close(got[k], want[k], f"CPU build: {k} vs the reference", tol)
                if k in theirs:
                    _close(got[k], theirs[k], f"CPU build: {k} vs onnxruntime", tol)
    model.close()


def _close(got: np.ndarray, want: np.ndarray, what: str, tol: dict) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), err_msg=what,
                                   equal_nan=True, **tol)


def first_feeds(feeds_list, inputs) -> dict:
    out = {}
    for f in feeds_list:
        for k, v in f.items():
            if k in inputs and k not in out:
                out[k] = v
    return out


def rand(shape, lo=-3.0, hi=3.0, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def ints(shape, lo=-10, hi=10, dtype=np.int64, seed=0):
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


__all__ = ["Case", "In", "case", "node_model", "check_cases", "check_cases_ref", "ort_run", "assert_close", "rand", "ints",
           "TensorProto", "helper", "numpy_helper", "onnx", "F32", "used_inputs"]
