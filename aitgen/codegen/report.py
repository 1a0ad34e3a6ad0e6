"""<workdir>/report.json: what the build did, in numbers (keys listed in DESIGN.md)."""
from __future__ import annotations

import json
from pathlib import Path

from ..ir.graph import Graph


def write_report(workdir: Path, graph: Graph, *, num_ops: int, calls, unique_kernels: int, build,
                 seconds: float, target: str) -> dict:
    plan = graph.annotations["memory_plan"]
    report = {
        "target": target,
        "num_ops": num_ops,
        "num_kernels": len(calls),
        "unique_kernels": unique_kernels,
        "activation_bytes": plan.arena_bytes,
        "activation_lower_bound_bytes": plan.lower_bound_bytes,
        "activation_naive_bytes": plan.naive_bytes,
        "constant_bytes": sum(int(t.value.nbytes) for t in graph.tensors if t.is_constant),
        "cache_hits": build.cache_hits,
        "cache_misses": build.cache_misses,
        "build_seconds": round(seconds, 3),
        "compile_seconds": round(build.seconds, 3),
        "passes": [{"name": r.name, "seconds": round(r.seconds, 6), "ops_after": r.ops_after}
                   for r in graph.annotations.get("pass_records", [])],
        "kernels": [{"op": c.op, "func": c.spec.func, "template": c.spec.template} for c in calls],
    }
    (workdir / "report.json").write_text(json.dumps(report, indent=1))
    return report
