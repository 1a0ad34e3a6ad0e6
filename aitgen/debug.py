"""Numerical bisect: which tensor of the compiled model is the first to go wrong?

`bisect` compiles the model with every intermediate of the optimised graph exposed as an extra
output (a pass appended after PIPELINE, before memory planning), runs it, evaluates the very same
optimised graph with the numpy oracle, and walks the tensors in schedule order: the first whose
compiled value differs from the oracle's beyond tolerance names the kernel at fault, since every
tensor before it was still right. For each op it also reruns the oracle on the *compiled* operands
(the local error): a kernel that is wrong on its own shows a local error; one that only inherits
drift from upstream shows none.

A wrong pass is a different bug: the compiled model may then match the optimised graph while both
differ from the graph the user wrote. So the final outputs are also compared with the oracle of
the original graph, and when they differ the passes are replayed one by one under the oracle to
name the first that changes the answer.

Exposing every tensor puts each in its own output buffer, which changes the memory plan: a bug
that only an overlap in the arena causes can hide under the bisect (build without it and compare
outputs to see one).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from .ir.graph import Graph, Outputs
from .options import CompileOptions

PREFIX = "dbg_"  # exposed intermediates are outputs named PREFIX + tensor name


@dataclasses.dataclass
class TensorError:
    """One tensor of the optimised graph, compiled vs oracle."""
    step: int                   # index of its producer in the schedule
    tensor: str
    op: str                     # producing op's name
    kind: str                   # producing op's kind
    shape: tuple[int, ...]
    dtype: str
    max_abs: float              # max |compiled - oracle|
    max_rel: float              # max |compiled - oracle| / |oracle| (where the oracle is non-zero)
    ok: bool                    # within atol + rtol * |oracle| everywhere, NaNs in the same places
    local_max_abs: Optional[float] = None  # the op rerun by the oracle on the compiled operands
    local_ok: Optional[bool] = None
    inputs: list[str] = dataclasses.field(default_factory=list)    # operands' names
    feeding: list[str] = dataclasses.field(default_factory=list)   # "kind name" of their producers
    fused: Optional[list[str]] = None  # kinds a fused op absorbed

    def describe(self) -> str:
        fused = f" (fused: {', '.join(self.fused)})" if self.fused else ""
        local = ""
        if self.local_ok is not None:
            local = ("; the op alone is wrong" if not self.local_ok else
                     "; the op alone is right (the error flows in from its operands)")
        return (f"'{self.tensor}' {self.dtype}{list(self.shape)} from {self.kind} '{self.op}'{fused} at step "
                f"{self.step}: max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}{local}; "
                f"fed by {', '.join(self.feeding) or 'nothing'}")


@dataclasses.dataclass
class BisectResult:
    first: Optional[TensorError]   # the first divergent tensor in schedule order, None if all agree
    errors: list[TensorError]      # every compared tensor, schedule order
    outputs_ok: bool               # the optimised graph's oracle equals the original graph's
    bad_pass: Optional[str]        # the first pass after which the oracle's outputs change
    rtol: float
    atol: float
    workdir: str

    @property
    def ok(self) -> bool:
        return self.first is None and self.outputs_ok

    def summary(self) -> str:
        lines = []
        if self.first is not None:
            lines.append("first divergent tensor: " + self.first.describe())
        if not self.outputs_ok:
            lines.append("the optimised graph's outputs differ from the original graph's under the oracle"
                         + (f"; first changed by pass '{self.bad_pass}'" if self.bad_pass else ""))
        if not lines:
            lines.append(f"no divergence: {len(self.errors)} tensors within rtol={self.rtol:g}, "
                         f"atol={self.atol:g}")
        return "\n".join(lines)


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[float, float, bool]:
    """(max abs error, max rel error, within tolerance) — integers and bools must match exactly.

    Floats pass where |got - want| <= atol * scale + rtol * |want|, scale = max(max |want|, 1), as
    the zoo tests compare: kernels sum in another order than numpy, and an element that cancels to
    near zero (a GPT-2 logit among values in the hundreds) keeps the rounding of its largest terms."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf"), float("inf"), False
    if want.size == 0:
        return 0.0, 0.0, True
    if want.dtype.kind not in "fc" and want.dtype.kind != "V":  # V: ml_dtypes' bfloat16 and float8 are floats
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        return float(diff.max()), float(diff.max()), bool(np.array_equal(got, want))
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan_same = np.array_equal(np.isnan(g), np.isnan(w))
    finite = np.isfinite(g) & np.isfinite(w)
    diff = np.where(finite, np.abs(g - w), 0.0)
    inf_same = np.array_equal(np.where(finite, 0, g), np.where(finite, 0, w), equal_nan=True)
    nz = finite & (w != 0)
    rel = float((diff[nz] / np.abs(w[nz])).max()) if nz.any() else 0.0
    mag = np.abs(np.where(finite, w, 0.0))
    scale = max(float(mag.max()), 1.0)
    ok = nan_same and inf_same and bool(np.all(diff <= atol * scale + rtol * mag))
    return float(diff.max()), rel, ok


def _exposer(keep: list):
    """A pass that adds every op result to graph.outputs (the run order is left as it is: graph.ops
    is not re-sorted) and hands the graph to `keep`, so the oracle can evaluate the same object."""
    def expose_intermediates(graph: Graph, opts: CompileOptions) -> Graph:
        taken = set(graph.outputs)
        have = {id(t) for t in graph.outputs.values()}
        for op in graph.ops:
            for t in op.outputs:
                if id(t) in have:
                    continue
                key, n = PREFIX + (t.name or "t"), 1
                while key in taken:
                    key, n = f"{PREFIX}{t.name}_{n}", n + 1
                taken.add(key)
                have.add(id(t))
                graph.outputs[key] = t
                t.is_output = True
        keep.append(graph)
        return graph
    return expose_intermediates


def bisect(outputs: Union[Outputs, Graph], feeds: Optional[Mapping[str, np.ndarray]] = None, *,
           target: str = "cpu", workdir: Union[str, Path] = "build/bisect", rtol: float = 1e-4,
           atol: float = 1e-5, fusion: bool = True, check_passes: bool = True) -> BisectResult:
    """Build `outputs` with every intermediate exposed, run it on `feeds` (random inputs at their
    max shapes when None) and name the first tensor whose value differs from the oracle's."""
    from . import reference
    from .compiler import compile_model
    from .codegen.report import fused_kinds

    original = outputs.copy() if isinstance(outputs, Graph) else Graph.from_outputs(outputs)
    kept: list[Graph] = []
    model = compile_model(original, target=target, workdir=workdir, fusion=fusion,
                          extra_passes=[_exposer(kept)])
    graph = kept[0]
    try:
        feeds = dict(feeds) if feeds is not None else random_inputs(model.input_specs)
        got = model.run(feeds)
    finally:
        model.close()
    # The compiled graph renamed its inputs (name_graph); the runtime and this graph take the new
    # names, the original graph its own.
    renamed = graph.annotations.get("renamed", {})
    new_of = {old: new for new, old in renamed.items()}
    feeds_new = {new_of.get(k, k): v for k, v in feeds.items()}
    feeds_old = {renamed.get(k, k): v for k, v in feeds.items()}
    tensors = [t for op in graph.ops for t in op.outputs]
    want = reference.evaluate(graph, feeds_new, keep=tensors)
    values, env = reference.bind_dims(graph.inputs, feeds_new)
    key_of = {id(t): k for k, t in graph.outputs.items()}
    compiled = {id(t): got[key_of[id(t)]] for t in tensors}

    errors: list[TensorError] = []
    for step, op in enumerate(graph.ops):
        local = _local(op, compiled, values, env, rtol, atol)
        for i, t in enumerate(op.outputs):
            mabs, mrel, ok = compare(compiled[id(t)], want[id(t)], rtol, atol)
            errors.append(TensorError(
                step, t.name, op.name or op.kind.value, op.kind.value, tuple(want[id(t)].shape), t.dtype.value,
                mabs, mrel, ok, None if local is None else local[i][0], None if local is None else local[i][1],
                [x.name for x in op.inputs],
                [(f"{x.producer.kind.value} '{x.producer.name}'" if x.producer is not None else
                  ("constant" if x.is_constant else "input") + f" '{x.name}'") for x in op.inputs],
                fused_kinds(op.attrs)))
    first = next((e for e in errors if not e.ok), None)

    outputs_ok, bad_pass = True, None
    if check_passes:
        outputs_ok, bad_pass = _check_passes(original, feeds_old, graph, want, fusion, target, rtol, atol)
    return BisectResult(first, errors, outputs_ok, bad_pass, rtol, atol, str(workdir))


def random_inputs(specs, seed: int = 0) -> dict:
    """Inputs at their max shapes: integers in [0, 100) (valid token ids for every zoo model),
    booleans at random, floats from N(0, 1). As in examples/run_model.py, an `attention_mask` is
    ones and `token_type_ids` zeros: BERT has two token types, so random ids would be refused."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in specs.items():
        dt = np.dtype(spec.dtype.np)
        if name in ("attention_mask", "token_type_ids"):
            feeds[name] = np.full(spec.max_shape, 1 if name == "attention_mask" else 0, dt)
        elif dt.kind in "iu":
            feeds[name] = rng.integers(0, 100, spec.max_shape).astype(dt)
        elif dt.kind == "b":
            feeds[name] = rng.integers(0, 2, spec.max_shape).astype(dt)
        else:
            feeds[name] = rng.standard_normal(spec.max_shape).astype(dt)
    return feeds


def _local(op, compiled, inputs, env, rtol, atol) -> Optional[list[tuple[float, bool]]]:
    """The op's oracle on the compiled operands vs the compiled results; None if it can't run."""
    from .reference import eval_op
    args = []
    for x in op.inputs:
        if id(x) in compiled:
            args.append(compiled[id(x)])
        elif x.is_constant:
            args.append(x.value)
        elif id(x) in inputs:
            args.append(inputs[id(x)])
        else:
            return None
    try:
        res = eval_op(op, args, env)
    except Exception:  # noqa: BLE001 - a local check is a hint; the global comparison decides
        return None
    out = []
    for t, r in zip(op.outputs, res):
        mabs, _, ok = compare(compiled[id(t)], r, rtol, atol)
        out.append((mabs, ok))
    return out


def _check_passes(original: Graph, feeds, optimised: Graph, want, fusion: bool, target: str,
                  rtol: float, atol: float) -> tuple[bool, Optional[str]]:
    """Does the oracle give the same outputs for the original and the optimised graph? If not,
    replay PIPELINE one pass at a time and name the first after which they change."""
    from . import reference
    from .compiler import compile_options
    from .passes import PIPELINE

    base = reference.evaluate(original, feeds)
    names = list(original.outputs)

    def same(g: Graph, vals) -> bool:
        return all(compare(vals[id(g.outputs[k])], base[id(original.outputs[k])], rtol, atol)[2]
                   for k in names)

    if same(optimised, want):
        return True, None
    opts = compile_options(target, fusion=fusion)
    g = original.copy()
    for fn in PIPELINE:
        g = fn(g, opts)
        renamed = g.annotations.get("renamed", {})
        new_of = {old: new for new, old in renamed.items()}
        if not same(g, reference.evaluate(g, {new_of.get(k, k): v for k, v in feeds.items()})):
            return False, getattr(fn, "__name__", str(fn))
    return False, None


def format_errors(result: BisectResult, limit: Optional[int] = None) -> str:
    """A table of the per-tensor errors, schedule order; `limit` rows around the first divergence."""
    rows, note = result.errors, ""
    if limit is not None and len(rows) > limit:
        at = rows.index(result.first) if result.first is not None else 0
        lo = max(0, min(at - limit // 2, len(rows) - limit))
        rows = rows[lo:lo + limit]
        note = f"\n({len(result.errors) - limit} of {len(result.errors)} tensors not shown)"
    w = max([len(e.tensor) for e in rows] + [6])
    k = max([len(e.kind) for e in rows] + [4])
    lines = [f"{'step':>4}  {'tensor':<{w}}  {'kind':<{k}}  {'max abs':>9}  {'max rel':>9}  {'local':>9}  status"]
    for e in rows:
        local = "-" if e.local_max_abs is None else f"{e.local_max_abs:9.3g}"
        status = "ok" if e.ok else ("DIVERGES" + (" (op wrong)" if e.local_ok is False else ""))
        mark = " <== first" if e is result.first else ""
        lines.append(f"{e.step:>4}  {e.tensor:<{w}}  {e.kind:<{k}}  {e.max_abs:9.3g}  {e.max_rel:9.3g}  "
                     f"{local:>9}  {status}{mark}")
    return "\n".join(lines) + note
