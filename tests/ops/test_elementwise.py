"""Element-wise ops through the oracle against independent float64 numpy/math (and torch).

Tolerances (every comparison below uses one of these):
- F32: oracle (float32 compute) vs float64 maths of the same float32 inputs: rtol 1e-5, atol 1e-6.
- F16: float16 storage; both sides round to float16, so they differ by at most one float16 ulp
  (relative 2**-10 ~ 9.8e-4): rtol 1e-3, atol 1e-3.
- BF16: bfloat16 storage, one bfloat16 ulp (relative 2**-7 ~ 7.8e-3): rtol 8e-3, atol 8e-3.
- TORCH: oracle vs torch float32 (different libm): rtol 1e-5, atol 1e-6.
- MATMUL (the @ sugar): float32 sums over K=4 vs float64: rtol 1e-5, atol 1e-5.
Integer, bool, comparison and cast results are compared exactly.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError

F32 = dict(rtol=1e-5, atol=1e-6)
F16 = dict(rtol=1e-3, atol=1e-3)
BF16 = dict(rtol=8e-3, atol=8e-3)
TORCH = dict(rtol=1e-5, atol=1e-6)
MATMUL = dict(rtol=1e-5, atol=1e-5)
TOL = {"float32": F32, "float16": F16, "bfloat16": BF16}
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

_erf = np.vectorize(math.erf, otypes=[np.float64])


def run1(y, feeds):
    return ag.reference.run({"y": y}, feeds)["y"]


def rand(shape, dtype="float32", lo=-3.0, hi=3.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(NP[dtype])


def close(got, want, dtype="float32"):
    """Compare an oracle output with float64 maths rounded to the output's storage type."""
    want = np.asarray(want, np.float64).astype(NP[dtype])
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **TOL[dtype])


# -- unary ----------------------------------------------------------------------------------
# name -> (builder, float64 maths, input range)
UNARY = {
    "relu": (ops.relu, lambda x: np.where(x > 0, x, 0.0), (-3, 3)),
    "gelu": (ops.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), (-4, 4)),
    "gelu_tanh": (lambda t: ops.gelu(t, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), (-4, 4)),
    "silu": (ops.silu, lambda x: x / (1 + np.exp(-x)), (-6, 6)),
    "sigmoid": (ops.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-8, 8)),
    "tanh": (ops.tanh, lambda x: np.vectorize(math.tanh)(x), (-4, 4)),
    "hardswish": (ops.hardswish, lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6, (-5, 5)),
    "exp": (ops.exp, lambda x: np.vectorize(math.exp)(x), (-4, 4)),
    "log": (ops.log, lambda x: np.vectorize(math.log)(x), (0.05, 10)),
    "sqrt": (ops.sqrt, lambda x: np.vectorize(math.sqrt)(x), (0.0, 10)),
    "rsqrt": (ops.rsqrt, lambda x: 1 / np.vectorize(math.sqrt)(x), (0.1, 10)),
    "reciprocal": (ops.reciprocal, lambda x: 1 / x, (0.2, 5)),
    "abs": (ops.abs, lambda x: np.where(x < 0, -x, x), (-3, 3)),
    "neg": (ops.neg, lambda x: -x, (-3, 3)),
    "erf": (ops.erf, _erf, (-3, 3)),
    "clamp": (lambda t: ops.clamp(t, -1.0, 0.5), lambda x: np.minimum(np.maximum(x, -1.0), 0.5), (-3, 3)),
    "clamp_min": (lambda t: ops.clamp(t, min=-0.5), lambda x: np.maximum(x, -0.5), (-3, 3)),
    "clamp_max": (lambda t: ops.clamp(t, max=0.25), lambda x: np.minimum(x, 0.25), (-3, 3)),
    "relu6": (ops.relu6, lambda x: np.minimum(np.maximum(x, 0), 6), (-3, 9)),
}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, dtype):
    build, maths, (lo, hi) = UNARY[name]
    x = ag.Tensor([4, 33], dtype, name="x")
    xv = rand((4, 33), dtype, lo, hi)
    y = build(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    close(run1(y, {"x": xv}), maths(xv.astype(np.float64)), dtype)


@pytest.mark.parametrize("build,maths", [(ops.relu, lambda x: np.where(x > 0, x, 0)),
                                         (ops.abs, lambda x: np.where(x < 0, -x, x)),
                                         (ops.neg, lambda x: -x),
                                         (lambda t: ops.clamp(t, -2, 3), lambda x: np.minimum(np.maximum(x, -2), 3)),
                                         (ops.relu6, lambda x: np.minimum(np.maximum(x, 0), 6))])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_unary_int(build, maths, dtype):
    x = ag.Tensor([9], dtype, name="x")
    xv = np.array([-100, -7, -3, -1, 0, 1, 2, 7, 100], dtype)
    got = run1(build(x), {"x": xv})
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, maths(xv.astype(np.int64)))


def test_logical_not():
    x = ag.Tensor([5], "bool", name="x")
    xv = np.array([True, False, True, True, False])
    np.testing.assert_array_equal(run1(ops.logical_not(x), {"x": xv}), [not v for v in xv])


def test_unary_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = ag.Tensor([7, 9], name="x")
    xv = rand((7, 9), lo=-4, hi=4)
    t = torch.from_numpy(xv)
    pairs = [(ops.gelu(x), F.gelu(t)), (ops.gelu(x, "tanh"), F.gelu(t, approximate="tanh")),
             (ops.silu(x), F.silu(t)), (ops.sigmoid(x), torch.sigmoid(t)), (ops.tanh(x), torch.tanh(t)),
             (ops.hardswish(x), F.hardswish(t)), (ops.erf(x), torch.erf(t)), (ops.relu6(x), F.relu6(t)),
             (ops.exp(x), torch.exp(t)), (ops.rsqrt(ops.abs(x) + 0.5), torch.rsqrt(t.abs() + 0.5))]
    outs = ag.reference.run([y for y, _ in pairs], {"x": xv})
    for got, (_, want) in zip(outs.values(), pairs):
        np.testing.assert_allclose(got, want.numpy(), **TORCH)


# -- cast -----------------------------------------------------------------------------------
DTYPES = ["float32", "float16", "bfloat16", "int8", "int32", "int64", "bool"]
# Exactly representable in every float type (<= 8 significant bits) and in int8.
FLOATS = [-100.0, -3.75, -1.5, -0.5, 0.0, 0.25, 1.0, 2.5, 7.75, 100.0]
INTS = [-100, -3, -1, 0, 1, 2, 7, 100]


def _source(dtype):
    base = FLOATS if dtype in NP else INTS if dtype != "bool" else [True, False, True, False]
    return np.array(base, dtype=NP.get(dtype, dtype))


def _cast_expected(values, src, dst):
    out = []
    for v in values.tolist():
        v = float(v) if src in NP else int(v) if src != "bool" else bool(v)
        if dst == "bool":
            out.append(v != 0)
        elif dst in NP:
            out.append(float(v))
        else:
            out.append(math.trunc(v))  # C semantics: float -> int rounds toward zero
    return np.array(out, dtype=NP.get(dst, dst))


@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_cast(src, dst):
    xv = _source(src)
    x = ag.Tensor(xv.shape, src, name="x")
    y = ops.cast(x, dst)
    assert y.dtype == ag.DType[dst]
    got = run1(y, {"x": xv})
    assert got.dtype == np.dtype(NP.get(dst, dst))
    np.testing.assert_array_equal(got, _cast_expected(xv, src, dst))


def test_cast_torch():
    torch = pytest.importorskip("torch")
    xv = np.array([-2.9, -1.5, -0.4, 0.0, 0.6, 1.5, 2.9], np.float32)
    x = ag.Tensor([7], name="x")
    got = run1(ops.cast(x, "int32"), {"x": xv})
    np.testing.assert_array_equal(got, torch.from_numpy(xv).to(torch.int32).numpy())


# -- binary ---------------------------------------------------------------------------------
ARITH = {"add": (ops.add, lambda a, b: a + b), "sub": (ops.sub, lambda a, b: a - b),
         "mul": (ops.mul, lambda a, b: a * b), "div": (ops.div, lambda a, b: a / b),
         "pow": (ops.pow, lambda a, b: np.abs(a) ** b),
         "maximum": (ops.maximum, lambda a, b: np.where(a >= b, a, b)),
         "minimum": (ops.minimum, lambda a, b: np.where(a <= b, a, b))}
COMPARE = {"equal": (ops.equal, lambda a, b: a == b), "not_equal": (ops.not_equal, lambda a, b: a != b),
           "less": (ops.less, lambda a, b: a < b), "less_equal": (ops.less_equal, lambda a, b: a <= b),
           "greater": (ops.greater, lambda a, b: a > b),
           "greater_equal": (ops.greater_equal, lambda a, b: a >= b)}


def _binary_inputs(dtype, shape_a, shape_b):
    av = rand(shape_a, dtype, 0.5, 3.0, seed=1)
    bv = rand(shape_b, dtype, 0.5, 3.0, seed=2)
    if shape_a == shape_b:
        bv.flat[::3] = av.flat[::3]  # equal elements exercise ==, <= and >=
    return av, bv


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(ARITH))
def test_arith(name, dtype):
    build, maths = ARITH[name]
    a, b = ag.Tensor([3, 8], dtype, name="a"), ag.Tensor([3, 8], dtype, name="b")
    av, bv = _binary_inputs(dtype, (3, 8), (3, 8))
    if name == "pow":  # keep the base positive so the float64 maths is defined everywhere
        av = np.abs(av)
    close(run1(build(a, b), {"a": av, "b": bv}), maths(av.astype(np.float64), bv.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
@pytest.mark.parametrize("name", list(COMPARE))
def test_compare(name, dtype):
    build, maths = COMPARE[name]
    a, b = ag.Tensor([3, 8], dtype, name="a"), ag.Tensor([3, 8], dtype, name="b")
    av, bv = _binary_inputs(dtype if dtype != "int32" else "float32", (3, 8), (3, 8))
    if dtype == "int32":
        av, bv = (av * 3).astype(np.int32), (bv * 3).astype(np.int32)
    y = build(a, b)
    assert y.dtype == ag.DType.bool
    np.testing.assert_array_equal(run1(y, {"a": av, "b": bv}), maths(av.astype(np.float64), bv.astype(np.float64)))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_int_arith(dtype):
    a, b = ag.Tensor([8], dtype, name="a"), ag.Tensor([8], dtype, name="b")
    av = np.array([7, -7, 7, -7, 0, 5, 100, -100], dtype)
    bv = np.array([2, 2, -2, -2, 3, 5, 7, 7], dtype)
    feeds = {"a": av, "b": bv}
    pa, pb = av.tolist(), bv.tolist()
    outs = ag.reference.run([a + b, a - b, a * b, a / b, ops.maximum(a, b), ops.minimum(a, b)], feeds)
    want = [[x + y for x, y in zip(pa, pb)], [x - y for x, y in zip(pa, pb)],
            [np.array(x * y).astype(dtype) for x, y in zip(pa, pb)],  # int8 products wrap, as in C
            [math.trunc(x / y) for x, y in zip(pa, pb)],  # integer division truncates toward zero
            [max(x, y) for x, y in zip(pa, pb)], [min(x, y) for x, y in zip(pa, pb)]]
    for got, w in zip(outs.values(), want):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, np.array(w).astype(dtype))


def test_logical_binary():
    a, b = ag.Tensor([4], "bool", name="a"), ag.Tensor([4], "bool", name="b")
    feeds = {"a": np.array([True, True, False, False]), "b": np.array([True, False, True, False])}
    outs = ag.reference.run([ops.logical_and(a, b), ops.logical_or(a, b), ops.equal(a, b)], feeds)
    np.testing.assert_array_equal(outs["output_0"], [True, False, False, False])
    np.testing.assert_array_equal(outs["output_1"], [True, True, True, False])
    np.testing.assert_array_equal(outs["output_2"], [True, False, False, True])


def test_binary_torch():
    torch = pytest.importorskip("torch")
    a, b = ag.Tensor([4, 1, 6], name="a"), ag.Tensor([5, 1], name="b")
    av, bv = rand((4, 1, 6), lo=0.5, hi=2, seed=3), rand((5, 1), lo=0.5, hi=2, seed=4)
    ta, tb = torch.from_numpy(av), torch.from_numpy(bv)
    pairs = [(a + b, ta + tb), (a - b, ta - tb), (a * b, ta * tb), (a / b, ta / tb), (a ** b, ta ** tb),
             (ops.maximum(a, b), torch.maximum(ta, tb)), (ops.less(a, b), ta < tb)]
    outs = ag.reference.run([y for y, _ in pairs], {"a": av, "b": bv})
    for got, (_, want) in zip(outs.values(), pairs):
        np.testing.assert_allclose(got, want.numpy(), **TORCH)


# -- broadcasting ---------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb,sy", [
    ((), (3, 4), (3, 4)),            # rank 0 on the left
    ((2, 3), (), (2, 3)),            # rank 0 on the right
    ((3, 1), (1, 4), (3, 4)),        # size-1 dims on both sides
    ((2, 3, 4), (4,), (2, 3, 4)),    # different ranks
    ((5, 1, 1), (1, 6), (5, 1, 6)),
    ((1,), (1, 1, 1), (1, 1, 1)),
    ((0, 3), (1, 3), (0, 3)),        # empty
])
def test_broadcast_static(sa, sb, sy):
    a, b = ag.Tensor(sa, name="a"), ag.Tensor(sb, name="b")
    y = ops.mul(a, b)
    assert tuple(d.value for d in y.shape) == sy
    av, bv = rand(sa, seed=5), rand(sb, seed=6)
    want = np.empty(sy)
    for idx in np.ndindex(*sy):  # explicit broadcasting: size-1 dims read index 0
        ia = tuple(i if n != 1 else 0 for i, n in zip(idx[len(sy) - len(sa):], sa))
        ib = tuple(i if n != 1 else 0 for i, n in zip(idx[len(sy) - len(sb):], sb))
        want[idx] = float(av[ia]) * float(bv[ib])
    close(run1(y, {"a": av, "b": bv}), want)


@pytest.mark.parametrize("n", [1, 5])
def test_broadcast_dynamic(n):
    batch = ag.IntVar("batch", 1, 8)
    a, b = ag.Tensor([batch, 1], name="a"), ag.Tensor([1, 4], name="b")
    c, s = ag.Tensor([batch, 4], name="c"), ag.Tensor([], name="s")
    y = a + b        # IntVar vs 1 and 1 vs static
    z = y * c + s    # IntVar vs the same IntVar, then rank 0
    assert y.shape[0] is batch and y.shape[1] == 4 and z.shape[0] is batch
    av, bv, cv, sv = rand((n, 1), seed=7), rand((1, 4), seed=8), rand((n, 4), seed=9), rand((), seed=10)
    outs = ag.reference.run({"y": y, "z": z}, {"a": av, "b": bv, "c": cv, "s": sv})
    a64, b64 = av.astype(np.float64), bv.astype(np.float64)
    close(outs["y"], a64 + b64)
    close(outs["z"], (a64 + b64).astype(np.float32).astype(np.float64) * cv + float(sv))


def test_broadcast_errors():
    batch, seq = ag.IntVar("batch", 1, 8), ag.IntVar("seq", 1, 8)
    with pytest.raises(ShapeError, match=r"^add.*cannot broadcast"):
        ops.add(ag.Tensor([3, 4]), ag.Tensor([2, 4]))
    with pytest.raises(ShapeError, match=r"^mul.*cannot broadcast"):  # different IntVars
        ops.mul(ag.Tensor([batch]), ag.Tensor([seq]))
    with pytest.raises(ShapeError, match=r"^sub.*cannot broadcast"):  # IntVar vs a static non-1
        ops.sub(ag.Tensor([batch, 3]), ag.Tensor([4, 3]))
    with pytest.raises(ShapeError, match=r"^where.*cannot broadcast"):
        ops.where(ag.Tensor([3], "bool"), ag.Tensor([2]), ag.Tensor([3]))


@settings(deadline=None, max_examples=25)
@given(mutually_broadcastable_shapes(num_shapes=3, max_dims=4, max_side=4))
def test_broadcast_random(shapes):
    sa, sb, sc = shapes.input_shapes
    a, b, c = ag.Tensor(sa, name="a"), ag.Tensor(sb, name="b"), ag.Tensor(sc, "bool", name="c")
    y = ops.where(c, a * b, a - b)
    assert tuple(d.value for d in y.shape) == shapes.result_shape
    av, bv = rand(sa, seed=11), rand(sb, seed=12)
    cv = np.random.default_rng(13).random(sc) < 0.5
    a64, b64 = av.astype(np.float64), bv.astype(np.float64)
    close(run1(y, {"a": av, "b": bv, "c": cv}), np.where(cv, a64 * b64, a64 - b64))


# -- scalars and operator sugar -------------------------------------------------------------
def test_operator_sugar_and_scalars():
    x = ag.Tensor([2, 3], name="x")
    xv = rand((2, 3), lo=0.5, hi=2, seed=14)
    v = xv.astype(np.float64)
    cases = {
        "add_r": (x + 2.0, v + 2), "add_l": (2.0 + x, 2 + v), "sub_r": (x - 1, v - 1), "sub_l": (1 - x, 1 - v),
        "mul_r": (x * 3, v * 3), "mul_l": (0.5 * x, 0.5 * v), "div_r": (x / 4, v / 4), "div_l": (1 / x, 1 / v),
        "pow_r": (x ** 2, v ** 2), "pow_l": (2 ** x, 2 ** v), "neg": (-x, -v),
        "np_scalar_l": (np.float32(3) * x, 3 * v), "fn_l": (ops.sub(5, x), 5 - v),
        "fn_max": (ops.maximum(x, 1.0), np.maximum(v, 1)), "fn_cmp_l": (ops.less(1.0, x), 1 < v),
        "chain": ((x + 1) * (x - 1) / x, (v + 1) * (v - 1) / v),
    }
    outs = ag.reference.run({k: y for k, (y, _) in cases.items()}, {"x": xv})
    for k, (y, want) in cases.items():
        if y.dtype == ag.DType.bool:
            np.testing.assert_array_equal(outs[k], want, err_msg=k)
        else:
            np.testing.assert_allclose(outs[k], want, err_msg=k, **F32)


def test_int_scalars():
    x = ag.Tensor([4], "int32", name="x")
    xv = np.array([-3, 0, 2, 9], np.int32)
    outs = ag.reference.run({"a": x + 2, "b": 10 - x, "c": x * 2.0, "d": ops.greater(x, 1)}, {"x": xv})
    np.testing.assert_array_equal(outs["a"], [-1, 2, 4, 11])
    np.testing.assert_array_equal(outs["b"], [13, 10, 8, 1])
    np.testing.assert_array_equal(outs["c"], [-6, 0, 4, 18])  # an integral float is allowed
    np.testing.assert_array_equal(outs["d"], [False, False, True, True])
    assert outs["a"].dtype == np.int32


def test_low_precision_scalars():
    for dtype in ("float16", "bfloat16"):
        x = ag.Tensor([5], dtype, name="x")
        xv = rand((5,), dtype, seed=15)
        y = 0.1 * x + 1
        assert y.dtype == ag.DType[dtype]
        # 0.1 is stored in the tensor's dtype, and each op rounds, as the oracle promises
        v, c = xv.astype(np.float64), float(np.array(0.1, NP[dtype]))
        close(run1(y, {"x": xv}), (v * c).astype(NP[dtype]).astype(np.float64) + 1, dtype)


def test_matmul_sugar():
    a, b = ag.Tensor([3, 4], name="a"), ag.Tensor([4, 5], name="b")
    y = a @ b
    av, bv = rand((3, 4), seed=16), rand((4, 5), seed=17)
    want = np.array([[sum(float(av[i, k]) * float(bv[k, j]) for k in range(4)) for j in range(5)] for i in range(3)])
    np.testing.assert_allclose(run1(y, {"a": av, "b": bv}), want, **MATMUL)


# -- where ----------------------------------------------------------------------------------
def test_where():
    c, a, b = ag.Tensor([2, 1], "bool", name="c"), ag.Tensor([1, 3], name="a"), ag.Tensor([2, 3], name="b")
    cv, av, bv = np.array([[True], [False]]), rand((1, 3), seed=18), rand((2, 3), seed=19)
    outs = ag.reference.run({"y": ops.where(c, a, b), "s1": ops.where(c, a, 0.0), "s2": ops.where(c, -1.5, b)},
                            {"c": cv, "a": av, "b": bv})
    np.testing.assert_array_equal(outs["y"], np.stack([np.broadcast_to(av[0], (3,)), bv[1]]))
    np.testing.assert_array_equal(outs["s1"], np.stack([av[0], np.zeros(3, np.float32)]))
    np.testing.assert_array_equal(outs["s2"], np.stack([np.full(3, -1.5, np.float32), bv[1]]))


# -- bad input: one typed error per kind, naming the op --------------------------------------
def test_errors():
    f, i, bl = ag.Tensor([3], name="f"), ag.Tensor([3], "int32", name="i"), ag.Tensor([3], "bool", name="m")
    h = ag.Tensor([3], "float16", name="h")
    with pytest.raises(DTypeError, match=r"^gelu.*float"):
        ops.gelu(i)
    with pytest.raises(DTypeError, match=r"^exp 'e'"):
        ops.exp(i, name="e")
    with pytest.raises(DTypeError, match=r"^add.*float32 vs float16"):
        ops.add(f, h)
    with pytest.raises(DTypeError, match=r"^logical_and.*bool"):
        ops.logical_and(f, f)
    with pytest.raises(DTypeError, match=r"logical_not.*bool"):
        ops.logical_not(f)
    with pytest.raises(DTypeError, match=r"^pow.*float"):
        ops.pow(i, i)
    with pytest.raises(DTypeError, match=r"^add.*float scalar"):
        i + 1.5
    with pytest.raises(DTypeError, match=r"^mul.*does not fit"):
        ag.Tensor([2], "int8") * 300
    with pytest.raises(DTypeError, match=r"^sub.*numeric"):
        bl - bl
    with pytest.raises(DTypeError, match=r"^neg.*numeric"):
        -bl
    with pytest.raises(DTypeError, match=r"^where.*bool"):
        ops.where(f, f, f)
    with pytest.raises(DTypeError, match=r"^where.*differ"):
        ops.where(bl, f, i)
    with pytest.raises(DTypeError, match=r"^where"):
        ops.where(bl, 1.0, 2.0)
    with pytest.raises(DTypeError):
        ops.add(1, 2)
    with pytest.raises(DTypeError, match=r"^cast"):
        ops.cast(f, "complex64")
    with pytest.raises(ValueError, match=r"^gelu"):
        ops.gelu(f, approximate="fast")
    with pytest.raises(ValueError, match=r"^clamp"):
        ops.clamp(f, 2.0, 1.0)
