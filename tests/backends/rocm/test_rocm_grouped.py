"""ROCm grouped GEMM (horizontal fusion) without an AMD GPU, render level: parallel linear layers
with bias + GELU + residual become ONE launch of gemm_ck_grouped.hip.j2 with each member's
pointers and sizes in order; members CK cannot run in one launch (another K-loop kind, an operand
only the epilogue pass reads) fall back to their own GEMMs; kernel counts against CUDA's; the
rendered source launches by value, with no hipMemcpy or workspace. The hipcc tier:
test_rocm_grouped_objects.py."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen._paths import backends_dir
from aitgen.codegen.kernels.rocm import grouped as grouped_k
from aitgen.codegen.lower import capabilities, lower_graph
from aitgen.compiler import compile_options
from aitgen.ir.dims import IntImm
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.memory import plan_memory
from aitgen.ops.grouped import member_ops
from aitgen.passes import PIPELINE, run_pipeline

from ck_helpers import _const, ffn, lowered, source


def towers(n_members=3, k=256, n=512, dt="float16", m=None, ks=None):
    """`n_members` parallel Linear layers over one input (an MLP's heads): gelu(x W_i^T + b_i) + r_i."""
    rng = np.random.default_rng(3)
    m = m if m is not None else ag.IntVar("tokens", 1, 512)
    outs, xs = {}, {}
    for i in range(n_members):
        ki = ks[i] if ks else k
        x = xs.setdefault(ki, ag.Tensor([m, ki], dtype=dt, name=f"x{ki}"))
        r = ag.Tensor([m, n], dtype=dt, name=f"r{i}")
        outs[f"y{i}"] = ops.gelu(ops.linear(x, _const((n, ki), rng, dt=dt), _const((n,), rng, dt=dt))) + r
    return outs


def lower_for(outs, target, arch):
    opts = compile_options(target=target, arch=arch)
    g = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    return g, lower_graph(g, plan_memory(g, opts.caps), target, arch=arch, opts=opts)


def test_rocm_declares_grouped_gemm():
    assert OpKind.GEMM in capabilities("rocm").grouped


@pytest.mark.parametrize("n_members", [2, 3, 4])
def test_parallel_linears_are_one_grouped_launch(n_members):
    outs = towers(n_members)
    g, calls = lowered(outs)
    assert [op.kind for op in g.ops] == [OpKind.GROUPED]
    (call,) = calls
    p = call.spec.param_dict()
    assert call.spec.template == "rocm/templates/gemm_ck_grouped.hip.j2"
    assert p["groups"] == n_members and (p["ptrs"], p["dims"]) == (5, 8)   # out, A, B, bias, residual
    assert p["ds"] == ["ck::half_t", "ck::half_t"] and p["main_loop"] is True    # K 256 > 32: 8 K blocks
    assert len(call.ptrs) == 5 * n_members and len(call.dims) == 8 * n_members == p["n_dims"]
    (member,) = g.ops
    members = member_ops(member)
    for i, mop in enumerate(members):
        ptrs, dims = call.ptrs[5 * i:5 * i + 5], call.dims[8 * i:8 * i + 8]
        out, x, w, b, r = mop.outputs[0], *mop.inputs
        # each member's own tensors, in the functor's order
        assert all(got is want for got, want in zip(ptrs, [out, x, w, b, r]))
        assert out.name == f"y{i}" and x.name == "x256" and r.name == f"r{i}" and w.is_constant
        assert [str(d) for d in dims] == ["tokens", "512", "256", "256", "256", "512", "0", "512"]
    # the epilogue: gelu(acc + bias) + residual, the very functor the lone GEMM renders
    (plain,) = lowered(ffn(k=256, n=512))[1]
    assert p["functor"] == plain.spec.param_dict()["functor"] and len(p["functor"]["params"]) == 3
    assert any("erf" in f for f in p["functor"]["functions"])


def test_rendered_source_launches_by_value_on_the_stream():
    (call,) = lowered(towers(3))[1]
    src = source(call)
    block = call.spec.param_dict()["inst"]["block"]
    assert "DeviceGroupedGemm_Xdl<" in src and f"run_grouped<Instance, kGroups, {block}, true>" in src
    assert "kGroups = 3;" in src and "kPtrs = 5;" in src and "kDims = 8;" in src
    assert "hipMemcpy" not in src and "Invoker" not in src
    header = backends_dir() / "rocm" / "include" / "aitgen" / "ck_grouped.hpp"
    code = "\n".join(ln for ln in header.read_text().splitlines() if not ln.lstrip().startswith("//"))
    assert "hipMemcpy" not in code and "workspace" not in code
    assert "hipLaunchKernelGGL" in code and "::ait::gpu::stream()" in code
    assert "static_assert(sizeof(Args) <= kMaxKernelArgBytes" in code


def test_instance_fits_every_member():
    """One instance's vector widths divide every member's K and N (CK's IsSupportedArgument checks
    each member's), so one member with K = 100 makes A's vectors 4 wide for the whole launch."""
    (call,) = lowered(towers(3, ks=[256, 100, 256]))[1]
    p = call.spec.param_dict()
    assert p["inst"]["a"]["src_vec"] == 4 and p["groups"] == 3
    ks = [int(call.dims[8 * i + 2]) for i in range(3)]
    assert ks == [256, 100, 256] and all(k % p["inst"]["a"]["src_vec"] == 0 for k in ks)


def test_k_loop_kinds_split_the_launch():
    """CK's GridwiseGemm::Run takes HasMainKBlockLoop as a template argument, one per launch:
    K <= 32 (one K block of fp16) and K > 32 never share one; the lone member is its own GEMM."""
    g, calls = lowered(towers(3, ks=[256, 32, 128]))
    assert [op.kind for op in g.ops] == [OpKind.GROUPED]
    kinds = [c.spec.template.rsplit("/", 1)[-1] for c in calls]
    assert kinds == ["gemm_ck_grouped.hip.j2", "gemm_ck.hip.j2"]
    grouped, alone = calls
    assert grouped.spec.param_dict()["groups"] == 2 and grouped.spec.param_dict()["main_loop"] is True
    assert [int(grouped.dims[8 * i + 2]) for i in range(2)] == [256, 128]
    assert int(alone.dims[2]) == 32
    # two of each kind: two launches
    _, calls = lowered(towers(4, ks=[256, 32, 128, 16]))
    loops = sorted(c.spec.param_dict()["main_loop"] for c in calls)
    assert len(calls) == 2 and loops == [False, True]


def test_k_loop_of_a_symbolic_k():
    def problem(lo, hi):
        k = ag.IntVar("k", lo, hi)
        op = ops.linear(ag.Tensor([4, k], dtype="float16", name="x"), ag.Tensor([8, k], dtype="float16", name="w"))
        return grouped_k.gemm_problem(op.producer)
    assert grouped_k.k_loop(problem(33, 64)) is True and grouped_k.k_loop(problem(1, 32)) is False
    assert grouped_k.k_loop(problem(16, 64)) is None       # either kind at run time: the member runs alone


def test_member_needing_the_epilogue_pass_falls_back():
    """A per-row scale (one value per M, no D form) needs the in-place pass: those members run as
    their own GEMM + pass; the group's other members still share one launch."""
    rng = np.random.default_rng(4)
    m = ag.IntImm(64)
    x = ag.Tensor([m, 256], dtype="float16", name="x")
    row = ag.Tensor([m, 1], dtype="float16", name="row")
    outs = {f"y{i}": ops.relu(ops.linear(x, _const((256, 256), rng), _const((256,), rng)) * row) for i in range(2)}
    g, calls = lowered(outs)
    assert any(op.kind is OpKind.GROUPED for op in g.ops)
    kinds = [c.spec.template.rsplit("/", 1)[-1] for c in calls]
    assert kinds == ["gemm_ck.hip.j2", "gemm_ck_apply.hip.j2"] * 2


def test_large_groups_split_at_the_kernel_argument_bound():
    """Descriptors of 784 bytes (bias and residual: two D tensors) fit five to 4 KB of arguments."""
    assert [grouped_k.members_per_launch(n) for n in range(5)] == [7, 6, 5, 4, 3]
    g, calls = lowered(towers(8, n=128))
    assert [c.spec.param_dict()["groups"] for c in calls] == [5, 3]
    assert sum(len(c.ptrs) for c in calls) == 5 * 8
    # six members: five and a lone one, which is its own GEMM
    calls = lowered(towers(6, n=128))[1]
    assert [c.spec.template.rsplit("/", 1)[-1] for c in calls] == ["gemm_ck_grouped.hip.j2", "gemm_ck.hip.j2"]


def test_kernel_counts_against_cuda():
    """The same fused graph: one launch per group on both GPU backends (CUDA: gemm_grouped.cu.j2)."""
    for n_members in (2, 4):
        outs = towers(n_members)
        _, rocm = lower_for(outs, "rocm", "gfx90a")
        _, cuda = lower_for(outs, "cuda", "sm_80")
        assert len(rocm) == len(cuda) == 1
        assert rocm[0].spec.template.endswith("gemm_ck_grouped.hip.j2")
        assert cuda[0].spec.template.endswith("gemm_grouped.cu.j2")
    # without fusion: one GEMM each on both
    opts = compile_options(target="rocm", arch="gfx90a", fusion=False)
    g = run_pipeline(Graph.from_outputs(towers(3)), opts, list(PIPELINE))
    assert all(op.kind is not OpKind.GROUPED for op in g.ops)


def test_one_instance_whatever_m_binds():
    """M is a run-time size (padded to the tile): a static M group and a symbolic one of the same
    members render the same source apart from nothing CK fixes at compile time."""
    (a,) = lowered(towers(2, m=IntImm(512)))[1]
    (b,) = lowered(towers(2))[1]
    assert a.spec.func == b.spec.func
