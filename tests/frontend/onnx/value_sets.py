"""One CPU build over a table of one-node ONNX cases whose run-time values change the output
shapes (test_import_data_dependent.py, test_import_runtime_sizes.py).

A table maps case name -> (op, inputs, attrs, opset, [value sets]); each value set replaces the
first set's arrays. Every case's inputs and outputs are prefixed with its name in the one build;
a run feeds one case's values and every other case's first set (the build needs all its inputs).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
from onnx_cases import node_model

import aitgen as ag
from aitgen.errors import RuntimeInputError
from aitgen.frontend import onnx as ox


def build(cases: dict, workdir, n_out: Callable[[str], int] = lambda op: 1):
    """(model, {case: (outputs, model proto, feeds per value set)}): ONE CPU model over every case."""
    outs, table = {}, {}
    for name, (op, inputs, attrs, opset, sets) in cases.items():
        model = node_model(op, inputs, attrs, opset=opset, n_out=n_out(op))
        ins, got = ox.load(model)
        for n, t in ins.items():
            t.name = f"{name}_{n}"
        for k, t in got.items():
            outs[f"{name}_{k}"] = t
        base = {i.name: i.value for i in inputs if i is not None and not i.const}
        table[name] = (got, model, [{**base, **s} for s in sets])
    return ag.compile_model(outs, target="cpu", workdir=str(workdir)), table


def run_case(m, table: dict, name: str, feeds: dict) -> dict:
    """A run of the model of every case: this case's feeds, the others' first value sets."""
    allf = {f"{c}_{k}": v for c, (_, _, sets) in table.items() for k, v in sets[0].items()}
    allf.update({f"{name}_{k}": v for k, v in feeds.items()})
    return m.run({k: v for k, v in allf.items() if k in m.input_specs})


def check_value_sets(m, table: dict, name: str, expected: Callable, close: Callable) -> set:
    """Each value set of case `name`: the build and the oracle against expected(model, feeds),
    compared by close(got, want, what). Returns the set of output shapes the runs gave."""
    got, model, sets = table[name]
    shapes = set()
    for d, feeds in enumerate(sets):
        ours = run_case(m, table, name, feeds)
        oracle = ag.reference.run(got, {f"{name}_{k}": v for k, v in feeds.items()})
        want = expected(model, feeds)
        for k in got:
            what = f"{name} output {k} (value set {d})"
            close(ours[f"{name}_{k}"], want[k], what)
            close(oracle[k], want[k], what + " (oracle)")
        shapes.add(tuple(ours[f"{name}_{k}"].shape for k in got))
    return shapes


def check_refused(m, table: dict, name: str, bad: dict, msg: str, usable_after: list) -> None:
    """The first value set with `bad` over it: a RuntimeInputError matching msg from the build and
    the oracle; then each feeds of usable_after still runs (a refused run leaves the model usable,
    with the sizes of the next run)."""
    got, _, sets = table[name]
    feeds = {**sets[0], **bad}
    with pytest.raises(RuntimeInputError, match=msg):
        run_case(m, table, name, feeds)
    with pytest.raises(RuntimeInputError, match=msg):
        ag.reference.run(got, {f"{name}_{k}": v for k, v in feeds.items()})
    for feeds in usable_after:
        ok = run_case(m, table, name, feeds)
        assert all(isinstance(v, np.ndarray) for v in ok.values())
