"""Mutated ONNX models through the importer (and a fixed share through a CPU build and a run): every
outcome is a model that loads (and computes what the oracle computes) or a typed aitgen error.
Mutations: the structural ones of tests/frontend/onnx/test_fuzz.py, plus hostile names for values,
inputs, outputs and dim_params (sec_payloads)."""
from __future__ import annotations

import collections
import copy
import importlib.util
import time
from pathlib import Path

import numpy as np

import aitgen as ag
from aitgen.errors import AitgenError

import sec_payloads

_FUZZ = Path(__file__).resolve().parents[1] / "frontend" / "onnx" / "test_fuzz.py"


def _structural():
    spec = importlib.util.spec_from_file_location("onnx_fuzz_mutations", _FUZZ)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rename(m, rng, names):
    """Give a random value (graph input, node output or initializer) a hostile name everywhere."""
    pool = [vi.name for vi in m.graph.input] + [o for n in m.graph.node for o in n.output]
    old = pool[int(rng.integers(len(pool)))]
    new = names[int(rng.integers(len(names)))]
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        if vi.name == old:
            vi.name = new
    for t in m.graph.initializer:
        if t.name == old:
            t.name = new
    for n in m.graph.node:
        for field in (n.input, n.output):
            for i, v in enumerate(field):
                if v == old:
                    field[i] = new


def _dim_param(m, rng, names):
    dims = [d for vi in m.graph.input for d in vi.type.tensor_type.shape.dim]
    if dims:
        dims[int(rng.integers(len(dims)))].dim_param = names[int(rng.integers(len(names)))]


def fuzz(workdir: str, n: int = 1000, n_builds: int = 8, seed: int = 0) -> dict:
    fz = _structural()
    canary = str(Path(workdir) / "CANARY")
    names = sec_payloads.names(canary) + sec_payloads.refused()
    bases = fz.base_models()
    rng = np.random.default_rng(seed)
    counts: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    defects, loaded = [], []
    t0 = time.perf_counter()
    for k in range(n):
        bi = int(rng.integers(len(bases)))
        label = f"base{bi}/#{k}"
        if k % 4 == 0:
            obj = fz._bytes(bases[bi], rng)
            label += "/bytes"
        else:
            obj = copy.deepcopy(bases[bi])
            muts = ([_rename, _dim_param][int(rng.integers(2))],) if k % 4 == 1 else \
                tuple(fz.MUTATIONS[int(rng.integers(len(fz.MUTATIONS)))] for _ in range(int(rng.integers(1, 3))))
            for f in sorted(muts, key=lambda f: f is fz._no_graph):
                if obj.graph.node and obj.graph.input:
                    f(obj, rng, names) if f in (_rename, _dim_param) else f(obj, rng)
            label += "/" + "+".join(f.__name__.strip("_") for f in muts)
        try:
            res = ag.frontend.onnx.load(obj)
        except AitgenError as e:
            counts["typed"] += 1
            errors[type(e).__name__] += 1
            continue
        except Exception as e:  # noqa: BLE001 - the defect being counted
            defects.append(f"{label}: load raised {type(e).__name__}: {e}")
            continue
        counts["loaded"] += 1
        loaded.append((label, res))
    # A fixed share of what loads is built and run; hostile-name mutants first (they test codegen).
    loaded.sort(key=lambda lr: ("rename" not in lr[0] and "dim_param" not in lr[0], lr[0]))
    for j, (label, (inputs, outputs)) in enumerate(loaded[:n_builds]):
        try:
            model = ag.compile_model(outputs, target="cpu", workdir=str(Path(workdir) / f"m{j}"))
        except AitgenError as e:
            counts["build_typed"] += 1
            errors[type(e).__name__] += 1
            continue
        except Exception as e:  # noqa: BLE001
            defects.append(f"{label}: build raised {type(e).__name__}: {e}")
            continue
        feeds = {name: np.random.default_rng(j).standard_normal(
            [d.value if d.is_static else min(d.upper, 2) for d in t.shape]).astype(t.dtype.np)
            for name, t in inputs.items() if name in model.input_specs}
        try:
            got = model.run(feeds)
            want = ag.reference.run(outputs, feeds)
            ok = all(np.allclose(got[k2], want[k2], rtol=1e-4, atol=1e-4, equal_nan=True) for k2 in want)
            counts["built_right" if ok else "built_wrong"] += 1
            if not ok:
                defects.append(f"{label}: wrong answer")
        except AitgenError as e:
            counts["run_typed"] += 1
            errors[type(e).__name__] += 1
        except Exception as e:  # noqa: BLE001
            defects.append(f"{label}: run raised {type(e).__name__}: {e}")
        model.close()
    if Path(canary).exists():
        defects.append("the canary appeared: a name ran a command")
    return {"mutants": n, **dict(counts), "errors": dict(errors), "defects": len(defects),
            "first_defects": defects[:20], "seconds": round(time.perf_counter() - t0, 2)}
