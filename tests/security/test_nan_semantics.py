"""NaN and +-inf through every fused path (issue 10, item 7): a fused kernel computes what the op
defines, as the oracle (aitgen.reference) and torch do, special values included: relu(NaN) = NaN,
maximum/minimum/clamp propagate NaN, a one-sided clamp leaves the other infinity alone.

CPU: each family is one small graph built twice, with fusion=True (GEMM/conv epilogues as oneDNN
post-ops or the epilogue loop, fused element-wise groups, norm prologues) and fusion=False (each
op its own kernel), fed inputs with NaN, +inf and -inf planted at known places, and compared with
the oracle NaN-aware: NaN and infinities at the same places with the same signs, finite values
within rtol 1e-4 plus 1e-5 of the largest finite |value| (float32; GEMM sums of 16 terms and
polynomial transcendentals stay well inside). CUDA, without a GPU: the GEMM/conv epilogue functor
the CUTLASS visitor trees apply, evaluated on the host on special values; our own CUDA kernels
(fused element-wise, norm prologues, softmax, pooling, reductions, attention) run by the host
emulator; one CUTLASS GEMM with a NaN-sensitive epilogue compiled. Where torch is installed, the
oracle itself is compared with torch on the same special values.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops

NAN, INF = np.float32(np.nan), np.float32(np.inf)
RTOL, ATOL = 1e-4, 1e-5
ALL = slice(None)


def planted(shape, seed, *special):
    """Standard normal values with (index, value) pairs planted."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    for idx, v in special:
        a[idx] = v
    return a


def weight(shape, seed):
    return ag.constant((np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32))


def mismatch(got, want, name, rtol=RTOL, atol=ATOL):
    """None when got matches want (NaN-aware, see the module's tolerance), else what differs."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{name}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    scale = max(1.0, float(np.abs(w[np.isfinite(w)]).max(initial=0.0)))
    try:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale, equal_nan=True)
    except AssertionError:
        with np.errstate(invalid="ignore"):
            ok = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= atol * scale + rtol * np.abs(w))
        bad = np.flatnonzero(~ok)[:4]
        return f"{name}: {np.count_nonzero(~ok)} elements differ, e.g. at {bad.tolist()} got {g[bad].tolist()} " \
               f"expected {w[bad].tolist()}"
    return None


def oracle(outs, feeds, specials=(np.isnan, np.isposinf, np.isneginf)):
    """The oracle's outputs, checked to hold each kind of special value (the test means something)."""
    with np.errstate(all="ignore"):
        want = ag.reference.run(outs, feeds)
    every = np.concatenate([w.ravel().astype(np.float64) for w in want.values() if w.dtype.kind == "f"])
    assert all(f(every).any() for f in specials), "the inputs must send NaN, +inf and -inf through the graph"
    return want


def check_fused_and_unfused(outs, feeds, tmp_path):
    """Build `outs` with and without fusion, compare both with the oracle; returns the kernel
    counts (fused, unfused) so a test can see that fusion took place."""
    want = oracle(outs, feeds)
    kernels, errors = [], []
    for fusion in (True, False):
        work = tmp_path / f"fusion{int(fusion)}"
        with ag.compile_model(outs, target="cpu", workdir=str(work), fusion=fusion) as m:
            got = m.run(feeds)
        errors += [e for k in outs if (e := mismatch(got[k], want[k], f"{k} (fusion={fusion})"))]
        kernels.append(json.loads((work / "report.json").read_text())["num_kernels"])
    assert not errors, "\n".join(errors)
    return kernels


# -- the graphs ------------------------------------------------------------------------------------

# Epilogues over a GEMM/conv result y, with a residual r of y's shape.
EPILOGUES = {
    "relu": lambda y, r: ops.relu(y),
    "relu_then_residual": lambda y, r: ops.relu(y) + r,
    "residual_then_relu": lambda y, r: ops.relu(y + r),
    "relu6": lambda y, r: ops.relu6(y),
    "hardtanh": lambda y, r: ops.clamp(y, -1.0, 1.0),
    "clamp_min": lambda y, r: ops.clamp(y, min=0.25),
    "clamp_max": lambda y, r: ops.clamp(y, max=0.25),
    "maximum_0": lambda y, r: ops.maximum(y, 0.0),
    "minimum_0": lambda y, r: ops.minimum(y, 0.0),
    "maximum_residual": lambda y, r: ops.maximum(y, r),
    "minimum_residual": lambda y, r: ops.minimum(r, y),
    "leaky_relu": lambda y, r: ops.where(ops.greater(y, 0.0), y, y * 0.01),
    "gelu": lambda y, r: ops.gelu(y),
    "gelu_tanh": lambda y, r: ops.gelu(y, approximate="tanh"),
    "silu": lambda y, r: ops.silu(y),
    "sigmoid": lambda y, r: ops.sigmoid(y),
    "tanh": lambda y, r: ops.tanh(y),
    "hardswish": lambda y, r: ops.hardswish(y),
    "exp": lambda y, r: ops.exp(y),
    "log": lambda y, r: ops.log(y),
    "sqrt": lambda y, r: ops.sqrt(y),
    "rsqrt": lambda y, r: ops.rsqrt(y),
    "abs": lambda y, r: ops.abs(y),
    "neg_residual": lambda y, r: r - y,
    "reciprocal": lambda y, r: ops.reciprocal(y),
    "mul_residual": lambda y, r: y * r,
    "div_residual": lambda y, r: y / r,
}
CONV_EPILOGUES = ("relu", "relu6", "hardtanh", "clamp_min", "residual_then_relu", "relu_then_residual", "maximum_0",
                  "minimum_residual", "gelu", "silu")


def gemm_case():
    x, r = ag.Tensor([8, 16], name="x"), ag.Tensor([8, 24], name="r")
    a, b = ag.Tensor([2, 4, 8], name="a"), ag.Tensor([2, 8, 6], name="b")
    mask = ag.Tensor([2, 4, 6], name="mask")
    # A weight per output: identical GEMMs would merge into one (dedup) and share no epilogue.
    outs = {k: fn(ops.linear(x, weight((24, 16), i), weight(24, 100 + i) if i % 2 else None), r)
            for i, (k, fn) in enumerate(EPILOGUES.items())}
    outs["bmm_relu"] = ops.relu(ops.bmm(a, b))
    outs["bmm_maximum_mask"] = ops.maximum(ops.bmm(a, b * 2.0), mask)
    outs["bmm_clamp"] = ops.clamp(ops.bmm(a * 0.5, b), -0.5, 0.5)
    feeds = {
        # Row 0 of every GEMM result is NaN, rows 1 and 2 are +-inf (by the weights' signs).
        "x": planted((8, 16), 1, ((0, 3), NAN), ((1, 5), INF), ((2, 7), -INF)),
        "r": planted((8, 24), 2, ((3, slice(0, 6)), NAN), ((4, ALL), INF), ((5, ALL), -INF), ((0, 1), -INF)),
        "a": planted((2, 4, 8), 3, ((0, 1, 2), NAN), ((1, 2, 0), INF), ((1, 3, 4), -INF)),
        "b": planted((2, 8, 6), 4, ((1, 5, 5), NAN)),
        "mask": planted((2, 4, 6), 5, ((0, 0, ALL), NAN), ((1, 0, 0), INF)),
    }
    return outs, feeds


def elementwise_case():
    x, y = ag.Tensor([4, 40], name="x"), ag.Tensor([4, 40], name="y")
    col = ag.Tensor([4, 1], name="col")
    outs = {
        "relu_chain": ops.relu(x) * 2.0 + y,
        "maximum": ops.maximum(x, y) + 1.0,
        "minimum": ops.minimum(x, y) * 2.0,
        "maximum_swapped": ops.maximum(y, x) - 1.0,
        "relu6_sum": ops.relu6(x + y),
        "hardtanh_product": ops.clamp(x * y, -1.0, 1.0),
        "clamp_one_sided": ops.clamp(x - y, min=-0.5) + ops.clamp(x + y, max=0.5),
        "relu_plus_relu": ops.relu(x) + ops.relu(y),
        "leaky_relu": ops.where(ops.greater(x, 0.0), x, x * 0.01) + y,
        "max_broadcast": ops.maximum(x * 1.5, col),
        "exp_of_min": ops.exp(ops.minimum(x, 0.0)) * y,
        "silu_sigmoid": ops.silu(x) * ops.sigmoid(y),
        "gelu_tanh": ops.gelu(x) + ops.tanh(y),
        "hardswish": ops.hardswish(x) - y,
        "sign_abs": ops.sign(x) * ops.abs(y),
        "sqrt_rsqrt": ops.sqrt(ops.abs(x)) + ops.rsqrt(y),
        "nan_to_zero": ops.where(ops.isnan(x), 0.0, x) + y,
        "div_mod": x / y + ops.mod(x, 3.0),
        # norms and softmax with an element-wise prologue, and an element-wise op after a norm
        "layernorm_relu_residual": ops.layernorm(ops.relu(x) + y),
        "rmsnorm_maximum": ops.rmsnorm(ops.maximum(x, y)),
        "relu_after_layernorm": ops.relu(ops.layernorm(x * 2.0)),
        "softmax_masked": ops.softmax(x * 0.5 + col),
    }
    feeds = {
        "x": planted((4, 40), 1, ((0, 1), NAN), ((0, 2), INF), ((0, 3), -INF), ((1, 5), NAN), ((2, 7), INF),
                     ((2, 8), -INF)),
        "y": planted((4, 40), 2, ((0, 2), NAN), ((0, 3), INF), ((0, 4), -INF), ((1, 6), INF), ((2, 9), NAN),
                     ((3, 11), -INF)),
        # row 3 masked out entirely (an all -inf softmax row is NaN, as in torch)
        "col": np.array([[0.0], [1.0], [-1.0], [-INF]], np.float32),
    }
    return outs, feeds


def pool_reduce_case():
    img, x = ag.Tensor([1, 6, 6, 3], name="img"), ag.Tensor([5, 12], name="x")
    outs = {
        "max_pool": ops.max_pool2d(img, 2),
        "max_pool_relu": ops.max_pool2d(ops.relu(img), 3, stride=1, padding=1),
        "avg_pool": ops.avg_pool2d(img, 3, stride=1, padding=1),
        "global_avg": ops.global_avg_pool(img),
        "reduce_max": ops.reduce_max(x, 1),
        "reduce_min": ops.reduce_min(x, 1),
        "reduce_max_relu": ops.reduce_max(ops.relu(x) * 2.0, 1),
        "reduce_sum": ops.reduce_sum(x, 1),
        "argmax": ops.argmax(x, 1),
        "argmin": ops.argmin(x, 1),
        "argmax_last": ops.argmax(x, 1, select_last_index=True),
        "softmax": ops.softmax(x),
    }
    feeds = {
        "img": planted((1, 6, 6, 3), 1, ((0, 0, 0, 0), NAN), ((0, 3, 3, 1), INF), ((0, 5, 5, 2), -INF),
                       ((0, 2, 2, 0), -INF)),
        # rows: a NaN after the maximum, +inf and -inf, all -inf, NaN first, plain
        "x": planted((5, 12), 2, ((0, 7), NAN), ((1, 2), INF), ((1, 3), -INF), ((2, ALL), -INF), ((3, 0), NAN),
                     ((3, 5), INF)),
    }
    return outs, feeds


def pool_reduce_attention_case():
    outs, feeds = pool_reduce_case()
    outs2, feeds2 = attention_case()
    return {**outs, **outs2}, {**feeds, **feeds2}


def attention_case(dtype="float32", d=8):
    """Masks (additive, bool, causal) with a NaN query, an infinite key and a -inf value; head dim
    64 in float16 takes CUDA's tensor-core kernel, 8 the CUDA-core one."""
    q, k, v = (ag.Tensor([1, 2, s, d], dtype=dtype, name=n) for n, s in (("q", 4), ("k", 5), ("v", 5)))
    mask, keep = ag.Tensor([1, 1, 4, 5], dtype=dtype, name="mask"), ag.Tensor([1, 1, 4, 5], dtype="bool", name="keep")
    outs = {"attention_additive": ops.scaled_dot_product_attention(q, k, v, mask),
            "attention_bool": ops.scaled_dot_product_attention(q, k * 0.5, v, keep),
            "attention_causal": ops.scaled_dot_product_attention(q, k * 1.5, v, causal=True)}
    keep_v = np.ones((1, 1, 4, 5), bool)
    keep_v[0, 0, 2] = False
    np_dt = ag.DType[dtype].np
    feeds = {
        "q": planted((1, 2, 4, d), 3, ((0, 1, 2, 3), NAN)).astype(np_dt),
        "k": planted((1, 2, 5, d), 4, ((0, 0, 4, 1), INF)).astype(np_dt),
        "v": planted((1, 2, 5, d), 5, ((0, 1, 0, 0), -INF)).astype(np_dt),
        # query rows that see no key give zeros (torch's math kernel does the same; NaN under the
        # -inf value: 0 * -inf), not NaN throughout
        "mask": planted((1, 1, 4, 5), 6, ((0, 0, 1, ALL), -INF), ((0, 0, 2, 0), -INF)).astype(np_dt),
        "keep": keep_v,
    }
    return outs, feeds


# -- CPU ---------------------------------------------------------------------------------------------

def test_gemm_and_bmm_epilogues(tmp_path):
    fused, unfused = check_fused_and_unfused(*gemm_case(), tmp_path)
    assert fused < unfused


def test_gemm_relu_float16(tmp_path):
    x = ag.Tensor([8, 16], dtype="float16", name="x")
    w = ag.constant((np.random.default_rng(0).standard_normal((24, 16)) * 0.3).astype(np.float16))
    bias = ag.constant(np.random.default_rng(1).standard_normal(24).astype(np.float16))
    outs = {"relu": ops.relu(ops.linear(x, w, bias)), "relu6": ops.relu6(ops.linear(x, w * 0.5, bias))}
    feeds = {"x": planted((8, 16), 1, ((0, 3), NAN), ((1, 5), INF), ((2, 7), -INF)).astype(np.float16)}
    want = oracle(outs, feeds, (np.isnan, np.isposinf))  # relu leaves no -inf
    with ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "w")) as m:
        got = m.run(feeds)
    # float16: 2e-3, a float16 rounding of results of a few units
    errors = [e for k in outs if (e := mismatch(got[k], want[k], k, rtol=2e-3, atol=2e-3))]
    assert not errors, "\n".join(errors)


def test_conv_epilogues(tmp_path):
    x = ag.Tensor([1, 6, 6, 4], name="x")  # NHWC
    r = ag.Tensor([1, 6, 6, 8], name="r")
    outs = {k: EPILOGUES[k](ops.conv2d(x, weight((8, 3, 3, 4), i), weight(8, 50 + i), padding=1), r)
            for i, k in enumerate(CONV_EPILOGUES)}
    feeds = {"x": planted((1, 6, 6, 4), 1, ((0, 1, 1, 0), NAN), ((0, 4, 4, 2), INF), ((0, 4, 1, 1), -INF)),
             "r": planted((1, 6, 6, 8), 2, ((0, 0, 5, ALL), NAN), ((0, 5, 0, 0), INF), ((0, 5, 5, 3), -INF))}
    fused, unfused = check_fused_and_unfused(outs, feeds, tmp_path)
    assert fused < unfused


def test_elementwise_chains_and_norm_prologues(tmp_path):
    fused, unfused = check_fused_and_unfused(*elementwise_case(), tmp_path)
    assert fused < unfused


def test_pool_reduce_softmax_attention(tmp_path):
    check_fused_and_unfused(*pool_reduce_attention_case(), tmp_path)


# -- CUDA, without a GPU -------------------------------------------------------------------------------

CUDA_TESTS = Path(__file__).resolve().parents[1] / "backends" / "cuda"


@pytest.fixture(scope="module")
def cuda_tools(cuda_toolchain):
    if str(CUDA_TESTS) not in sys.path:  # cuda_host_emu and the GEMM compile helpers live there
        sys.path.insert(0, str(CUDA_TESTS))


def _lower_cuda(outs):
    from aitgen.codegen.lower import lower_graph
    from aitgen.compiler import compile_options
    from aitgen.ir.graph import Graph
    from aitgen.memory import plan_memory
    from aitgen.passes import PIPELINE, run_pipeline
    opts = compile_options(target="cuda", arch="sm_80", allow_tf32=True)
    graph = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    return lower_graph(graph, plan_memory(graph, opts.caps), "cuda", arch="sm_80", opts=opts)


_FUNCTOR_HARNESS = """
namespace f{i} {{
{functor}
}}
// As the visitor trees apply it: FragmentMap<EpilogueFn>::fn over fragments of 4 lanes.
extern "C" __attribute__((visibility("default"))) void apply{i}(const float* const* in, float* out, int n) {{
  using Frag = cutlass::Array<float, 4>;
  ait::cutlass_ext::FragmentMap<f{i}::EpilogueFn>::fn<Frag> f;
  for (int e = 0; e + 4 <= n; e += 4) {{
    Frag v[{nargs}];
    for (int a = 0; a < {nargs}; ++a)
      for (int j = 0; j < 4; ++j) v[a][j] = in[a][e + j];
    const Frag o = f({args});
    for (int j = 0; j < 4; ++j) out[e + j] = o[j];
  }}
}}
"""


def test_cuda_gemm_epilogue_functors_on_the_host(cuda_tools, tmp_path):
    """The functor each CUTLASS GEMM epilogue applies (the same one the SIMT and epilogue-pass
    kernels call), compiled by nvcc as host code, on accumulators, biases and residuals full of
    special values, against the oracle's evaluation of the epilogue."""
    from aitgen.codegen.backend import load_backend
    from aitgen.codegen.render import render
    x, r = ag.Tensor([64, 16], name="x"), ag.Tensor([64, 24], name="r")
    parts = ['#include "aitgen/cuda_kernel.cuh"\n#include "aitgen/cuda_math.cuh"\n#include "aitgen/cutlass_evt.cuh"\n']
    cases = []
    for i, (k, fn) in enumerate(EPILOGUES.items()):
        calls = [c for c in _lower_cuda({"y": fn(ops.linear(x, weight((24, 16), i), weight(24, i)), r)})
                 if "gemm" in c.spec.template]
        (call,) = calls
        functor = call.spec.param_dict()["functor"]
        nargs = len(functor["params"])
        parts.append(_FUNCTOR_HARNESS.format(i=i, functor=render("gpu/templates/epilogue_fn.inc.j2", functor=functor),
                                             nargs=nargs, args=", ".join(f"v[{a}]" for a in range(nargs))))
        cases.append((k, call.ptrs[0].producer.attrs.epilogue, nargs))
    src, lib = tmp_path / "functors.cu", tmp_path / "functors.so"
    src.write_text("".join(parts))
    res = subprocess.run(["nvcc", *load_backend("cuda").compile_flags("sm_80"), "-shared", str(src), "-o", str(lib)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    so = ctypes.CDLL(str(lib))
    rng = np.random.default_rng(0)
    special = np.array([NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 40.0, -40.0], np.float32)
    acc = np.concatenate([special, np.repeat(special, len(special)), rng.standard_normal(1024) * 3]).astype(np.float32)
    acc = np.concatenate([acc, np.zeros(-acc.size % 4, np.float32)])
    bias = np.where(rng.random(acc.size) < 0.02, rng.choice(special, acc.size), rng.standard_normal(acc.size))
    res_v = np.where(rng.random(acc.size) < 0.3, np.tile(special, acc.size // len(special) + 1)[:acc.size],
                     rng.standard_normal(acc.size))
    bias, res_v = bias.astype(np.float32), res_v.astype(np.float32)
    errors = []
    # operands past the residual (constants of the expression, 0.01 in leaky_relu) take other values too
    operands = [acc, bias, res_v, rng.permutation(res_v), rng.permutation(res_v)]
    for i, (k, ep, nargs) in enumerate(cases):
        args = operands[:nargs]
        got = np.empty_like(acc)
        ptrs = (ctypes.c_void_p * nargs)(*[a.ctypes.data for a in args])
        getattr(so, f"apply{i}")(ptrs, ctypes.c_void_p(got.ctypes.data), ctypes.c_int(acc.size))
        with np.errstate(all="ignore"):
            (want,) = ep.expr.evaluate([acc + bias, *args[2:]])
        errors.append(mismatch(got, np.broadcast_to(want, acc.shape).astype(np.float32), k, rtol=1e-5, atol=1e-6))
    errors = [e for e in errors if e]
    assert not errors, "\n".join(errors)


def test_cuda_own_kernels_emulated_on_the_host(cuda_tools, tmp_path, monkeypatch):
    """Our CUDA kernels (fused element-wise groups, norm and softmax prologues, pooling, reductions,
    attention) compiled by g++ against the host emulator (threads as fibers), with fusion as the
    CUDA pipeline does it, against the oracle."""
    import cuda_host_emu as emu
    # Every kernel goes into one translation unit, each in a namespace: the attention header must be
    # included once at file scope first (as test_cuda_attention_host.py does).
    monkeypatch.setattr(emu, "PRELUDE", emu.PRELUDE + '#include "aitgen/cuda_attention.cuh"\n')
    # float16 within 2e-3: probabilities are rounded to float16 before P.V, as on the GPU
    cases = [(elementwise_case(), RTOL, ATOL), (pool_reduce_attention_case(), RTOL, ATOL),
             (attention_case("float16", 64), 2e-3, 2e-3)]
    built = [(outs, feeds, tol, *emu.lower(outs)) for (outs, feeds), *tol in cases]
    assert any("attention_mma" in c.spec.template for c in built[-1][-1])
    lib = emu.build([c for *_, calls in built for c in calls], tmp_path)
    errors = []
    for outs, feeds, (rtol, atol), graph, plan, calls in built:
        want = oracle(outs, feeds, (np.isnan, np.isneginf))
        got = emu.Emulated(graph, plan, calls, lib).run(feeds)
        errors += [e for k in outs if (e := mismatch(got[k], want[k], k, rtol, atol))]
    assert not errors, "\n".join(errors)


def test_cutlass_gemm_with_nan_sensitive_epilogue_compiles(cuda_tools, tmp_path):
    """relu(x W^T + b) then maximum with a residual, on the sm_80 CUTLASS kernel: the visitor tree
    with the functor above (one nvcc run, ~10 s)."""
    import test_cuda_gemm_compile as gemm_tests
    rng = np.random.default_rng(0)
    tokens = ag.IntVar("tokens", 128, 512)
    x, r = ag.Tensor([tokens, 256], dtype="float16", name="x"), ag.Tensor([tokens, 512], dtype="float16", name="res")
    w = ag.constant((rng.standard_normal((512, 256)) * 0.1).astype(np.float16))
    b = ag.constant((rng.standard_normal(512) * 0.1).astype(np.float16))
    spec = gemm_tests._heuristic_call({"y": ops.maximum(ops.relu(ops.linear(x, w, b)), r)}, "sm_80")
    p = spec.param_dict()
    assert spec.template.endswith("gemm_sm80.cu.j2") and len(p["configs"]) == 1
    assert any("a0 != a0" in f for f in p["functor"]["functions"])  # relu and maximum keep NaN
    gemm_tests.nvcc(gemm_tests.render(spec.template, func=spec.func, **p), tmp_path, "sm_80", "gemm_relu_max")


# -- the oracle against torch ----------------------------------------------------------------------

SPECIALS = np.array([np.nan, np.inf, -np.inf, -7.0, -2.5, -1.0, -0.25, 0.0, 0.25, 1.0, 2.5, 7.0], np.float32)


def _oracle1(fn, *arrays):
    ins = [ag.Tensor(list(a.shape), name=f"in{i}") for i, a in enumerate(arrays)]
    with np.errstate(all="ignore"):
        return ag.reference.run({"y": fn(*ins)}, {f"in{i}": a for i, a in enumerate(arrays)})["y"]


def test_oracle_matches_torch_on_special_values():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    t = torch.from_numpy(SPECIALS)
    unary = {
        "relu": (ops.relu, torch.relu),
        "relu6": (ops.relu6, F.relu6),
        "hardtanh": (lambda a: ops.clamp(a, -1.0, 1.0), F.hardtanh),
        "clamp_min": (lambda a: ops.clamp(a, min=0.5), lambda a: torch.clamp(a, min=0.5)),
        "clamp_max": (lambda a: ops.clamp(a, max=0.5), lambda a: torch.clamp(a, max=0.5)),
        "leaky_relu": (lambda a: ops.where(ops.greater(a, 0.0), a, a * 0.01), F.leaky_relu),
        "gelu_tanh": (lambda a: ops.gelu(a, approximate="tanh"), lambda a: F.gelu(a, approximate="tanh")),
        "silu": (ops.silu, F.silu),
        "sigmoid": (ops.sigmoid, torch.sigmoid),
        "tanh": (ops.tanh, torch.tanh),
        "hardswish": (ops.hardswish, F.hardswish),
        "exp": (ops.exp, torch.exp),
        "log": (ops.log, torch.log),
        "sqrt": (ops.sqrt, torch.sqrt),
        "rsqrt": (ops.rsqrt, torch.rsqrt),
        "abs": (ops.abs, torch.abs),
        "erf": (ops.erf, torch.erf),
    }
    for name, (ours, theirs) in unary.items():
        np.testing.assert_allclose(_oracle1(ours, SPECIALS), theirs(t).numpy(), rtol=1e-6, atol=1e-7,
                                   equal_nan=True, err_msg=name)
    # gelu (erf form) against torch in float64: torch's vectorised float32 kernel gives NaN for +inf
    # (its scalar path and float64 give +inf, the limit, which the oracle gives).
    np.testing.assert_allclose(_oracle1(ops.gelu, SPECIALS), F.gelu(t.double()).float().numpy(), rtol=1e-6,
                               atol=1e-7, equal_nan=True, err_msg="gelu")
    a, b = np.meshgrid(SPECIALS, SPECIALS)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    for name, ours, theirs in (("maximum", ops.maximum, torch.maximum), ("minimum", ops.minimum, torch.minimum)):
        np.testing.assert_array_equal(_oracle1(ours, a, b), theirs(ta, tb).numpy(), err_msg=name)
    rows = np.stack([SPECIALS, np.roll(SPECIALS, 5), np.where(np.isnan(SPECIALS), 1.0, SPECIALS),
                     np.full_like(SPECIALS, -np.inf)]).astype(np.float32)
    tr = torch.from_numpy(rows)
    for name, ours, theirs in (
            ("reduce_max", lambda z: ops.reduce_max(z, 1), lambda z: torch.amax(z, 1)),
            ("reduce_min", lambda z: ops.reduce_min(z, 1), lambda z: torch.amin(z, 1)),
            ("argmax", lambda z: ops.argmax(z, 1, keepdims=False), lambda z: torch.argmax(z, 1)),
            ("argmin", lambda z: ops.argmin(z, 1, keepdims=False), lambda z: torch.argmin(z, 1)),
            ("softmax", ops.softmax, lambda z: torch.softmax(z, 1)),
            ("layernorm", ops.layernorm, lambda z: F.layer_norm(z, (z.shape[-1],)))):
        np.testing.assert_allclose(_oracle1(ours, rows), theirs(tr).numpy(), rtol=1e-5, atol=1e-6, equal_nan=True,
                                   err_msg=name)
    img = rows.reshape(1, 4, 12, 1)
    nchw = torch.from_numpy(img).permute(0, 3, 1, 2)
    np.testing.assert_array_equal(_oracle1(lambda z: ops.max_pool2d(z, 2), img),
                                  F.max_pool2d(nchw, 2).permute(0, 2, 3, 1).numpy(), err_msg="max_pool2d")
    # attention (torch's math kernel: the reference definition) with a NaN query, an infinite key,
    # and a query row that sees no key
    q, k, v = (planted(s, i, *p) for i, (s, p) in enumerate((((1, 2, 4, 8), [((0, 1, 2, 3), NAN)]),
                                                             ((1, 2, 5, 8), [((0, 0, 4, 1), INF)]),
                                                             ((1, 2, 5, 8), [((0, 1, 0, 0), -INF)]))))
    mask = planted((1, 1, 4, 5), 9, ((0, 0, 1, ALL), -INF))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(*(torch.from_numpy(z) for z in (q, k, v, mask)))
    np.testing.assert_allclose(_oracle1(ops.scaled_dot_product_attention, q, k, v, mask), want.numpy(), rtol=1e-5,
                               atol=1e-6, equal_nan=True, err_msg="attention")
