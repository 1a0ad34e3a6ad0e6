"""CPU element-wise kernels against the oracle: every op, broadcasting, dynamic dims, every dtype.

Many ops go into one model (one build) per test: a build costs a g++ run per unique kernel.
"""
import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import RuntimeInputError

UNARY = ["relu", "silu", "sigmoid", "tanh", "hardswish", "exp", "abs", "neg", "erf", "relu6"]
POSITIVE = ["log", "sqrt", "rsqrt", "reciprocal"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


def _build(x, y, pos):
    outs = {f"u_{n}": getattr(ops, n)(x) for n in UNARY}
    outs.update({f"p_{n}": getattr(ops, n)(pos) for n in POSITIVE})
    outs["gelu"] = ops.gelu(x)
    outs["gelu_tanh"] = ops.gelu(x, approximate="tanh")
    outs["clamp"] = ops.clamp(x, -0.5, 0.25)
    outs.update({f"b_{n}": getattr(ops, n)(pos if n == "pow" else x, y) for n in BINARY})
    outs.update({f"c_{n}": getattr(ops, n)(x, y) for n in COMPARE})
    outs["where"] = ops.where(ops.greater(x, y), x, 2.0)
    outs["scalar_left"] = 3.0 - x
    return outs


@pytest.mark.parametrize("dtype,tol", [("float32", dict(rtol=1e-5, atol=1e-6)),
                                       ("float16", dict(rtol=2e-3, atol=2e-3)),
                                       ("bfloat16", dict(rtol=1.6e-2, atol=1.6e-2))])
def test_all_ops_broadcast_and_dynamic(tmp_path, dtype, tol):
    n = ag.IntVar("n", 1, 32)
    x = ag.Tensor([n, 3, 17], dtype, name="x")
    y = ag.Tensor([3, 1], dtype, name="y")         # broadcast on the inner dim and the batch
    pos = ag.Tensor([n, 3, 17], dtype, name="pos")
    outs = _build(x, y, pos)
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    rng = np.random.default_rng(0)
    np_dt = ag.DType[dtype].np
    for size in (5, 32):  # one build, two run-time sizes
        feeds = {"x": rng.standard_normal((size, 3, 17)).astype(np_dt),
                 "y": rng.standard_normal((3, 1)).astype(np_dt),
                 "pos": rng.uniform(0.5, 2.0, (size, 3, 17)).astype(np_dt)}
        got, want = model.run(feeds), ag.reference.run(outs, feeds)
        for k in outs:
            assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
            if want[k].dtype == np.bool_:
                # comparisons of identical stored values are exact
                np.testing.assert_array_equal(got[k], want[k], err_msg=k)
            else:
                np.testing.assert_allclose(got[k].astype(np.float32), want[k].astype(np.float32), err_msg=k, **tol)


def test_integer_bool_and_cast(tmp_path):
    a = ag.Tensor([4, 6], "int32", name="a")
    b = ag.Tensor([6], "int32", name="b")
    f = ag.Tensor([4, 6], "float32", name="f")
    outs = {
        "add": a + b, "sub": a - b, "mul": a * b, "div": ops.div(a, b), "max": ops.maximum(a, b),
        "neg": -a, "abs": ops.abs(a), "relu": ops.relu(a),
        "to_i64": ops.cast(f, "int64"), "to_f16": ops.cast(f, "float16"), "to_bf16": ops.cast(f, "bfloat16"),
        "to_bool": ops.cast(a, "bool"), "from_bool": ops.cast(ops.greater(a, b), "float32"),
        "and": ops.logical_and(ops.greater(a, 0), ops.less(b, 3)), "not": ops.logical_not(ops.equal(a, b)),
        "i8": ops.cast(ops.cast(a, "int8") * 2, "int32"),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    rng = np.random.default_rng(1)
    feeds = {"a": rng.integers(-20, 20, (4, 6)).astype(np.int32), "b": rng.integers(-3, 4, 6).astype(np.int32),
             "f": (rng.standard_normal((4, 6)) * 10).astype(np.float32)}
    got, want = model.run(feeds), ag.reference.run(outs, feeds)
    for k in outs:  # integer, bool and cast results are exact (f16/bf16: same rounding of the same value)
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_in_place_chain_and_scalars(tmp_path):
    # a long chain whose intermediates the memory plan runs in place
    x = ag.Tensor([2, 1000], name="x")
    t = x
    for i in range(6):
        t = ops.tanh(t * 0.9 + float(i) / 10)
    model = ag.compile_model({"y": t}, target="cpu", workdir=tmp_path / "m")
    xv = np.random.default_rng(2).standard_normal((2, 1000)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": xv})["y"], ag.reference.run({"y": t}, {"x": xv})["y"],
                               rtol=1e-5, atol=1e-6)


def test_bad_input_leaves_model_usable(tmp_path):
    n = ag.IntVar("n", 1, 8)
    x = ag.Tensor([n, 4], name="x")
    model = ag.compile_model({"y": ops.relu(x)}, target="cpu", workdir=tmp_path / "m")
    good = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    with pytest.raises(RuntimeInputError, match="'x'.*outside its bounds"):
        model.run({"x": np.zeros((9, 4), np.float32)})
    with pytest.raises(RuntimeInputError, match="dtype float64"):
        model.run({"x": good.astype(np.float64)})
    np.testing.assert_array_equal(model.run({"x": good})["y"], np.maximum(good, 0))


# Kinds added for the importers: the std:: spellings in codegen/kernels/common/expr.py against the
# oracle, edge values included (NaN, infinities, ties for round, zero divisors for int remainders).
MATH_UNARY = ["sin", "cos", "atan", "sinh", "cosh", "asinh", "expm1", "floor", "ceil", "round", "sign"]
MATH_UNIT = ["tan", "asin", "acos", "atanh", "log1p"]  # fed values in (-0.95, 0.95)


@pytest.mark.parametrize("dtype,tol", [("float32", dict(rtol=1e-5, atol=1e-6)),
                                       ("float16", dict(rtol=2e-3, atol=2e-3))])
def test_importer_kinds(tmp_path, dtype, tol):
    n = ag.IntVar("n", 1, 16)
    x = ag.Tensor([n, 19], dtype, name="x")
    u = ag.Tensor([n, 19], dtype, name="u")
    outs = {f"x_{k}": getattr(ops, k)(x) for k in MATH_UNARY}
    outs.update({f"u_{k}": getattr(ops, k)(u) for k in MATH_UNIT})
    outs.update(acosh=ops.acosh(ops.abs(x) + 1.0), isnan=ops.isnan(x), isinf=ops.isinf(x),
                fmod=ops.fmod(x, u), mod=ops.mod(x, u))
    ints = {}
    if dtype == "float32":
        i = ag.Tensor([n, 19], "int32", name="i")
        j = ag.Tensor([19], "int32", name="j")
        ints = {k: getattr(ops, k)(i, j) for k in ("mod", "fmod", "bitwise_and", "bitwise_or", "bitwise_xor")}
        ints.update(bitwise_not=ops.bitwise_not(i), isign=ops.sign(i), i8_mod=ops.mod(ops.cast(i, "int8"), ops.cast(j, "int8")))
        outs.update({f"i_{k}": v for k, v in ints.items()})
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    rng = np.random.default_rng(3)
    np_dt = ag.DType[dtype].np
    for size in (3, 16):
        xv = (rng.standard_normal((size, 19)) * 3).astype(np_dt)
        xv[0, :8] = np.array([np.nan, np.inf, -np.inf, 2.5, -2.5, 0.5, -0.5, 0.0]).astype(np_dt)
        feeds = {"x": xv, "u": rng.uniform(-0.95, 0.95, (size, 19)).astype(np_dt)}
        if ints:
            feeds["i"] = rng.integers(-60, 60, (size, 19)).astype(np.int32)
            jv = rng.integers(-6, 7, 19).astype(np.int32)
            jv[:2] = 0  # an integer remainder by zero is 0 in both
            feeds["j"] = jv
        with np.errstate(all="ignore"):
            want = ag.reference.run(outs, feeds)
        got = model.run(feeds)
        for k in outs:
            assert got[k].dtype == want[k].dtype, k
            if want[k].dtype.kind in "biu":
                np.testing.assert_array_equal(got[k], want[k], err_msg=k)
            else:
                np.testing.assert_allclose(got[k].astype(np.float32), want[k].astype(np.float32), err_msg=k,
                                           equal_nan=True, **tol)


def _exact_but(model, outs, feeds, approx, tol, size):
    """Every output equals the oracle's bit for bit (NaN where it has NaN), but `approx`: within tol."""
    got = model.run(feeds)
    with np.errstate(invalid="ignore"):
        want = ag.reference.run(outs, feeds)
    for k in outs:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        g, w = got[k].astype(np.float32), want[k].astype(np.float32)
        if k == approx:
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=f"{k} {size}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{k} {size}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_flat_kernels_convert_in_blocks(tmp_path, dtype):
    """Flat 16-bit kernels convert 512-element blocks in bulk (aitgen/cpu_convert.h): sizes around
    the block edge and the vector widths, a one-element operand, a float32 operand and result beside
    16-bit ones, NaN and +-inf. The oracle computes in float32 and rounds once per op; a single op
    is then exact, and the fused chain is within an ulp of the storage type."""
    n = ag.IntVar("n", 1, 2000)
    x = ag.Tensor([n], dtype, name="x")
    y = ag.Tensor([n], dtype, name="y")
    s = ag.Tensor([1], dtype, name="s")
    z = ag.Tensor([n], "float32", name="z")
    outs = {"add": ops.add(x, y), "scaled": ops.mul(x, s), "mixed": ops.add(ops.cast(x, "float32"), z),
            "down": ops.cast(z, dtype), "chain": ops.tanh(ops.relu(x) * y + 0.5)}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    src = "\n".join(f.read_text() for f in (tmp_path / "m" / "obj" / "src").glob("k_*.cpp"))
    assert "ait::to_f32_block(" in src and "ait::from_f32_block(" in src
    rng = np.random.default_rng(5)
    np_dt = ag.DType[dtype].np
    tol = 2e-3 if dtype == "float16" else 1.6e-2
    for size in (1, 15, 511, 512, 513, 1999):
        xv = rng.standard_normal(size).astype(np_dt)
        xv[size // 2] = np.nan
        if size > 2:
            xv[size - 1], xv[1] = np.inf, -np.inf
        feeds = {"x": xv, "y": rng.standard_normal(size).astype(np_dt), "s": np.array([1.5], np_dt),
                 "z": (rng.standard_normal(size) * 100).astype(np.float32)}
        _exact_but(model, outs, feeds, "chain", tol, size)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_strided_kernels_convert_in_blocks(tmp_path, dtype):
    """Strided float16 kernels (broadcast operands, views, a concat slice as the output) convert each
    row's contiguous operands and results in 512-element blocks (bfloat16 ones element by element,
    which GCC vectorises, codegen/kernels/cpu/elementwise.py _BULK_STRIDED): rows around the block edge, an
    operand read one value per row, a float32 operand beside 16-bit ones, an operand read across a
    transpose (element by element), NaN and +-inf. Single ops over storage values are exact
    against the oracle (float32 compute, one rounding); the ones over a layernorm are within the
    storage type's tolerance (1 ulp of the layernorm's output may differ)."""
    n = ag.IntVar("n", 1, 1100)
    x = ag.Tensor([3, n], dtype, name="x")
    b = ag.Tensor([n], dtype, name="b")
    c = ag.Tensor([3, 1], dtype, name="c")
    z = ag.Tensor([3, n], "float32", name="z")
    y = ag.Tensor([n, 3], dtype, name="y")
    w = ag.Tensor([3, 1024], dtype, name="w")  # static: the concat is written in place, at row strides
    outs = {"bias": ops.add(x, b), "col": ops.mul(x, c), "mixed": ops.cast(ops.add(z, ops.cast(b, "float32")), dtype),
            "cat": ops.neg(ops.concat([ops.sub(w, ops.slice(w, [0], [1], axes=[0])), ops.maximum(w, c)], axis=1)),
            "trans": ops.mul(ops.permute(ops.layernorm(y), [1, 0]), b)}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    src = "\n".join(f.read_text() for f in (tmp_path / "m" / "obj" / "src").glob("k_*.cpp"))
    if dtype == "float16":
        assert "ait::to_f32_block(in0 + row + b" in src and "out0 + obase + b, nb)" in src
        assert "+ (b + i) * d[" in src  # the transposed operand, element by element in the block
    else:
        assert "+ row + b" not in src and "+ obase + b" not in src
    rng = np.random.default_rng(9)
    np_dt = ag.DType[dtype].np
    tol = 2e-3 if dtype == "float16" else 1.6e-2
    for size in (1, 15, 511, 512, 513, 1100):
        xv = rng.standard_normal((3, size)).astype(np_dt)
        xv[1, size // 2] = np.nan
        bv = rng.standard_normal(size).astype(np_dt)
        if size > 2:
            xv[0, size - 1], xv[2, 1], bv[size - 2] = np.inf, -np.inf, np.nan
        feeds = {"x": xv, "b": bv, "c": np.array([[1.5], [-np.inf], [0.25]], np_dt),
                 "z": (rng.standard_normal((3, size)) * 100).astype(np.float32),
                 "y": rng.standard_normal((size, 3)).astype(np_dt), "w": rng.standard_normal((3, 1024)).astype(np_dt)}
        feeds["w"][1, min(size, 1023)] = np.inf
        _exact_but(model, outs, feeds, "trans", tol, size)
