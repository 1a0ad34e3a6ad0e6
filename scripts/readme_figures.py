"""Print the figures README.md quotes: kernels and activation memory of BERT-base and ResNet-50.

    python scripts/readme_figures.py            # the text README.md quotes verbatim
    python scripts/readme_figures.py --json     # the same figures as JSON

Each line comes from `<workdir>/report.json` of a real CPU build (`compile_model(..., target="cpu",
load=False)`), with fusion and without, at the zoo's default size (batch 1; BERT seq 128, ResNet
224x224). The first is the build `python examples/run_model.py bert_base` makes where no GPU answers,
so the two print the same numbers. About 40 s with a cold kernel cache on 2 shared cores; warm, most
of it is writing the weights (BERT-base's are 416 MiB; each build is removed once read, unless
--workdir keeps them).
tests/test_readme.py (slow tier) checks README.md against this output.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import aitgen as ag

# (label, zoo name, configuration, compile_model keywords); the README's figures, in its order.
BUILDS = [
    ("bert_base (batch 1, seq 128)", "bert_base", {}, {}),
    ("bert_base without fusion", "bert_base", {}, {"fusion": False}),
    ("resnet50 (batch 1, 224x224)", "resnet50", {}, {}),
    ("resnet50 without fusion", "resnet50", {}, {"fusion": False}),
]
MIB = 1 << 20


def figures(workroot: Path, keep: bool = False) -> list[dict]:
    rows = []
    for i, (label, name, config, kw) in enumerate(BUILDS):
        _, outputs = ag.models.get(name, **config)
        workdir = workroot / f"{i}_{name}"
        ag.compile_model(outputs, target="cpu", workdir=str(workdir), load=False, **kw)
        report = json.loads((workdir / "report.json").read_text())
        if not keep:
            shutil.rmtree(workdir)
        rows.append({"label": label, "model": name, "fusion": kw.get("fusion", True), **{
            k: report[k] for k in ("num_ops", "num_kernels", "unique_kernels", "activation_bytes",
                                   "activation_lower_bound_bytes", "activation_naive_bytes", "constant_bytes")}})
    return rows


def text(row: dict) -> str:
    return (f"{row['label']}: {row['num_ops']} ops -> {row['num_kernels']} kernel launches per run, "
            f"{row['unique_kernels']} unique kernels; arena {row['activation_bytes'] / MIB:.2f} MiB "
            f"(lower bound {row['activation_lower_bound_bytes'] / MIB:.2f} MiB, "
            f"naive sum {row['activation_naive_bytes'] / MIB:.2f} MiB)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the README's text")
    ap.add_argument("--workdir", help="build under this folder and keep the builds (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aitgen_figures_") as tmp:
        rows = figures(Path(args.workdir or tmp), keep=args.workdir is not None)
    print(json.dumps(rows, indent=1) if args.json else "\n".join(map(text, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
