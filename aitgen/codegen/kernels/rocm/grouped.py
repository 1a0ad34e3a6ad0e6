"""GROUPED ops (group_ops: independent ops of one kind) -> ROCm kernels: groups of GEMMs.

A group of GEMMs runs as one launch of our own kernel over Composable Kernel's grouped XDL GEMM
(gemm_ck_grouped.hip.j2, aitgen/ck_grouped.hpp): CK's DeviceGroupedGemm_Xdl computes the
members' descriptors on the host, and they reach the kernel by value in its arguments, not
through CK's workspace and synchronous hipMemcpy, so the launch is ordered on the run's stream
and capturable in a HIP graph.

One launch is one CK instance and one functor, so its members share what CK fixes at compile
time: dtypes, layouts, the epilogue functor and its D tensors' number and dtypes (group_ops
already groups only GEMMs of one dtype, layout and epilogue, with one M), and CK's
HasMainKBlockLoop (a template argument of GridwiseGemm::Run: K above one K block or not). The
members are split by that key here, at build time, so a built model never meets CK's run-time
refusal; a member that shares its key with no other member, needs the separate epilogue pass
(an operand no D tensor reads), or whose K may fall on either side of the K block, runs as its
own GEMM (gemm.gemm_call), as CUDA's lower_grouped_gemm falls back. A launch takes at most
members_per_launch() members, so its descriptors fit the 4 KB of kernel arguments (the template's
static_assert holds the bound); a larger group is several launches.
"""
from __future__ import annotations

import json
from typing import Optional

from ....ir.dims import IntImm
from ....ir.op import Op, OpKind
from ...lower import LowerContext
from ...spec import KernelCall, KernelSpec
from ..common.grouped import register_grouped
from ..gpu.gemm_problem import GemmProblem
from . import configs as ck
from .gemm import AB_DTYPES, CK_TYPE, EpiloguePlan, _limits, dense_result, epilogue_plan, gemm_call, gemm_problem

# Members per launch. One CK descriptor (pointers, padded A/B/D/E tensor descriptors, the tile map),
# measured with hipcc 5.2 / CK b076a02 by tests/backends/rocm/test_rocm_grouped_objects.py: 520 bytes
# without D tensors, 640 with one, 784 / 928 / 1072 with two / three / four (float16 and float32,
# either layout). DESC_BYTES + D_BYTES per D bounds them all; GroupedArgs adds the member count.
KERNEL_ARG_BYTES = 4096
DESC_BYTES = 520
D_BYTES = 144


def members_per_launch(n_d: int) -> int:
    """Most members whose descriptors fit one launch's kernel arguments (7 without D tensors, 5
    with a bias and a residual); the template's static_assert holds it against the real sizeof."""
    return max(1, (KERNEL_ARG_BYTES - 8) // (DESC_BYTES + D_BYTES * n_d))


def k_loop(g: GemmProblem) -> Optional[bool]:
    """CK's HasMainKBlockLoop for every K the problem can bind (K padded to KPerBlock: more than
    one K block), or None where its K range holds both kinds."""
    kpb = ck.k_per_block(g.a.dtype.itemsize)
    lo, hi = -(-g.k.lower // kpb) > 1, -(-g.k.upper // kpb) > 1
    return lo if lo == hi else None


def launch_key(g: GemmProblem, plan: EpiloguePlan) -> Optional[tuple]:
    """What one launch's members must share, or None for a member that runs alone."""
    loop = k_loop(g)
    if plan.apply is not None or loop is None or g.l != IntImm(1) or g.a.dtype not in AB_DTYPES \
            or g.b.dtype != g.a.dtype or g.out.dtype not in CK_TYPE:
        return None
    return (g.a.dtype, g.out.dtype, g.layouts, json.dumps(plan.functor, sort_keys=True),
            tuple(d.tensor.dtype for d in plan.ds), loop)


def grouped_kernel(members: list[GemmProblem], plans: list[EpiloguePlan], arch: str, what: str
                   ) -> tuple[dict, list, list]:
    """(params of gemm_ck_grouped.hip.j2, ptrs, dims) of one launch over `members` (one key)."""
    first = members[0]
    for g in members:
        _limits(what, dict(M=g.m, N=g.n, K=g.k), dict(A=(g.m * g.k, g.a.dtype.itemsize),
                B=(g.k * g.n, g.b.dtype.itemsize), result=(g.m * g.n, g.out.dtype.itemsize)), g.k)
    isz = first.a.dtype.itemsize
    # One instance for every member: each width divides every member's extent (CK checks them all).
    vec_a = ck.vector_width(*[g.m if g.a_col else g.k for g in members], itemsize=isz)
    vec_b = ck.vector_width(*[g.k if g.b_col else g.n for g in members], itemsize=isz)
    ds = [d for pl in plans for d in pl.ds]
    vec_c = ck.vector_width(*[g.n for g in members], *[d.stride_m for d in ds if d.stride_m != IntImm(0)],
                            itemsize=max(t.dtype.itemsize for t in [first.out, *[d.tensor for d in ds]]))
    n_total = members[0].n
    for g in members[1:]:
        n_total = n_total + g.n    # the launch's tiles: every member's, side by side
    inst = ck.choose(arch, first.m, n_total, IntImm(1), not first.a_col, first.b_col, vec_a, vec_b, vec_c, what,
                     itemsize=isz)
    ptrs: list = []
    dims: list = []
    for g, pl in zip(members, plans):
        ptrs += [g.out, g.a, g.b] + [d.tensor for d in pl.ds]
        dims += [g.m, g.n, g.k, g.lda, g.ldb, g.n] + [d.stride_m for d in pl.ds]
    n_d = len(plans[0].ds)
    params = dict(op_label=f"grouped gemm {first.layouts}", ctype=CK_TYPE[first.a.dtype],
                  out_ctype=CK_TYPE[first.out.dtype], layout_a="Col" if first.a_col else "Row",
                  layout_b="Col" if first.b_col else "Row", ds=[CK_TYPE[d.tensor.dtype] for d in plans[0].ds],
                  functor=plans[0].functor, inst=inst, groups=len(members), ptrs=3 + n_d, dims=6 + n_d,
                  main_loop=k_loop(first), n_dims=len(dims))
    return params, ptrs, dims


def lower_grouped_gemm(op: Op, members: list[Op], ctx: LowerContext) -> list[KernelCall]:
    """One launch per key (at most members_per_launch() members each) where two or more members share it,
    else each member's own GEMM kernel."""
    arch = ctx.arch or "gfx90a"
    problems = [gemm_problem(m) for m in members]
    for g in problems:
        dense_result(ctx, g.op, g.out)
    parts: dict[tuple, list[tuple[GemmProblem, EpiloguePlan]]] = {}
    alone: list[GemmProblem] = []
    for g in problems:
        plan = epilogue_plan(g.op, g.out, g.bias, g.extras, g.axes) if g.out.dtype in CK_TYPE else None
        key = launch_key(g, plan) if plan is not None else None
        if key is None:
            alone.append(g)
        else:
            parts.setdefault(key, []).append((g, plan))
    calls: list[KernelCall] = []
    name = op.name or "grouped"
    for part in parts.values():
        most = members_per_launch(len(part[0][1].ds))
        for at in range(0, len(part), most):
            chunk = part[at:at + most]
            if len(chunk) == 1:
                alone.append(chunk[0][0])
                continue
            params, ptrs, dims = grouped_kernel([g for g, _ in chunk], [pl for _, pl in chunk], arch,
                                                f"grouped op '{op.name}'")
            calls.append(KernelCall(KernelSpec.make(ctx.template("gemm_ck_grouped.hip.j2"), **params), ptrs, dims,
                                    name))
    return calls + [c for g in alone for c in gemm_call(ctx, g)]


_MEMBER_LOWERINGS = {
    OpKind.GEMM: lower_grouped_gemm,
}


register_grouped("rocm", "ROCm", _MEMBER_LOWERINGS)
