"""The CUDA backend's own kernels (every op kind but GEMM/BMM/conv/attention), checked without a GPU.

- Coverage: every kind the CPU lowers has a CUDA lowering here, except the GEMM/conv (C2) and
  attention (C4) families.
- Lowering decisions: pack widths, pair arithmetic, scalar fallbacks, row-kernel variants.
- nvcc (sm_80): every template family in float32, float16 and bfloat16 (plus integer cases), many
  kernels per translation unit (each in a namespace of its own) so that a few nvcc runs cover them;
  one family set for sm_90a; every element-wise kind of the expression table rendered for device
  code, one unit per dtype class. The gather kernel also compiles on its own, and a gather model
  links the runtime's bad-input record (backends/gpu/src/gpu_runtime.cu) into its library.
- The math: the element-wise functors of every kind, compiled by nvcc as host code (the same
  __host__ __device__ functions and ait:: math of gpu_math.h the GPU runs; std:: functions are
  the host's libm here and CUDA's on the device), against the oracle in float32 on special values
  (0, -0, +-inf, NaN, tiny, huge) and random ones: within 1 ulp where the operation is exact or
  correctly rounded, else 4 ulp plus 4 float32 ulps of the operands' magnitude (results that
  cancel); NaN exactly where the oracle has NaN; integers and booleans exact.
- The kernels' numbers without a GPU: every case of the GPU tier (test_gpu_own_ops.py) runs on the
  host, its kernels compiled by g++ against cuda_host_emu.h, which runs CUDA threads as fibers
  (barriers and warp shuffles as on the GPU), against the oracle with the GPU tier's tolerances
  (float16 and int32 here, float32 and bfloat16 under `slow`); a bad gather index is reported.
- Golden text of one fused element-wise kernel and one layernorm with a residual prologue.
The rest of the nvcc variants (float16/bfloat16/int element-wise tables, sm_90a for all) are
marked `cuda_compile`.
"""
from __future__ import annotations

import ctypes
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.backend import load_backend
from aitgen.codegen.cexpr import COMPUTE, STORAGE, load, store
from aitgen.codegen.kernels.common import expr as common_expr
from aitgen.codegen.kernels.gpu import elementwise as gpu_ew
from aitgen.codegen.kernels.gpu import norm as gpu_norm
from aitgen.codegen.lower import _LOWERINGS, LowerContext, lower_graph, supported_kinds
from aitgen.codegen.render import render
from aitgen.compiler import compile_options
from aitgen.errors import DTypeError, ShapeError
from aitgen.ir.dtype import DType
from aitgen.ir.graph import Graph
from aitgen.ir.op import OpKind
from aitgen.memory import plan_memory
from aitgen.ops import elementwise as ew_ops
from aitgen.ops.elementwise import CastAttrs, ClampAttrs, GeluAttrs
from aitgen.ops.fused import Expr, ExprNode
from aitgen.ops.registry import Category, get_opdef, make_op, registered_kinds
from aitgen.passes import PIPELINE, run_pipeline

OWN = ("elementwise", "gather", "view", "norm", "pool", "reduce", "scan", "softmax")
FLOATS = ("float32", "float16", "bfloat16")


# -- helpers --------------------------------------------------------------------------------------

def lower_cuda(outs, arch="sm_80"):
    """The CUDA run sequence of `outs` after the whole pipeline (fusion included)."""
    opts = compile_options(target="cuda", arch=arch)
    graph = run_pipeline(Graph.from_outputs(outs), opts, list(PIPELINE))
    return lower_graph(graph, plan_memory(graph, opts.caps), "cuda", arch=arch, opts=opts)


def own_sources(calls) -> dict[str, str]:
    """Rendered source of each unique kernel of ours, by function name."""
    specs = {c.spec.func: c.spec for c in calls}
    return {f: render(s.template, func=f, **s.param_dict()) for f, s in specs.items()
            if re.search(r"gpu/templates/(elementwise|strided_copy|pad|gather|reduce|arg_reduce|norm_\w+|softmax|pool)\.cu",
                         s.template)}


PRELUDE = """#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include "aitgen/gpu_kernel.h"
#include "aitgen/gpu_math.h"
#include "aitgen/gpu_reduce.h"
"""


def nvcc(sources: dict[str, str], tmp: Path, arch: str = "sm_80", name: str = "unit") -> None:
    """Compile kernels as few translation units: each kernel in a namespace of its own after the
    shared headers (include guards make its own includes no-ops), so one nvcc run parses them once.
    A kernel that declares into namespace ait itself is compiled as its own unit."""
    alone = {f: s for f, s in sources.items() if "namespace ait" in s}
    joint = {f: s for f, s in sources.items() if f not in alone}
    units = {}
    if joint:
        units[f"{name}.cu"] = PRELUDE + "".join(f"namespace u{i} {{\n{s}\n}}  // namespace u{i}\n"
                                                for i, s in enumerate(joint.values()))
    units.update({f"{f}.cu": s for f, s in alone.items()})
    for unit, text in units.items():
        path = tmp / unit
        path.write_text(text)
        cmd = ["nvcc", *load_backend("cuda").compile_flags(arch), "-c", str(path), "-o", str(path) + ".o"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert r.returncode == 0, f"nvcc failed on {path}:\n{r.stderr[-6000:]}"
        assert "warning" not in r.stderr, r.stderr[-3000:]


def family_cases(dt: str, any_length_rows: bool = True) -> dict:
    """One graph with every template family and loop shape of ours, in dtype dt: odd and dynamic
    sizes, broadcasts, residual prologues; rows of any length up to 20000 (all three row-kernel
    variants, the costliest kernels to compile) unless any_length_rows is False."""
    b = ag.IntVar("b", 1, 64)
    s = ag.IntVar("s", 1, 20000)
    t = lambda shape, name, d=dt: ag.Tensor(shape, dtype=d, name=name)
    x, r = t([b, 7, 768], "x"), t([b, 7, 768], "r")
    w, bias, v = t([768], "w"), t([768], "bias"), t([b, 7, 1], "v")
    xs, xo = t([3, s], "xs"), t([5, 13], "xo")
    img = t([b, 9, 11, 24], "img")
    idx = ag.Tensor([5, 3], dtype="int64", name="idx")
    emb = t([100, 64], "emb")
    rows = {"ln_long": ops.layernorm(xs), "sm_long": ops.softmax(xs, axis=-1)} if any_length_rows else {}
    return {
        **rows, "ew_fused": ops.gelu(x * w + 1.0), "ew_pair": x + r, "ew_bcast": ops.tanh(x) * v,
        "ew_odd": ops.sigmoid(xo) - 2.0, "ew_multi_out": ops.relu(xo * 3.0),
        "ln_residual": ops.layernorm(x + r * v, w, bias), "ln": ops.layernorm(x), "rms": ops.rmsnorm(x, w),
        "ln_odd": ops.layernorm(xo, t([13], "w13"), t([13], "b13")),
        "sm": ops.softmax(x * 0.125 + r, axis=-1), "sm_col": ops.softmax(x, axis=1),
        "sum": ops.reduce_sum(x, axes=[2]), "mean": ops.reduce_mean(x, axes=[1]), "var": ops.reduce_var(x, axes=[0, 2]),
        "max": ops.reduce_max(xs, axes=[1]), "min": ops.reduce_min(x, axes=[0]), "prod": ops.reduce_prod(xo, axes=[1]),
        "argmax": ops.argmax(x, axis=2), "argmin": ops.argmin(x, axis=1, select_last_index=True),
        "cumsum": ops.cumsum(x, axis=2, exclusive=True), "cumprod": ops.cumprod(x, axis=1, reverse=True),
        "maxpool": ops.max_pool2d(img, 3, 2, 1), "avgpool": ops.avg_pool2d(img, 3, 2, 1, count_include_pad=False),
        "gap": ops.global_avg_pool(img),
        "bn": ops.batchnorm(img, *[t([24], f"bn{i}") for i in range(4)]),
        "gn": ops.groupnorm(img, 4, t([24], "gw"), t([24], "gb")),
        "permute": ops.permute(x, [0, 2, 1]), "slice": ops.slice(x, [0, 1, 5], [1, 6, 700]),
        "concat": ops.concat([x, r], axis=2), "expand": ops.expand(w, [4, 768]), "split": ops.split(xo, [6, 7], axis=1)[1],
        "pad": ops.pad(img, [(0, 0), (1, 2), (2, 1), (0, 0)]), "pad_reflect": ops.pad(xo, [(1, 1), (2, 2)], mode="reflect"),
        "gather": ops.gather(emb, idx, axis=0),
    }


def int_cases() -> dict:
    x = ag.Tensor([ag.IntVar("b", 1, 8), 33], dtype="int32", name="xi")
    m = ag.Tensor([6, 10, 10, 8], dtype="int32", name="mi")
    return {"isum": ops.reduce_sum(x, axes=[1]), "imax": ops.reduce_max(x, axes=[0]), "iarg": ops.argmax(x, axis=1),
            "iperm": ops.permute(x, [1, 0]), "ipool": ops.max_pool2d(m, 2, 2), "iew": x * 3 + 1,
            "ipad": ops.pad(x, [(0, 0), (1, 1)], value=-7), "icumsum": ops.cumsum(x, axis=1)}


# -- coverage and decisions -------------------------------------------------------------------------

def test_covers_every_cpu_kind_but_gemm_conv_attention():
    cpu = supported_kinds("cpu")
    ours = {k for (b, k), fn in _LOWERINGS.items()
            if b == "cuda" and fn.__module__.rsplit(".", 1)[-1] in OWN and fn.__module__.startswith("aitgen.codegen.kernels")}
    # GROUPED is lowered by the GEMM family's dispatcher (kernels/cuda/grouped.py), not by these files.
    # TOPK, SCATTER_ND, LINEAR_ATTENTION, DET and ROI_ALIGN have no CUDA kernel yet: compiling them
    # for CUDA raises UnsupportedOpError; nor have the kinds that bind sizes during the run
    # (ops/dynamic.py; test_import_data_dependent.py); nor the int8 GEMM/conv (precision="int8", CPU);
    # nor LOOP, a host-side loop over its body's kernels (ops/loop.py; it runs on the CPU backend).
    assert cpu - ours - {OpKind.GROUPED} == {OpKind.GEMM, OpKind.BMM, OpKind.CONV2D, OpKind.CONV_TRANSPOSE2D,
                                             OpKind.ATTENTION, OpKind.TOPK, OpKind.SCATTER_ND,
                                             OpKind.LINEAR_ATTENTION, OpKind.DET, OpKind.ROI_ALIGN,
                                             OpKind.BIND_DIMS, OpKind.NONZERO, OpKind.NMS, OpKind.UNIQUE,
                                             OpKind.QGEMM, OpKind.QCONV2D, OpKind.LOOP}
    assert ours <= cpu


def _spec(y, arch="sm_80"):
    calls = [c for c in lower_cuda({"y": y}, arch) if "cuda/templates/copy" not in c.spec.template]
    assert len(calls) == 1, calls
    return calls[0]


def test_elementwise_packs_pairs_and_fallbacks():
    b = ag.IntVar("b", 1, 64)
    h = lambda shape, d="float16", n="x": ag.Tensor(shape, dtype=d, name=n)
    p = _spec(h([b, 768]) + h([768], n="y")).spec.param_dict()
    assert p["vec"] == 8 and p["pair"]["type"] == "__half2" and p["mode"] == "strided" and not p["check_run"]
    p = _spec(h([b, 768], "bfloat16") * 2.0).spec.param_dict()
    assert p["pair"]["type"] == "__nv_bfloat162" and p["mode"] == "flat" and p["tail"]  # b*768 may not be whole packs
    # fused: float32 math, no pairs; the float32 operand makes packs of 4 (16 bytes of it)
    p = _spec(ops.gelu(ops.cast(h([b, 768]), "float32") * ag.Tensor([768], name="w"))).spec.param_dict()
    assert p["vec"] == 4 and p["pair"] is None
    # a broadcast row of odd length: no packs; a dynamic row: checked at run time
    assert _spec(h([4, 13]) + h([13], n="y")).spec.param_dict()["vec"] == 1
    p = _spec(h([4, ag.IntVar("n", 1, 99)]) * h([4, 1], n="y")).spec.param_dict()
    assert p["vec"] == 8 and p["check_run"]
    assert _spec(h([3, 5]) * 2.0).spec.param_dict()["vec"] == 8  # 15 elements: 1 pack + a tail
    assert _spec(h([3]) * 2.0).spec.param_dict()["vec"] == 1      # fewer elements than a pack
    assert _spec(ag.Tensor([9], "int64", name="i") * 2).spec.param_dict()["vec"] == 2


def test_row_kernel_variants_follow_the_row_bounds():
    geo = lambda n: gpu_norm.row_geometry(n if isinstance(n, ag.IntVar) else ag.IntImm(n), [DType.float16], 32)
    g = geo(768)
    assert g["variants"] == ["warp"] and g["vec"] == 8 and g["warp_items"] == 24 and g["warp_tpr"] == 32
    g = geo(128)  # attention-score rows: 16 lanes of 8 halves each, two rows per warp
    assert g["warp_tpr"] == 16 and g["warp_items"] == 8
    assert geo(13)["vec"] == 1 and geo(13)["warp_tpr"] == 16 and geo(13)["warp_items"] == 1
    assert geo(4096)["variants"] == ["block"] and geo(4096)["block_items"] == 8
    assert geo(ag.IntVar("n", 1, 100000))["variants"] == ["warp", "block", "stream"]
    assert geo(ag.IntVar("n", 2000, 3000))["variants"] == ["block"]


def test_gather_and_copies_pick_units():
    emb = ag.Tensor([100, 64], dtype="float16", name="emb")
    p = _spec(ops.gather(emb, ag.Tensor([7], "int32", name="i"), axis=0)).spec.param_dict()
    assert [u["bytes"] for u in p["units"]] == [16, 8, 4] and p["index_t"] == "int32_t"
    x = ag.Tensor([8, 12, 64], dtype="float32", name="x")
    assert _spec(ops.permute(x, [0, 2, 1])).spec.param_dict()["mode"] == "tile"
    p = _spec(ops.slice(x, [0, 0, 8], [8, 12, 40])).spec.param_dict()
    assert p["mode"] == "contig" and [u["bytes"] for u in p["units"]] == [16, 8]


# -- nvcc -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", FLOATS)
def test_families_compile_sm80(cuda_toolchain, tmp_path, dt):
    """Rows of any length in float16 only here (the others: cuda_compile)."""
    outs = family_cases(dt, any_length_rows=dt == "float16")
    if dt == "float32":
        outs.update(int_cases())
    srcs = own_sources(lower_cuda(outs))
    assert len(srcs) >= 28
    nvcc(srcs, tmp_path, name=f"families_{dt}")


@pytest.mark.cuda_compile
@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_any_length_rows_compile_sm80(cuda_toolchain, tmp_path, dt):
    xs = ag.Tensor([3, ag.IntVar("s", 1, 20000)], dtype=dt, name="xs")
    srcs = own_sources(lower_cuda({"ln": ops.layernorm(xs), "rms": ops.rmsnorm(xs), "sm": ops.softmax(xs, axis=-1)}))
    nvcc(srcs, tmp_path, name=f"rows_{dt}")


def test_families_compile_sm90a(cuda_toolchain, tmp_path):
    """sm_90a: one kernel of each template (the code is the same for both archs; cuda_compile
    builds them all)."""
    calls = lower_cuda(family_cases("bfloat16"), "sm_90a")
    one = {}
    for c in calls:
        one.setdefault(c.spec.template, c)
    srcs = own_sources(one.values())
    assert len(srcs) >= 11
    nvcc(srcs, tmp_path, "sm_90a", "families_sm90a")


# Every element-wise kind, rendered for device code: a single op per kind and dtype.
_CLASSES = {"float": ("float32",), "int": ("int32",), "bool": ("bool",)}
_MORE = {"float": ("float16", "bfloat16"), "int": ("int8", "int64"), "bool": ()}


def _elementwise_ops(dt: str):
    """(kind, op) for every element-wise kind that takes operands of dtype dt."""
    out = []
    x, y = ag.Tensor([ag.IntVar("n", 1, 4096)], dtype=dt, name="x"), ag.Tensor([1], dtype=dt, name="y")
    for kind in registered_kinds():
        d = get_opdef(kind)
        if d.category is not Category.ELEMENTWISE or kind is OpKind.FUSED_ELEMENTWISE:
            continue
        special = {OpKind.GELU: [GeluAttrs("none"), GeluAttrs("tanh")], OpKind.CLAMP: [ClampAttrs(-1.0, 2.0)],
                   OpKind.CAST: [CastAttrs(DType(c)) for c in ("float32", "float16", "int32", "bool")]}
        attrs_list = special[kind] if kind in special else [d.attrs_type()]
        for attrs in attrs_list:
            n = d.num_inputs[0]
            inputs = {1: [x], 2: [x, y], 3: [ag.Tensor([1], dtype="bool", name="c"), x, y]}[n]
            try:  # unary ops through their builders' checks (bool operands are refused there)
                (t,) = [ew_ops._unary(kind, x, attrs)] if n == 1 else make_op(kind, inputs, attrs)
            except (DTypeError, ShapeError):
                continue
            out.append((kind, t))
    return out


def _kind_sources(dt: str) -> tuple[set, dict]:
    """Every element-wise kind that takes dtype dt, as the nodes of one fused expression over x, y
    (and a bool condition) with every node an output: one kernel renders them all."""
    ops_ = _elementwise_ops(dt)
    slots = {"x": 0, "y": 1, "c": 2}
    nodes = tuple(ExprNode(kind, t.producer.attrs, tuple(slots[i.name] for i in t.producer.inputs), t.dtype)
                  for kind, t in ops_)
    expr = Expr(3, nodes, tuple(range(3, 3 + len(nodes))))
    n = ag.IntVar("n", 1, 4096)
    ins = [ag.Tensor([n], dtype=dt, name="x"), ag.Tensor([n], dtype=dt, name="y"), ag.Tensor([n], dtype="bool", name="c")]
    outs = [ag.Tensor([n], dtype=t.dtype) for _, t in ops_]
    (call,) = gpu_ew.lower_expr_gpu(expr, outs, ins, LowerContext("cuda", None, None, arch="sm_80"), f"every {dt} kind")
    return {k for k, _ in ops_}, {call.spec.func: render(call.spec.template, func=call.spec.func, **call.spec.param_dict())}


def test_every_elementwise_kind_compiles_for_the_device(cuda_toolchain, tmp_path):
    """One kernel per dtype class (float32, int32, bool), all in one translation unit; every kind of
    the expression table renders in some class."""
    kinds, srcs = {}, {}
    for dts in _CLASSES.values():
        for dt in dts:
            kinds[dt], s = _kind_sources(dt)
            srcs.update(s)
    everything = set(common_expr._EXPR) | {OpKind.GELU, OpKind.CLAMP, OpKind.DIV}
    assert everything <= set().union(*kinds.values()), everything - set().union(*kinds.values())
    nvcc(srcs, tmp_path, name="kinds")


@pytest.mark.cuda_compile
@pytest.mark.parametrize("dt", [d for c in _MORE.values() for d in c])
def test_every_elementwise_kind_compiles_more_dtypes(cuda_toolchain, tmp_path, dt):
    nvcc(_kind_sources(dt)[1], tmp_path, name=f"kinds_{dt}")


@pytest.mark.cuda_compile
@pytest.mark.parametrize("dt", ["float32", "float16"])
def test_families_compile_sm90a_more(cuda_toolchain, tmp_path, dt):
    outs = family_cases(dt)
    outs.update(int_cases())
    nvcc(own_sources(lower_cuda(outs, "sm_90a")), tmp_path, "sm_90a", f"families_sm90a_{dt}")


def test_gather_compiles_on_its_own(cuda_toolchain, tmp_path):
    """Its translation unit as the build compiles it: alone, calling the runtime's bad-input record."""
    emb = ag.Tensor([100, 64], dtype="bfloat16", name="emb")
    srcs = own_sources(lower_cuda({"g": ops.gather(emb, ag.Tensor([3, 4], "int64", name="i"), axis=0)}))
    (src,) = srcs.values()
    (tmp_path / "g.cu").write_text(src)
    cmd = ["nvcc", *load_backend("cuda").compile_flags("sm_80"), "-c", str(tmp_path / "g.cu"), "-o", str(tmp_path / "g.o")]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    nm = subprocess.run(["nm", "-C", str(tmp_path / "g.o")], capture_output=True, text=True, check=False).stdout
    # a plain (not weak) reference: the runtime (backends/gpu/src/gpu_runtime.cu) must define it
    assert re.search(r"\bU ait::cuda::bad_input_record\(\)", nm), nm


def test_gather_model_links_the_runtime_record(cuda_toolchain, tmp_path):
    """A gather model as compile_model builds it: the kernel's reference binds to the runtime's
    record inside the library (hidden, not exported), and the record names the op."""
    emb = ag.Tensor([10, 8], dtype="float16", name="emb")
    idx = ag.Tensor([4], dtype="int64", name="idx")
    work = ag.compile_model({"y": ops.gather(emb, idx, axis=0, name="lookup")}, target="cuda", arch="sm_80",
                            workdir=tmp_path / "m", load=False)
    lib = work / json.loads((work / "model.json").read_text())["library"]
    every = subprocess.run(["nm", "-C", str(lib)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"\bt ait::cuda::bad_input_record\(\)", every), "the runtime's definition is missing or exported"
    exported = subprocess.run(["nm", "-D", "-C", "--defined-only", str(lib)], capture_output=True, text=True,
                              check=True).stdout
    assert "bad_input_record" not in exported
    (kernel,) = [p.read_text() for p in (work / "obj" / "src").glob("k_*.cu") if "gather_kernel" in p.read_text()]
    assert "kWhat = \"gather 'lookup'\";" in kernel


# -- the math, on the host ----------------------------------------------------------------------------

# Where the float32 result is exact (or a correctly rounded single operation): 1 ulp (the oracle
# computes some of them in float64 and rounds). Everything else: 4 ulp.
_EXACT = {OpKind.RELU, OpKind.ABS, OpKind.NEG, OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.DIV, OpKind.SQRT,
          OpKind.RECIPROCAL, OpKind.MAXIMUM, OpKind.MINIMUM, OpKind.CLAMP, OpKind.CAST, OpKind.FLOOR, OpKind.CEIL,
          OpKind.ROUND, OpKind.SIGN}


def _samples(dt: str, rng) -> np.ndarray:
    if dt == "bool":
        return rng.integers(0, 2, 4096).astype(bool)
    if dt != "float32":
        return rng.integers(-100, 100, 4096).astype(DType(dt).np)
    special = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 1e-30, -1e-30, 88.0, -88.0, 1e4, -1e4,
                        np.inf, -np.inf, np.nan], np.float32)
    return np.concatenate([special, rng.uniform(-12, 12, 2000).astype(np.float32),
                           rng.uniform(-1.2, 1.2, 1000).astype(np.float32),
                           np.geomspace(1e-6, 1e3, 1079).astype(np.float32)])


def test_host_functors_of_every_kind_match_the_oracle(cuda_toolchain, tmp_path):
    rng = np.random.default_rng(0)
    cases, funcs = [], []
    for dt in ("float32", "int32", "bool"):
        for kind, t in _elementwise_ops(dt):
            op = t.producer
            expr = Expr(len(op.inputs), (ExprNode(kind, op.attrs, tuple(range(len(op.inputs))), t.dtype),),
                        (len(op.inputs),))
            in_dtypes = [i.dtype for i in op.inputs]
            i = len(cases)
            cpp = common_expr.expr_cpp(expr, in_dtypes, prefix=f"k{i}_", qualifier="AIT_HD")
            loads = "\n".join(f"    const {COMPUTE[d]} s{j} = {load(d, f'static_cast<const {STORAGE[d]}*>(in[{j}])', 'e')};"
                              for j, d in enumerate(in_dtypes))
            body = "\n".join("    " + s for s in cpp["statements"])
            funcs.append("\n".join(cpp["functions"]) + f"""
extern "C" __attribute__((visibility("default"))) void eval{i}(const void* const* in, void* out, int64_t n) {{
  for (int64_t e = 0; e < n; ++e) {{
{loads}
{body}
    static_cast<{STORAGE[t.dtype]}*>(out)[e] = {store(t.dtype, f"s{len(op.inputs)}")};
  }}
}}""")
            cases.append((kind, op, expr, in_dtypes, t.dtype))
    src = tmp_path / "functors.cu"
    src.write_text(PRELUDE + "\n".join(funcs) + "\n")
    lib = tmp_path / "functors.so"
    cmd = ["nvcc", *load_backend("cuda").compile_flags("sm_80"), "-shared", str(src), "-o", str(lib)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    so = ctypes.CDLL(str(lib))
    checked, bad = set(), []
    for i, (kind, op, expr, in_dtypes, out_dtype) in enumerate(cases):
        x = _samples(in_dtypes[-1].value, rng)
        args = [x, rng.permutation(x)] if len(in_dtypes) == 2 else [x]
        if len(in_dtypes) == 3:
            args = [rng.integers(0, 2, x.size).astype(bool), x, rng.permutation(x)]
        args = [np.ascontiguousarray(a) for a in args]
        with np.errstate(all="ignore"):
            (ref,) = expr.evaluate(args)
        ref = np.broadcast_to(np.asarray(ref).astype(out_dtype.np), x.shape)
        got = np.empty(x.shape, out_dtype.np)
        ptrs = (ctypes.c_void_p * len(args))(*[a.ctypes.data for a in args])
        getattr(so, f"eval{i}")(ptrs, ctypes.c_void_p(got.ctypes.data), ctypes.c_int64(x.size))
        label = f"{kind.value} {op.attrs} {[d.value for d in in_dtypes]} -> {out_dtype.value}"
        checked.add(kind)
        if not out_dtype.is_float:
            if not np.array_equal(got, ref):
                bad.append((label, args[0][got != ref][:4], got[got != ref][:4], ref[got != ref][:4]))
            continue
        g, r64 = got.astype(np.float64), ref.astype(np.float64)
        # 1 or 4 ulp of the result, plus 4 float32 ulps of the operands' magnitude for results that
        # cancel (gelu-tanh of a large negative x is 0.5 x (1 + tanh), a difference near 1).
        ops_mag = np.max([np.abs(a.astype(np.float64)) for a in args], axis=0)
        tol = (1 if kind in _EXACT else 4) * np.spacing(np.abs(r64).astype(np.float32)).astype(np.float64)
        tol += 0 if kind in _EXACT else 4 * 2.0 ** -23 * np.maximum(ops_mag, 1.0)
        with np.errstate(invalid="ignore"):  # inf - inf where both are inf: equal already
            ok = np.where(np.isnan(r64), np.isnan(g), (g == r64) | (np.abs(g - r64) <= tol))
        if not ok.all():
            bad.append((label, args[0][~ok][:4], got[~ok][:4], ref[~ok][:4]))
    assert not bad, "\n".join(map(str, bad))
    expected = {k for k in registered_kinds()
                if get_opdef(k).category is Category.ELEMENTWISE and k is not OpKind.FUSED_ELEMENTWISE}
    assert checked == expected, expected - checked


# -- the kernels' numbers, on the host -----------------------------------------------------------------

@pytest.mark.parametrize("dts", [pytest.param(("float16", "int32"), id="float16+int32"),
                                 pytest.param(("float32", "bfloat16"), id="float32+bfloat16", marks=pytest.mark.slow)])
def test_kernels_emulated_on_the_host(cuda_toolchain, tmp_path, dts):
    """Every case of the GPU tier (test_gpu_own_ops.py) in these dtypes, its kernels compiled by g++
    (one library) against cuda_host_emu.h (threads as fibers: barriers and warp shuffles as on the
    GPU) and run with the memory plan's layout, against the oracle with the GPU tier's tolerances."""
    import cuda_host_emu as emu
    import test_gpu_own_ops as gpu
    built = []
    for case, dt in gpu.CASES:
        if dt in dts:
            cases, envs, rtol_of = case(dt)
            built.append((dt, cases, envs, rtol_of, *emu.lower(cases.outs)))
    lib = emu.build([c for *_, calls in built for c in calls], tmp_path)
    for dt, cases, envs, rtol_of, graph, plan, calls in built:
        gpu.compare(cases, dt, emu.Emulated(graph, plan, calls, lib).run, envs, rtol_of)


def test_emulated_gather_reports_a_bad_index(cuda_toolchain, tmp_path):
    """A bad index is clamped (no read out of bounds) and recorded in the device error record."""
    import cuda_host_emu as emu
    emb = ag.Tensor([10, 8], dtype="float16", name="emb")
    idx = ag.Tensor([4], dtype="int64", name="idx")
    graph, plan, calls = emu.lower({"y": ops.gather(emb, idx, axis=0, name="lookup")})
    model = emu.Emulated(graph, plan, calls, emu.build(calls, tmp_path))
    e = np.arange(80, dtype=np.float16).reshape(10, 8)
    with pytest.raises(IndexError, match=r"gather 'lookup': index 10 \(at flat position 2\) is out of range for size 10"):
        model.run({"emb": e, "idx": np.array([0, 3, 10, 1], np.int64)})
    np.testing.assert_array_equal(model.run({"emb": e, "idx": np.array([9, -10, 0, 1], np.int64)})["y"], e[[9, 0, 0, 1]])


# -- golden -------------------------------------------------------------------------------------------

def test_golden_fused_elementwise_and_layernorm(golden):
    b = ag.IntVar("b", 1, 64)
    x = ag.Tensor([b, 128, 768], dtype="float16", name="x")
    r = ag.Tensor([b, 128, 768], dtype="float16", name="r")
    w = ag.Tensor([768], dtype="float16", name="w")
    bias = ag.Tensor([768], dtype="float16", name="bias")
    calls = lower_cuda({"g": ops.gelu(x * w + bias), "ln": ops.layernorm(x + r, w, bias)})
    srcs = {c.spec.template.rsplit("/", 1)[-1]: render(c.spec.template, func=c.spec.func, **c.spec.param_dict())
            for c in calls}
    golden("cuda/own_fused_elementwise_f16.cu", srcs["elementwise.cu.j2"])
    golden("cuda/own_layernorm_residual_f16.cu", srcs["norm_rows.cu.j2"])


@pytest.mark.cuda_compile   # CI's step with CUTLASS installed, which cuda_toolchain asks for
@pytest.mark.parametrize("c, groups, dt", [(16, 16, "float16"), (12, 12, "bfloat16"), (6, 6, "float16"),
                                           (5, 5, "float16"), (8, 8, "float32"), (8, 2, "float16")])
def test_depthwise_and_grouped_conv_emulated(cuda_toolchain, tmp_path, c, groups, dt):
    """conv_simt.cu.j2 on the host: depthwise convs take the vector kernel (8/4/2 channels per thread
    where C and the bases allow, else one), grouped ones the one-output-per-thread kernel; with the
    fused bias + relu epilogue; against the oracle (float32 accumulation: a few ulps of the storage
    type)."""
    import cuda_host_emu as emu
    rng = np.random.default_rng(c + groups)
    x = ag.Tensor([ag.IntVar("n", 1, 3), 7, 9, c], dtype=dt, name="x")
    w = ag.constant(rng.standard_normal((c, 3, 3, c // groups)).astype(np.float32), dtype=dt)
    b = ag.constant(rng.standard_normal(c).astype(np.float32), dtype=dt)
    y = ops.relu(ops.conv2d(x, w, b, stride=(1, 2), padding=1, groups=groups))
    graph, plan, calls = emu.lower({"y": y})
    srcs = [render(cl.spec.template, func=cl.spec.func, **cl.spec.param_dict()) for cl in calls]
    assert any("conv_dw" in s for s in srcs) == (groups > 1)   # taken at run time when groups == C == K
    model = emu.Emulated(graph, plan, calls, emu.build(calls, tmp_path))
    feeds = {"x": rng.standard_normal((2, 7, 9, c)).astype(ag.DType(dt).np)}
    got, want = model.run(feeds)["y"], ag.reference.run({"y": y}, feeds)["y"]
    tol = {"float32": 1e-5, "float16": 2e-2, "bfloat16": 6e-2}[dt]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)
