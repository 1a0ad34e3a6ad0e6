"""ROCm GEMM / BMM / conv2d through Composable Kernel, without an AMD GPU.

Default tier: which CK instance each problem gets and the numbers it is given (vector widths
against CK's own run-time rules, recomputed here from concrete sizes; tiles; D tensors and their
strides), the epilogue functor's text from a fused bias + GELU + residual, the compile-time
refusals, the epilogue pass, and the functor itself (through CK's CDE wrapper,
ait::ck_ext::CdeOp) compiled by hipcc as host code and compared with the numpy oracle. The
`rocm_compile` tier (hipcc builds of CK instances): test_rocm_ck_objects.py.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import aitgen as ag
from aitgen import models, ops
from aitgen.codegen.backend import load_backend
from aitgen.codegen.kernels.rocm import configs as ck
from aitgen.codegen.kernels.rocm import conv as conv_k
from aitgen.codegen.kernels.rocm import gemm as gemm_k
from aitgen.codegen.render import render
from aitgen.codegen.spec import KernelSpec
from aitgen.compiler import compile_options
from aitgen.errors import UnsupportedOpError
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.ops.fused import split_operands
from aitgen.passes import PIPELINE, run_pipeline

from ck_helpers import _const, broadcast_epilogues, conv_relu, ffn, hip_env, hipcc, lowered, source


# -- instance choice and CK's run-time rules, decided at build time ---------------------------

def ck_accepts(inst: dict, m: int, n: int, k: int, a_k_contiguous: bool, b_k_contiguous: bool) -> bool:
    """DeviceGemmMultipleD_Xdl_CShuffle::IsSupportedArgument's size rules (pinned CK b076a02)."""
    ok_a = (k if a_k_contiguous else m) % inst["a"]["src_vec"] == 0
    ok_b = (k if b_k_contiguous else n) % inst["b"]["src_vec"] == 0
    return ok_a and ok_b and n % inst["cde"]["vec"] == 0


def zoo_problems(name, **cfg):
    _, outs = models.get(name, batch=1, **cfg)
    opts = compile_options(target="rocm", arch="gfx90a", precision="float16")
    g = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    found = []
    for op in g.ops:
        if op.kind in (OpKind.GEMM, OpKind.BMM):
            p = gemm_k.gemm_problem(op) if op.kind is OpKind.GEMM else gemm_k.bmm_problem(op)
            params, _, dims, _ = gemm_k.gemm_kernel(p, "gfx90a")
            sizes = (p.m.value, p.n.value, p.k.value, not p.a_col, p.b_col)
        elif op.kind is OpKind.CONV2D:
            params, _, dims, _ = conv_k.conv_kernel(op, "gfx90a")
            n, h, w, c, kk, r, s, pp, q, groups = (int(d if isinstance(d, int) else d.value) for d in dims[:10])
            sizes = (n * pp * q, kk // groups, c // groups, True, True)
        else:
            continue
        found.append((op, params, sizes))
    return found


@pytest.mark.parametrize("name, cfg", [("bert_base", dict(layers=1, seq=128)), ("resnet50", dict(image_size=224))])
def test_zoo_instances_are_few_and_accepted_by_ck(name, cfg):
    found = zoo_problems(name, **cfg)
    assert found
    for op, params, (m, n, k, a_kc, b_kc) in found:
        assert ck_accepts(params["inst"], m, n, k, a_kc, b_kc), (op.name, params["inst"]["name"], m, n, k)
    insts = {p["inst"]["name"] for _, p, _ in found}
    print(f"{name}: {len(found)} GEMM-shaped ops, CK instances {sorted(insts)}")
    # The compile budget: a model needs a handful of instances, not one per shape.
    assert len(insts) <= 3
    if name == "bert_base":   # hidden 768 / 3072: full 16-byte vectors everywhere
        assert insts == {"64x64 va8 vb8 vc8"}
    else:                     # the 3-channel stem reads 2-byte vectors; every other conv 16-byte
        stem = [p for op, p, s in found if s[2] % 8]
        assert stem and all(p["inst"]["a"]["src_vec"] < 8 for p in stem)
        assert {p["spec"] for _, p, _ in found if "spec" in p} == {"Default"}


# The small zoo of the CUDA compile tier (tests/backends/cuda/test_cuda_zoo_compile.py).
SMALL = {
    "bert_base": dict(layers=2, hidden=64, heads=2, intermediate=128, vocab=100, seq=ag.IntVar("seq", 1, 32)),
    "resnet50": dict(layers=(1, 1, 1, 1), width=8, image_size=32, num_classes=10),
    "vit_b16": dict(image_size=32, patch=8, layers=2, hidden=64, heads=2, mlp=128, num_classes=10),
    "gpt2": dict(layers=2, hidden=64, heads=2, vocab=100, seq=ag.IntVar("seq", 1, 32)),
    "mobilenet_v2": dict(width=0.25, image_size=32, num_classes=10),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_zoo_lowers_every_gemm_and_conv_to_few_ck_translation_units(name):
    """Every GEMM-shaped op of the small zoo in float16 gets a CK instance (none refused), and the
    translation units (one per distinct instance + epilogue: ~45 s of hipcc each, per arch) stay few."""
    _, outs = models.get(name, **SMALL[name])
    opts = compile_options(target="rocm", arch="gfx90a", precision="float16")
    g = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    specs = []
    for op in g.ops:
        if op.kind in (OpKind.GEMM, OpKind.BMM):
            p = gemm_k.gemm_problem(op) if op.kind is OpKind.GEMM else gemm_k.bmm_problem(op)
            specs.append(KernelSpec.make("gemm", **gemm_k.gemm_kernel(p, "gfx90a")[0]))
        elif op.kind is OpKind.CONV2D:
            specs.append(KernelSpec.make("conv", **conv_k.conv_kernel(op, "gfx90a")[0]))
    assert specs
    print(f"{name}: {len(specs)} CK launches, {len(set(specs))} translation units")
    assert len(set(specs)) <= 8 and len(set(specs)) < len(specs)


def test_heuristic_fills_the_cus_with_the_largest_tile():
    big = ck.choose("gfx90a", ag.IntImm(4096), ag.IntImm(4096), ag.IntImm(1), True, True, 8, 8, 8, "t")
    assert big["name"].startswith("256x128") and big["block"] == 256
    assert (big["mxdl"], big["nxdl"], big["cde"]["cluster"]) == (4, 2, [1, 32, 1, 8])  # CK's own 256x128 instance
    # 2048 x 1024 is 64 tiles of 256x128, under gfx90a's 104 CUs; 128x128 gives 128 workgroups
    assert ck.choose("gfx90a", ag.IntImm(2048), ag.IntImm(1024), ag.IntImm(1), True, True, 8, 8, 8,
                     "t")["name"].startswith("128x128")
    # gfx940 has more CUs: the same problem wants smaller tiles there
    assert ck.choose("gfx940", ag.IntImm(2048), ag.IntImm(1024), ag.IntImm(1), True, True, 8, 8, 8,
                     "t")["name"].startswith("64x128")
    with pytest.raises(UnsupportedOpError, match="gfx942"):
        ck.choose("gfx942", ag.IntImm(64), ag.IntImm(64), ag.IntImm(1), True, True, 8, 8, 8, "t")


@pytest.mark.parametrize("k, n, va, vc", [(256, 512, 8, 8), (100, 512, 4, 8), (255, 512, 1, 8), (256, 1002, 8, 2)])
def test_vector_widths_divide_k_and_n(k, n, va, vc):
    """CK checks K % A's vector and N % the output's at run time; a size that a 16-byte vector
    does not divide gets a narrower instance at build time, never a refusal at run time."""
    _, calls = lowered(ffn(m=ag.IntImm(64), k=k, n=n))
    (call,) = calls
    inst = call.spec.param_dict()["inst"]
    assert (inst["a"]["src_vec"], inst["b"]["src_vec"], inst["cde"]["vec"]) == (va, va, vc)
    assert ck_accepts(inst, 64, n, k, True, True)


def test_float32_takes_16_byte_vectors_of_4_and_k_tiles_of_16():
    _, (call,) = lowered(ffn(m=ag.IntImm(64), dt="float32"))
    p = call.spec.param_dict()
    inst = p["inst"]
    assert p["ctype"] == "float" and p["ds"] == ["float", "float"]
    assert (inst["k"], inst["ak1"], inst["bk1"]) == (16, 4, 4)
    assert (inst["a"]["src_vec"], inst["b"]["src_vec"], inst["cde"]["vec"]) == (4, 4, 4)
    assert inst["a"]["cluster"] == [4, 16, 1] and inst["cde"]["cluster"] == [1, 8, 1, 8]
    assert ck_accepts(inst, 64, 512, 256, True, True)
    # M/N-contiguous float32 (a row-major B): K1 of one float, 4-wide slices along N
    a = ag.Tensor([4, 64, 128], dtype="float32", name="p")
    b = ag.Tensor([4, 128, 64], dtype="float32", name="v")
    (bmm,) = lowered({"y": ops.bmm(a, b)})[1]
    binst = bmm.spec.param_dict()["inst"]
    assert (binst["bk1"], binst["b"]["vec_dim"], binst["b"]["src_vec"], binst["b"]["dst_vec"]) == (1, 1, 4, 1)


def test_symbolic_sizes_take_the_vector_their_polynomial_allows():
    seq = ag.IntVar("seq", 1, 512)
    a = ag.Tensor([4, seq, 64], dtype="float16", name="q")
    b = ag.Tensor([4, 64, seq], dtype="float16", name="kt")
    v = ag.Tensor([4, seq, 64], dtype="float16", name="v")
    _, calls = lowered({"s": ops.bmm(ops.bmm(a, b), v)})
    first, second = (c.spec.param_dict() for c in calls)
    assert first["batched"] and second["batched"]
    # q @ kt: K = 64, N = seq (no constant factor): B's vectors and the output's are scalar
    assert (first["inst"]["a"]["src_vec"], first["inst"]["b"]["src_vec"], first["inst"]["cde"]["vec"]) == (8, 1, 1)
    # (.) @ v: K = seq, so A's K vectors are scalar; B is [K, N] row-major (N-contiguous, 4-wide slices)
    assert (second["inst"]["a"]["src_vec"], second["inst"]["b"]["src_vec"]) == (1, 4)
    assert second["inst"]["b"]["vec_dim"] == 1 and second["layout_b"] == "Row"


def test_gemm_epilogue_is_the_rendered_expression_over_d_tensors():
    _, calls = lowered(ffn())
    (call,) = calls
    p = call.spec.param_dict()
    assert p["ds"] == ["ck::half_t", "ck::half_t"] and not p["batched"]
    # bias row (row stride 0) then the residual (row stride N): the functor's argument order
    assert [str(d) for d in call.dims[10:]] == ["0", "0", "512", "0"]
    assert [t.name for t in call.ptrs[3:]][1] == "res"
    src = source(call)
    assert "DeviceGemmMultipleD_Xdl_CShuffle<" in src and "CdeOp<EpilogueFn>" in src
    assert "AIT_HD float operator()(float acc, float bias, float s1) const" in src
    body = src[src.index("struct EpilogueFn"):src.index("};", src.index("struct EpilogueFn"))]
    assert "const float s0 = acc + bias;" in body and re.search(r"s\d = ep\d\(s\d, s1\);", body)
    assert "ait::gelu_erf(a0)" in src and "a0 + a1" in src
    # Sizes are run-time arguments: another M gives the same translation unit.
    _, calls2 = lowered(ffn(m=ag.IntImm(64)))
    assert calls2[0].spec.param_dict()["functor"] == p["functor"]


def test_golden_sources(golden):
    """The whole rendered translation units (tests/golden/rocm/; --update-golden rewrites them)."""
    _, (gemm,) = lowered(ffn())
    _, (conv,) = lowered(conv_relu())
    golden("rocm/gemm_ck_bias_gelu_residual.hip", source(gemm))
    golden("rocm/conv_ck_bias_relu.hip", source(conv))


def test_conv_bias_relu_render():
    _, calls = lowered(conv_relu())
    (call,) = calls
    p = call.spec.param_dict()
    assert p["spec"] == "Default" and p["ds"] == [{"ctype": "ck::half_t", "row": True}]
    src = source(call)
    assert "DeviceGroupedConvFwdMultipleD_Xdl_CShuffle<" in src and "conv_layout::G_K" in src
    assert "(a0 > T(0) || a0 != a0 ? a0 : T(0))" in src
    assert [int(d) for d in call.dims[9:]] == [1, 1, 1, 1, 1, 1, 1, 1, 1]  # groups, stride, dilation, pads
    # NHWGC / NHWGK: CK's descriptors that read the strides (its GNHWC / GNHWK ones are packed per group)
    assert "conv_layout::NHWGC, conv_layout::GKYXC, DsLayout, conv_layout::NHWGK" in src


def test_depthwise_and_grouped_convs_take_the_same_instance_kind():
    rng = np.random.default_rng(4)
    x = ag.Tensor([1, 8, 8, 32], dtype="float16", name="x")
    dw = ops.conv2d(x, _const((32, 3, 3, 1), rng), stride=2, padding=1, groups=32)
    gr = ops.conv2d(x, _const((64, 1, 1, 16), rng), groups=2)
    _, calls = lowered({"dw": dw, "gr": gr})
    by_groups = {int(c.dims[9]): c.spec.param_dict() for c in calls}
    assert set(by_groups) == {32, 2}
    # depthwise: one channel per group, so scalar vectors; two groups of 16 -> 32: full vectors
    assert by_groups[32]["inst"]["a"]["src_vec"] == 1 and by_groups[32]["inst"]["cde"]["vec"] == 1
    assert by_groups[2]["inst"]["a"]["src_vec"] == 8 and by_groups[2]["inst"]["cde"]["vec"] == 8
    assert by_groups[32]["spec"] == by_groups[2]["spec"] == "Default"


def test_refusals_name_the_op_and_the_reason():
    rng = np.random.default_rng(2)
    m = ag.IntImm(64)
    x = ag.Tensor([m, 256], dtype="float16", name="x")
    xd = ag.Tensor([m, 256], dtype="float64", name="xd")
    w = ag.Tensor([512, 256], dtype="float64", name="wd")
    with pytest.raises(UnsupportedOpError, match="float16, bfloat16 or float32 operands"):
        lowered({"y": ops.linear(xd, w)})
    huge = ag.IntVar("rows", 1, 2**31)
    with pytest.raises(UnsupportedOpError, match="int32"):
        lowered(ffn(m=huge))
    # 2**22 rows of 256 halves: an int32 number of elements, but A is 2 GB + 1 row (CheckValidity's limit)
    with pytest.raises(UnsupportedOpError, match="at most 2 GB"):
        lowered(ffn(m=ag.IntVar("rows", 1, 2**22 + 1)))
    lowered(ffn(m=ag.IntVar("rows", 1, 2**21)))   # 1 GB A and 2 GB result: accepted
    k = ag.IntVar("k", 0, 64)
    a, b = ag.Tensor([64, k], dtype="float16", name="a"), ag.Tensor([k, 64], dtype="float16", name="b")
    with pytest.raises(UnsupportedOpError, match="K can be 0"):
        lowered({"y": ops.matmul(a, b)})

def test_operands_no_d_tensor_reads_take_the_epilogue_pass():
    _, calls = lowered(broadcast_epilogues())
    assert [c.spec.template.split("/")[-1] for c in calls] == ["gemm_ck.hip.j2", "gemm_ck_apply.hip.j2",
                                                              "conv_ck.hip.j2", "gemm_ck_apply.hip.j2"]
    gemm, gemm_ep, conv, conv_ep = calls
    # the kernels keep only their bias
    assert gemm.spec.param_dict()["functor"]["params"] == ["float acc", "float bias"]
    assert [t.name for t in gemm.ptrs[3:]] != [] and conv.spec.param_dict()["ds"] == [{"ctype": "ck::half_t",
                                                                                        "row": True}]
    # the pass: in place over the result (p[0] is the kernel's output), operands at broadcast strides
    ep = gemm_ep.spec.param_dict()
    assert gemm_ep.ptrs[0] is gemm.ptrs[0] and [t.name for t in gemm_ep.ptrs[1:]] == ["scalar", "per_row"]
    assert ep["in_vecs"] == [8, 1, 1] and ep["vec"] == 8 and ep["rank"] == 2
    assert [int(d) for d in gemm_ep.dims] == [64, 512, 512, 1, 0, 0, 1, 0]
    assert "ep" in "".join(ep["functor"]["statements"]) and ep["functor"]["params"][0] == "float acc"
    cp = conv_ep.spec.param_dict()
    assert cp["in_vecs"] == [8, 8] and [t.name for t in conv_ep.ptrs[1:]] == ["se"]
    assert [int(d) for d in conv_ep.dims[4:]] == [4096, 512, 64, 1, 64, 0, 0, 1]
    src = source(gemm_ep)
    assert "DeviceElementwiseImpl<" in src and "CdeOp<EpilogueFn>" in src


# -- the functor on the host against the oracle ------------------------------------------------

HOST_MAIN = """
#include "aitgen/ck_epilogue.hpp"
#include <cstdio>
#include <vector>
namespace {
%(functor)s
}
int main(int argc, char** argv) {
  FILE* in = std::fopen(argv[1], "rb");
  long n = 0;
  if (std::fread(&n, sizeof n, 1, in) != 1) return 2;
  std::vector<float> v(n * %(args)d);
  if (std::fread(v.data(), sizeof(float), v.size(), in) != v.size()) return 3;
  std::vector<float> out(n);
  const ait::ck_ext::CdeOp<EpilogueFn> op{};
  for (long i = 0; i < n; ++i) {
    const float* a = &v[i * %(args)d];
    %(t)s e;
    op(e, a[0]%(ds)s);
    out[i] = ck::type_convert<float>(e);
  }
  FILE* o = std::fopen(argv[2], "wb");
  std::fwrite(out.data(), sizeof(float), n, o);
  std::fclose(o);
  return 0;
}
"""


@pytest.mark.parametrize("dt, tol", [("float16", 1e-3), ("float32", 1e-6)])
def test_functor_through_ck_cde_op_matches_the_oracle(tmp_path, dt, tol):
    """gelu(x W^T + b) + res: the kernel's epilogue (our functor inside CK's CDE call, the D tensors
    and the result in `dt` storage) evaluated on the host by hipcc, fed the float32 accumulator,
    against the oracle on the fused graph: rtol 1e-3 in fp16 storage (one rounding of the result;
    the oracle also rounds its accumulator to fp16), 1e-6 in fp32 (the same BLAS product)."""
    cc = hipcc()
    m, k, n = 64, 256, 512
    g = run_pipeline(Graph.from_outputs(ffn(m=ag.IntImm(m), k=k, n=n, dt=dt)), compile_options(target="rocm"),
                     list(PIPELINE))
    gemm = next(op for op in g.ops if op.kind is OpKind.GEMM)
    (_, w, bias), extras = split_operands(gemm.inputs, gemm.attrs)
    fn = gemm_k.functor(gemm, True, extras)   # what gemm_kernel renders (fp32 operands have no CK instance)
    t = "ck::half_t" if dt == "float16" else "float"
    src = tmp_path / "functor.hip"
    src.write_text(HOST_MAIN % dict(functor=render("rocm/templates/gemm_ck_functor.inc.j2", functor=fn), args=3, t=t,
                                    ds=f", ck::type_convert<{t}>(a[1]), ck::type_convert<{t}>(a[2])"))
    exe = tmp_path / "functor"
    flags = [f for f in load_backend("rocm").compile_flags("gfx90a") if not f.startswith("--offload-arch")]
    r = subprocess.run([cc, *flags, "--cuda-host-only", str(src), "-o", str(exe)], capture_output=True, text=True,
                       env=hip_env())
    assert r.returncode == 0, r.stderr[-4000:]

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((m, k)) * 0.5).astype(dt)
    res = (rng.standard_normal((m, n)) * 0.5).astype(dt)
    ref = ag.reference.run(g, {"x": x, "res": res})["y"].astype(np.float32)
    acc = x.astype(np.float32) @ w.value.astype(np.float32).T
    b32 = bias.value.astype(np.float32)
    feed = np.stack([acc, np.broadcast_to(b32, (m, n)), res.astype(np.float32)], axis=-1)
    (tmp_path / "in.bin").write_bytes(np.int64(m * n).tobytes() + feed.astype(np.float32).tobytes())
    r = subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(tmp_path / "out.bin", np.float32).reshape(m, n)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    assert np.abs(got - (acc + b32)).max() > 0.1   # GELU and the residual did apply
