"""The bodies of LOOP ops (aitgen/ops/loop.py), compiled with the outer target before memory planning.

compile_model calls prepare_loops on the graph the pipeline gave. For each LOOP it runs the pass
pipeline on a copy of the body (the import-time body is shared with the user's graph), lifts the
body's constants into the outer graph (they become captured inputs, so the model's weights file
holds them and set_constants reaches them), plans the body's memory in an arena of its own, and
gives the op a workspace output that holds that arena plus the loop's own slots (workspace_layout).
The backend's LOOP lowering (codegen/kernels/cpu/loop.py) then lowers the body with that plan.
"""
from __future__ import annotations

import dataclasses

from ..errors import UnsupportedOpError
from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from ..memory import align, plan_memory
from ..options import CompileOptions
from .lower import BINDS_SIZES, capabilities

# Kernels that write the run's dim table (sizes produced during the run): a body would need its own.
_BINDS = BINDS_SIZES | {OpKind.LOOP}


@dataclasses.dataclass(frozen=True)
class WorkspaceLayout:
    """Byte offsets in a LOOP's workspace: the body's arena at 0, then the iteration number, the
    condition given to the body and the one it gives back, then one slot per carried value where
    the body writes its next value (copied into the state after each iteration: the body still
    reads the state while it writes)."""
    iteration: int
    cond_in: int
    cond_out: int
    next: tuple
    total: int


def workspace_layout(body: Graph, arena_bytes: int, n_carried: int) -> WorkspaceLayout:
    base = align(arena_bytes)
    off = base + 64
    nxt = []
    for t in list(body.outputs.values())[1:1 + n_carried]:
        nxt.append(off)
        off += align(max(t.nbytes_upper(), 1))
    return WorkspaceLayout(base, base + 8, base + 16, tuple(nxt), off)


def _label(op) -> str:
    return f"op loop '{op.name}'"


def prepare_loops(graph: Graph, opts: CompileOptions) -> Graph:
    """Compile every LOOP's body for opts' target (see the module docstring); the graph, renamed."""
    from ..passes import PIPELINE, name_graph, run_passes
    loops = [op for op in graph.ops if op.kind is OpKind.LOOP and not op.attrs.workspace]
    if not loops:
        return graph
    target = opts.caps.target if opts.caps is not None else "cpu"
    if OpKind.LOOP not in capabilities(target).kinds:
        raise UnsupportedOpError(f"{_label(loops[0])} has no {target} kernel yet: Loop runs on the CPU backend "
                                 "(target='cpu'), as a host-side loop over its compiled body")
    if opts.precision == "int8":
        raise UnsupportedOpError(f"{_label(loops[0])}: precision='int8' calibrates the outer graph only; "
                                 "a loop body is not quantised")
    for op in loops:
        a = op.attrs
        body = run_passes(a.body.copy(), opts, PIPELINE).graph
        lifted = [t for t in body.tensors if t.is_constant]
        for k, c in enumerate(lifted):
            p = Tensor(c.shape, c.dtype, name=f"lifted_{k}")
            body.replace_all_uses(c, p)
            body.inputs.append(p)
        body.sort()
        name_graph(body, opts)
        for b in body.ops:
            if b.kind in _BINDS:
                raise UnsupportedOpError(f"{_label(op)}: its body runs {b.kind.value} '{b.name}', which binds "
                                         "sizes during the run; a loop body must keep its shapes")
        plan = plan_memory(body, opts.caps)
        layout = workspace_layout(body, plan.arena_bytes, a.n_carried)
        op.attrs = dataclasses.replace(a, body=body, plan=plan, workspace=layout.total)
        for c in lifted:
            op.inputs.append(c)
            if not any(u is op for u in c.users):
                c.users.append(op)
        op.outputs.append(Tensor([layout.total], DType.uint8, producer=op))
    graph.sort()
    return name_graph(graph, opts)
