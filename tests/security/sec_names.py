"""Hostile names through compile and run: inputs, outputs, IntVars and the model name each carry one
(sec_payloads). The model must compile, answer like the oracle under the user's names, and report
an out-of-bounds call with a typed error naming the input; names with a NUL are refused; the canary
file must never appear (at build, load, run or a failing run)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import aitgen as ag
from aitgen import ops
from aitgen.errors import AitgenError, InvalidNameError

import sec_payloads


def attack(workdir: str, cli: bool = True) -> dict:
    t0 = time.perf_counter()
    canary = Path(workdir) / "CANARY"
    names = sec_payloads.names(str(canary))
    defects: list[str] = []
    checked = 0
    # Two names per build: an IntVar + an input, an output + the model name. Few builds, every name.
    groups = [names[i:i + 6] for i in range(0, len(names), 6)]
    for g, group in enumerate(groups):
        var = ag.IntVar(group[0], 1, 4)
        inputs = [ag.Tensor([var, 3], "float32", name=n) for n in group]
        outs = {n: ops.relu(t) * 2.0 for n, t in zip(reversed(group), inputs)}
        try:
            model = ag.compile_model(outs, target="cpu", workdir=str(Path(workdir) / f"g{g}"), name=group[-1])
        except Exception as e:  # noqa: BLE001 - any failure here is a defect
            defects.append(f"group {g}: compile raised {type(e).__name__}: {e}")
            continue
        feeds = {n: np.random.default_rng(g).standard_normal((2, 3)).astype(np.float32) for n in group}
        if sorted(model.input_specs) != sorted(group) or sorted(model.output_specs) != sorted(group):
            defects.append(f"group {g}: specs {sorted(model.input_specs)!r} lost the user's names {sorted(group)!r}")
        try:
            got = model.run(feeds)
            want = ag.reference.run(outs, feeds)
            for k in want:
                checked += 1
                if not np.allclose(got[k], want[k], rtol=1e-6, atol=1e-6):
                    defects.append(f"group {g}: output {k!r} differs from the oracle")
        except Exception as e:  # noqa: BLE001
            defects.append(f"group {g}: run raised {type(e).__name__}: {e}")
        bad = {n: np.ones((9, 3), np.float32) for n in group}  # the batch is out of [1, 4]
        try:
            model.run(bad)
            defects.append(f"group {g}: an out-of-bounds batch was accepted")
        except AitgenError as e:
            if group[0] not in str(e) and not any(n in str(e) for n in group):
                defects.append(f"group {g}: the bounds error does not name the input or dim: {e}")
        except Exception as e:  # noqa: BLE001
            defects.append(f"group {g}: out-of-bounds run raised {type(e).__name__}: {e}")
        try:
            model.run(feeds)  # still usable
        except Exception as e:  # noqa: BLE001
            defects.append(f"group {g}: run after a bad call raised {type(e).__name__}: {e}")
        model.close()
        try:
            ag.Model.load(str(Path(workdir) / f"g{g}")).close()
        except Exception as e:  # noqa: BLE001
            defects.append(f"group {g}: reload raised {type(e).__name__}: {e}")
    refused = 0
    for n in sec_payloads.refused():
        for make in (lambda n: ag.Tensor([2], "float32", name=n), lambda n: ag.IntVar(n, 1, 2),
                     lambda n: ag.compile_model({n: ops.relu(ag.Tensor([2], "float32", name="x"))}, target="cpu",
                                                workdir=str(Path(workdir) / "nul"), load=False),
                     lambda n: ag.compile_model({"y": ops.relu(ag.Tensor([2], "float32", name="x"))}, target="cpu",
                                                workdir=str(Path(workdir) / "nul"), name=n, load=False)):
            try:
                make(n)
                defects.append(f"a name with NUL was accepted: {n!r}")
            except InvalidNameError:
                refused += 1
            except Exception as e:  # noqa: BLE001
                defects.append(f"NUL name {n!r} raised {type(e).__name__}, not InvalidNameError: {e}")
    if canary.exists():
        defects.append("the canary appeared: a name ran a command")
    return {"names": len(names), "builds": len(groups), "outputs_checked": checked, "nul_refused": refused,
            "defects": len(defects), "first_defects": defects[:20], "seconds": round(time.perf_counter() - t0, 2)}
