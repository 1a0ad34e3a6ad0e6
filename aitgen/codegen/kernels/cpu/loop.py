"""LOOP on the CPU: ONE kernel, a host-side C++ loop that calls the body's kernel functions
(backends/cpu/templates/loop.cpp.j2). The body was compiled by codegen/loop_body.py; here it is
lowered with its own memory plan, and each of its calls' pointers becomes a C expression over
the loop kernel's own arguments:

  p = {carried outputs (the state lives there), scan outputs, workspace, [the run's dim table],
       [trip count], [condition], carried initial values, scan inputs, captured values}
  d = {bytes of each carried value, bytes of each scan output's slice, [the trips var's table slot],
       [the count (Scan's length)], bytes of each scan input's slice,
       then every body call's dims, concatenated: body call j reads d + off_j}

so the outer program evaluates the body's sizes with the run's dims, as it does its own. Body
intermediates live in the workspace at their planned offsets; the iteration number and the
condition in slots after them; a scan input's slice is read in place at x + it * slice bytes
(reversed: counted from the end), a scan output of iteration `it` written in place at
out + it * slice bytes (likewise); carried results go to a slot of their own and are copied into the state
after the iteration's calls.
"""
from __future__ import annotations

from ....errors import UnsupportedOpError
from ....ir.dims import prod
from ....ir.op import Op, OpKind
from ...loop_body import workspace_layout
from ...lower import LowerContext, OutputRef, lower_graph, lowering
from ...spec import VARS_PTR, BoundRef, KernelCall, KernelSpec, VarSlot


@lowering("cpu", OpKind.LOOP)
def lower_loop(op: Op, ctx: LowerContext) -> list[KernelCall]:
    a = op.attrs
    if a.plan is None:
        raise UnsupportedOpError(f"op loop '{op.name}': its body was not compiled (codegen/loop_body.py "
                                 "prepare_loops runs before memory planning)")
    body, plan = a.body, a.plan
    lay = workspace_layout(body, plan.arena_bytes, a.n_carried)
    body_calls = lower_graph(body, plan, ctx.backend, arch=ctx.arch, opts=ctx.opts)
    trip, cond, inits, xs, captured = a.split(op.inputs)
    nc, ns = a.n_carried, a.n_scan
    outs = op.outputs[:nc + ns]
    produced = a.trips is not None and any(v.produced for v in a.trips.vars())
    ptrs = [*outs, op.outputs[nc + ns]]
    if produced:
        ptrs.append(VARS_PTR)
    idx_trip = len(ptrs) if trip is not None else None
    ptrs += [trip] if trip is not None else []
    idx_cond = len(ptrs) if cond is not None else None
    ptrs += [cond] if cond is not None else []
    init0 = len(ptrs)
    ptrs += inits
    xs0 = len(ptrs)
    ptrs += xs
    cap0 = len(ptrs)
    ptrs += captured

    dims = [prod(t.shape) * t.dtype.itemsize for t in outs[:nc]]
    dims += [prod(t.shape[1:]) * t.dtype.itemsize for t in outs[nc:]]
    vslot = None
    if produced:
        vslot = len(dims)
        dims.append(VarSlot(a.trips))
    cnt = None
    if a.count is not None:  # Scan: the iterations are the scan length, a size the program evaluates
        cnt = len(dims)
        dims.append(a.count)
    xslice0 = len(dims)
    dims += [prod(x.shape[1:]) * x.dtype.itemsize for x in xs]
    nx = len(xs)
    out_rev = a.scan_out_reverse or (False,) * ns

    names = list(body.outputs)
    in_idx = {id(t): i for i, t in enumerate(body.inputs)}
    out_idx: dict[int, int] = {}
    for j, t in enumerate(body.outputs.values()):
        if t.producer is not None:
            out_idx.setdefault(id(t), j)

    def dest(j: int) -> str:
        if j == 0:
            return f"ws + {lay.cond_out}"
        if j <= nc:
            return f"ws + {lay.next[j - 1]}"
        at = "(trips - 1 - it)" if out_rev[j - 1 - nc] else "it"   # reversed: filled from the end
        return f"static_cast<char*>(p[{j - 1}]) + {at} * d[{j - 1}]"   # scan output j-1-nc is p[j-1]

    def source(i: int) -> str:
        if i == 0:
            return f"ws + {lay.iteration}"
        if i == 1:
            return f"ws + {lay.cond_in}"
        if i < 2 + nc:
            return f"p[{i - 2}]"
        if i < 2 + nc + nx:  # a scan input's slice of this iteration, read in place
            j = i - 2 - nc
            at = "(trips - 1 - it)" if a.scan_in_reverse[j] else "it"
            return f"static_cast<char*>(p[{xs0 + j}]) + {at} * d[{xslice0 + j}]"
        return f"p[{cap0 + i - 2 - nc - nx}]"

    def ptr(t) -> str:
        if t is None or isinstance(t, BoundRef):  # bound slots link only in the top-level sequence
            return "nullptr"
        if isinstance(t, OutputRef):
            return dest(names.index(t.name))
        if isinstance(t, str):  # VARS_PTR: refused by prepare_loops already
            raise UnsupportedOpError(f"op loop '{op.name}': a body kernel writes the run's dim table")
        if id(t) in out_idx:
            return dest(out_idx[id(t)])
        if t in plan.offsets:
            return f"ws + {plan.offsets[t]}"
        ext = plan.external(t)
        if id(ext) in in_idx:
            return source(in_idx[id(ext)])
        if id(ext) in out_idx:
            return dest(out_idx[id(ext)])
        raise UnsupportedOpError(f"op loop '{op.name}': body tensor '{t.name}' has no storage")

    calls, nested = [], []
    for c in body_calls:
        calls.append({"func": c.spec.func, "comment": c.op, "ptrs": [ptr(t) for t in c.ptrs], "off": len(dims)})
        dims += c.dims
        nested += [c.spec, *c.nested]
    spec = KernelSpec.make(ctx.template("loop.cpp.j2"), label=a.label or op.name or "loop", calls=calls,
                           funcs=sorted({c["func"] for c in calls}), n_carried=nc, ws=nc + ns,
                           vars=nc + ns + 1 if produced else None, vslot=vslot, trip=idx_trip, cond=idx_cond, cnt=cnt,
                           init0=init0, max_trips=a.max_trips, iteration=lay.iteration, cond_in=lay.cond_in,
                           cond_out=lay.cond_out, next=list(lay.next))
    writes = list(range(nc + ns + 1)) + ([nc + ns + 1] if produced else [])
    return [KernelCall(spec, ptrs, dims, op.name or op.kind.value, writes=writes, nested=nested)]
