"""One small graph per op kind, for the GPU tier (and its compile-only twin): every case builds its
outputs for a float dtype and random feeds in the domain its math wants (log of positives, acos
inside [-1, 1], divisors away from zero, nan/inf for isnan/isinf). Cases exercise dynamic dims,
broadcasting, strides and the attributes that pick different kernel paths.

`build_all(dtype, rng, fusion)` merges every case into one graph (outputs and inputs prefixed by
the case name), so a dtype costs one build, and `kinds_in(outputs)` says which kinds a build
really lowers (after the pipeline, which fuses when asked).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

import aitgen as ag
from aitgen import ops
from aitgen.compiler import compile_options
from aitgen.ir.op import OpKind

Built = tuple[dict, dict]          # (outputs name -> Tensor, feeds name -> array)
Builder = Callable[[str, str, np.random.Generator], Built]   # (prefix, float dtype, rng)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    build: Builder
    fusion: bool = False          # True: built with the fusion passes (fused kinds, epilogues)
    per_float_dtype: bool = True  # False: integer/bool math, built once (in the float32 build)


_VARS: dict[str, ag.IntVar] = {}


def _inp(p: str, name: str, shape, dtype, rng, lo=-3.0, hi=3.0):
    """A graph input and its feed; a str dim is an IntVar of the case (one per name) in [1, 6], fed at 5."""
    dims = [_VARS.setdefault(f"{p}_dim_{d}", ag.IntVar(f"{p}_dim_{d}", 1, 6)) if isinstance(d, str) else d
            for d in shape]
    t = ag.Tensor(dims, dtype=dtype, name=f"{p}_{name}")
    concrete = [5 if isinstance(d, str) else d for d in shape]
    if t.dtype.is_float:
        a = rng.uniform(lo, hi, concrete)
    elif t.dtype is ag.DType.bool:
        a = rng.random(concrete) < 0.5
    else:
        a = rng.integers(int(lo), int(hi), concrete)
    return t, {t.name: a.astype(t.dtype.np)}


def _const(shape, dtype, rng, scale=1.0):
    return ag.constant((rng.standard_normal(shape) * scale).astype(np.float32), dtype=dtype)


# -- element-wise ------------------------------------------------------------------------------

_DOMAIN = {OpKind.LOG: (0.1, 3), OpKind.SQRT: (0.1, 3), OpKind.RSQRT: (0.1, 3), OpKind.RECIPROCAL: (0.5, 2),
           OpKind.ASIN: (-0.9, 0.9), OpKind.ACOS: (-0.9, 0.9), OpKind.ATANH: (-0.9, 0.9), OpKind.ACOSH: (1.1, 3),
           OpKind.LOG1P: (-0.5, 3), OpKind.TAN: (-1, 1)}
_UNARY_FLOAT = [OpKind.RELU, OpKind.GELU, OpKind.SILU, OpKind.SIGMOID, OpKind.TANH, OpKind.HARDSWISH, OpKind.EXP,
                OpKind.LOG, OpKind.SQRT, OpKind.RSQRT, OpKind.RECIPROCAL, OpKind.ABS, OpKind.NEG, OpKind.ERF,
                OpKind.SIN, OpKind.COS, OpKind.TAN, OpKind.ASIN, OpKind.ACOS, OpKind.ATAN, OpKind.SINH,
                OpKind.COSH, OpKind.ASINH, OpKind.ACOSH, OpKind.ATANH, OpKind.EXPM1, OpKind.LOG1P, OpKind.FLOOR,
                OpKind.CEIL, OpKind.ROUND, OpKind.SIGN]
_BINARY_FLOAT = [OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.DIV, OpKind.POW, OpKind.MAXIMUM, OpKind.MINIMUM,
                 OpKind.MOD, OpKind.FMOD, OpKind.EQUAL, OpKind.NOT_EQUAL, OpKind.LESS, OpKind.LESS_EQUAL,
                 OpKind.GREATER, OpKind.GREATER_EQUAL]


def _unary(kind: OpKind) -> Builder:
    def build(p, dt, rng):
        lo, hi = _DOMAIN.get(kind, (-3, 3))
        x, f = _inp(p, "x", ["b", 7, 9], dt, rng, lo, hi)   # odd sizes: no vector width divides them
        return {p: getattr(ops, kind.value)(x)}, f
    return build


def _binary(kind: OpKind) -> Builder:
    def build(p, dt, rng):
        positive = kind in (OpKind.POW, OpKind.DIV, OpKind.MOD, OpKind.FMOD)
        a, fa = _inp(p, "a", ["b", 3, 8], dt, rng, 0.5 if kind is OpKind.POW else -3, 3)
        b, fb = _inp(p, "b", [3, 1], dt, rng, 0.5 if positive else -3, 2 if positive else 3)   # broadcast
        c, fc = _inp(p, "c", [8], dt, rng)
        fn = getattr(ops, kind.value)
        return {p: fn(a, b), f"{p}_row": fn(a, c) if kind is not OpKind.POW else fn(a, ops.abs(c) + 0.5)}, \
            {**fa, **fb, **fc}
    return build


def _special_unary(p, dt, rng):
    x, f = _inp(p, "x", ["b", 33], dt, rng)
    z, fz = _inp(p, "z", ["b", 33], dt, rng)
    fz[z.name][0, :3] = [np.nan, np.inf, -np.inf]
    return {f"{p}_isnan": ops.isnan(z), f"{p}_isinf": ops.isinf(z), f"{p}_clamp": ops.clamp(x, -0.5, 2.0),
            f"{p}_gelu_tanh": ops.gelu(x, "tanh"), f"{p}_relu6": ops.clamp(x, 0.0, 6.0)}, {**f, **fz}


def _casts(p, dt, rng):
    x, fx = _inp(p, "x", ["b", 12], dt, rng, -50, 50)
    fx[x.name] = (np.round(fx[x.name].astype(np.float32)) + 0.25).astype(fx[x.name].dtype)  # away from .0/.5
    i, fi = _inp(p, "i", ["b", 12], "int64", rng, -100, 100)
    other = "bfloat16" if dt != "bfloat16" else "float16"
    return {f"{p}_to_int": ops.cast(x, "int32"), f"{p}_to_other": ops.cast(x, other),
            f"{p}_from_int": ops.cast(i, dt), f"{p}_to_bool": ops.cast(i, "bool")}, {**fx, **fi}


def _where(p, dt, rng):
    c, fc = _inp(p, "c", ["b", 1, 8], "bool", rng)
    a, fa = _inp(p, "a", ["b", 4, 8], dt, rng)
    b, fb = _inp(p, "b", [4, 1], dt, rng)
    return {p: ops.where(c, a, b)}, {**fc, **fa, **fb}


def _int_bool(p, dt, rng):
    i, fi = _inp(p, "i", ["b", 10], "int32", rng, -1000, 1000)
    j, fj = _inp(p, "j", [10], "int32", rng, 1, 50)
    u, fu = _inp(p, "u", ["b", 10], "bool", rng)
    v, fv = _inp(p, "v", [10], "bool", rng)
    k, fk = _inp(p, "k", [10], "int32", rng, 0, 32)   # shift counts within the width
    outs = {f"{p}_shl": ops.shift_left(i, k), f"{p}_shr": ops.shift_right(i, k),
            f"{p}_and": ops.bitwise_and(i, j), f"{p}_or": ops.bitwise_or(i, j), f"{p}_xor": ops.bitwise_xor(i, j),
            f"{p}_not": ops.bitwise_not(i), f"{p}_mod": ops.mod(i, j), f"{p}_fmod": ops.fmod(i, j),
            f"{p}_land": ops.logical_and(u, v), f"{p}_lor": ops.logical_or(u, v), f"{p}_lnot": ops.logical_not(u),
            f"{p}_iadd": i + j, f"{p}_imax": ops.maximum(i, j)}
    return outs, {**fi, **fj, **fu, **fv, **fk}


# -- GEMM, conv, pooling ---------------------------------------------------------------------------

def _gemm(p, dt, rng):
    x, f = _inp(p, "x", ["b", 24], dt, rng, -1, 1)
    w, bias = _const((40, 24), dt, rng, 0.2), _const((40,), dt, rng)
    a2, fa = _inp(p, "a2", [24, 16], dt, rng, -1, 1)   # 'c' layout: a stored [K, M]
    b2 = _const((24, 40), dt, rng, 0.2)
    return {f"{p}_linear": ops.linear(x, w, bias), f"{p}_rrr": ops.gemm(x, b2),
            f"{p}_crr": ops.gemm(a2, b2, layout="crr")}, {**f, **fa}


def _bmm(p, dt, rng):
    a, fa = _inp(p, "a", [2, "b", 12], dt, rng, -1, 1)
    b, fb = _inp(p, "b", [2, 16, 12], dt, rng, -1, 1)
    return {f"{p}_nt": ops.bmm(a, b, trans_b=True), f"{p}_bcast": ops.matmul(a, _const((12, 20), dt, rng, 0.3))}, \
        {**fa, **fb}


def _conv(p, dt, rng):
    x, f = _inp(p, "x", ["b", 9, 11, 8], dt, rng, -1, 1)
    return {f"{p}_3x3": ops.conv2d(x, _const((16, 3, 3, 8), dt, rng, 0.2), _const((16,), dt, rng), padding=1),
            f"{p}_s2": ops.conv2d(x, _const((8, 3, 3, 8), dt, rng, 0.2), stride=2, padding=(0, 1, 1, 0)),
            f"{p}_dw": ops.conv2d(x, _const((8, 3, 3, 1), dt, rng, 0.3), padding=1, groups=8),
            f"{p}_1x1": ops.conv2d(x, _const((24, 1, 1, 8), dt, rng, 0.3))}, f


def _conv_t(p, dt, rng):
    x, f = _inp(p, "x", ["b", 5, 6, 8], dt, rng, -1, 1)
    return {p: ops.conv_transpose2d(x, _const((8, 3, 3, 4), dt, rng, 0.3), _const((4,), dt, rng), stride=2,
                                    padding=1, output_padding=1)}, f


def _pool(p, dt, rng):
    x, f = _inp(p, "x", ["b", 9, 10, 6], dt, rng)
    return {f"{p}_max": ops.max_pool2d(x, 3, 2, padding=1), f"{p}_avg": ops.avg_pool2d(x, 3, 2, padding=1),
            f"{p}_avg_excl": ops.avg_pool2d(x, 2, count_include_pad=False, ceil_mode=True),
            f"{p}_global": ops.global_avg_pool(x, keepdims=False)}, f


# -- norms, softmax, reductions ------------------------------------------------------------------

def _norms(p, dt, rng):
    x, f = _inp(p, "x", ["b", 5, 48], dt, rng)
    y, fy = _inp(p, "y", ["b", 4, 4, 16], dt, rng)
    c = lambda n, s=0.5: _const((n,), dt, rng, s)  # noqa: E731
    var = ag.constant(rng.uniform(0.5, 2.0, 16).astype(np.float32), dtype=dt)
    return {f"{p}_ln": ops.layernorm(x, c(48) + 1.0, c(48)), f"{p}_rms": ops.rmsnorm(x, c(48) + 1.0),
            f"{p}_gn": ops.groupnorm(y, 4, c(16) + 1.0, c(16)), f"{p}_bn": ops.batchnorm(y, c(16), c(16), c(16), var),
            f"{p}_ln2": ops.layernorm(x, eps=1e-3, num_axes=2)}, {**f, **fy}


def _softmax(p, dt, rng):
    x, f = _inp(p, "x", ["b", 3, 37], dt, rng, -8, 8)
    w, fw = _inp(p, "w", ["b", 1000], dt, rng, -8, 8)   # a row longer than one block's first pass
    return {f"{p}_last": ops.softmax(x, -1), f"{p}_mid": ops.softmax(x, 1), f"{p}_long": ops.softmax(w)}, {**f, **fw}


def _reduce(p, dt, rng):
    x, f = _inp(p, "x", ["b", 6, 20], dt, rng, -2, 2)
    return {f"{p}_sum": ops.reduce_sum(x, -1), f"{p}_mean": ops.reduce_mean(x, (0, 2), keepdims=True),
            f"{p}_max": ops.reduce_max(x, 1), f"{p}_min": ops.reduce_min(x, -1, keepdims=True),
            f"{p}_var": ops.reduce_var(x, -1, correction=1), f"{p}_prod": ops.reduce_prod(ops.abs(x) * 0.3 + 0.8, -1),
            f"{p}_argmax": ops.argmax(x, 2), f"{p}_argmin": ops.argmin(x, 1, keepdims=False)}, f


def _scan(p, dt, rng):
    x, f = _inp(p, "x", ["b", 6, 40], dt, rng, -1, 1)
    return {f"{p}_cumsum": ops.cumsum(x, -1), f"{p}_cumsum_rev_excl": ops.cumsum(x, 1, exclusive=True, reverse=True),
            f"{p}_cumprod": ops.cumprod(ops.abs(x) * 0.2 + 0.9, -1)}, f


# -- memory ops, gather, attention ---------------------------------------------------------------

def _memory(p, dt, rng):
    x, f = _inp(p, "x", ["b", 4, 6], dt, rng)
    y, fy = _inp(p, "y", ["b", 2, 6], dt, rng)
    parts = ops.split(x, [1, 3], axis=1)
    return {f"{p}_perm": ops.permute(x, [2, 0, 1]), f"{p}_cat": ops.concat([x, y], axis=1),
            f"{p}_split0": parts[0], f"{p}_split1": parts[1],
            f"{p}_slice": ops.slice(x, [1, 5], [4, 0], axes=[1, 2], steps=[2, -2]),
            f"{p}_pad": ops.pad(x, [(0, 0), (1, 2), (0, 3)], value=0.5),
            f"{p}_expand": ops.expand(ops.reshape(y, [-1, 2, 1, 6]), [-1, 2, 3, 6])}, {**f, **fy}


def _gather(p, dt, rng):
    ids, fi = _inp(p, "ids", ["b", 7], "int64", rng, 0, 50)
    idx, fx = _inp(p, "idx", [3], "int32", rng, -4, 4)
    x, f = _inp(p, "x", ["b", 4, 5], dt, rng)
    return {f"{p}_emb": ops.embedding(ids, _const((50, 24), dt, rng)), f"{p}_axis1": ops.gather(x, idx, axis=1)}, \
        {**fi, **fx, **f}


def _attention(p, dt, rng):
    q, fq = _inp(p, "q", ["b", 2, 19, 32], dt, rng, -1, 1)
    k, fk = _inp(p, "k", ["b", 2, 23, 32], dt, rng, -1, 1)
    v, fv = _inp(p, "v", ["b", 2, 23, 32], dt, rng, -1, 1)
    m, fm = _inp(p, "m", ["b", 1, 1, 23], dt, rng, -4, 0)
    return {f"{p}_mask": ops.scaled_dot_product_attention(q, k, v, m),
            f"{p}_causal": ops.scaled_dot_product_attention(q, q, q, causal=True)}, {**fq, **fk, **fv, **fm}


# -- fused (the fusion passes make the kinds) -----------------------------------------------------

def _fused(p, dt, rng):
    x, f = _inp(p, "x", ["b", 16, 24], dt, rng, -1, 1)
    img, fi = _inp(p, "img", ["b", 6, 6, 8], dt, rng, -1, 1)
    h = ops.gelu(ops.linear(x, _const((24, 24), dt, rng, 0.2), _const((24,), dt, rng))) + x   # GEMM epilogue
    conv = ops.relu(ops.conv2d(img, _const((8, 3, 3, 8), dt, rng, 0.2), _const((8,), dt, rng), padding=1) + img)
    e = ops.tanh(x * 0.5 + 1.0) * ops.sigmoid(x)                                                # one group
    heads = ops.permute(ops.reshape(x, [-1, 16, 2, 12]), [0, 2, 1, 3])                          # [b, 2, 16, 12]
    scores = ops.softmax(ops.bmm(heads, heads, trans_b=True) * (12 ** -0.5), -1)
    t1, f1 = _inp(p, "t1", ["b", 32], dt, rng, -1, 1)     # two towers: independent GEMMs, one group
    t2, f2 = _inp(p, "t2", ["b", 16], dt, rng, -1, 1)
    towers = {f"{p}_tower{i}": ops.relu(ops.linear(t, _const((n, t.shape[1].value), dt, rng, 0.2), _const((n,), dt, rng)))
              for i, (t, n) in enumerate(((t1, 24), (t2, 40)))}
    return {f"{p}_gemm_epi": h, f"{p}_conv_epi": conv, f"{p}_ew": e, f"{p}_ln_res": ops.layernorm(e + x),
            f"{p}_att": ops.bmm(scores, heads), **towers}, {**f, **fi, **f1, **f2}


CASES: list[Case] = (
    [Case(f"u_{k.value}", _unary(k)) for k in _UNARY_FLOAT]
    + [Case(f"b_{k.value}", _binary(k)) for k in _BINARY_FLOAT]
    + [Case("special", _special_unary), Case("cast", _casts), Case("where", _where),
       Case("intbool", _int_bool, per_float_dtype=False), Case("gemm", _gemm), Case("bmm", _bmm),
       Case("conv", _conv), Case("conv_t", _conv_t), Case("pool", _pool), Case("norm", _norms),
       Case("softmax", _softmax), Case("reduce", _reduce), Case("scan", _scan), Case("memory", _memory), Case("gather", _gather),
       Case("attention", _attention), Case("fused", _fused, fusion=True)])


def kinds_in(outputs: dict, fusion: bool) -> set[OpKind]:
    """The op kinds a build of `outputs` lowers (after the pipeline), reshapes aside."""
    # target cuda: group_ops forms only the groups the CUDA backend renders
    g = ag.passes.run_pipeline(ag.Graph.from_outputs(outputs), compile_options(target="cuda", fusion=fusion))
    return {op.kind for op in g.ops} - {OpKind.RESHAPE}


def case_kinds(case: Case, dtype: str = "float32") -> set[OpKind]:
    outs, _ = case.build(case.name, dtype, np.random.default_rng(0))
    return kinds_in(outs, case.fusion)


def build_all(dtype: str, fusion: bool, supported: set[OpKind], seed: int = 0) -> tuple[dict, dict, dict]:
    """Every case of this fusion setting whose kinds the backend lowers, merged: (outputs, feeds,
    case name -> its output names). Cases needing an unsupported kind are left out (and listed by
    the caller's skip)."""
    outs, feeds, owners = {}, {}, {}
    for case in CASES:
        if case.fusion != fusion or (not case.per_float_dtype and dtype != "float32"):
            continue
        o, f = case.build(case.name, dtype, np.random.default_rng(seed))
        if not kinds_in(o, fusion) <= supported:
            continue
        outs.update(o)
        feeds.update(f)
        owners[case.name] = list(o)
    return outs, feeds, owners


if __name__ == "__main__":
    # Pre-flight before spending GPU time: build (no GPU needed) the catalogue as the gpu tier will.
    #   python tests/backends/cuda/op_catalogue.py sm_90a float32 float16 bfloat16 [--jobs 2]
    import argparse
    import json
    import time

    from aitgen.codegen.lower import supported_kinds

    ap = argparse.ArgumentParser()
    ap.add_argument("arch")
    ap.add_argument("dtypes", nargs="+")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--workdir", default="/tmp/aitgen_op_catalogue")
    args = ap.parse_args()
    for dtype in args.dtypes:
        for fusion in (False, True):
            outs, _, owners = build_all(dtype, fusion, supported_kinds("cuda"))
            t0 = time.perf_counter()
            work = ag.compile_model(outs, target="cuda", arch=args.arch, fusion=fusion, load=False, jobs=args.jobs,
                                    workdir=f"{args.workdir}/{args.arch}_{dtype}_{int(fusion)}")
            r = json.loads((work / "report.json").read_text())
            print(f"{args.arch} {dtype} fusion={fusion}: {len(owners)} cases, {r['unique_kernels']} kernels, "
                  f"{r['cache_misses']} compiled, {time.perf_counter() - t0:.0f} s")
