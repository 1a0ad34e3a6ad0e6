"""square_pow: x ** 2 becomes x * x (exact); other exponents and an exponent that broadcasts x up stay pow
(pow takes float operands only). The compiled kernel gives numpy's np.power bits, special values included."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.ir import Graph, Tensor
from aitgen.passes import square_pow
from pass_equivalence import check_pass


def kinds(g: Graph) -> list[str]:
    return [op.kind.value for op in g.ops]


def _c(value, shape=(), dtype=np.float32) -> Tensor:
    return ag.constant(np.full(shape, value, dtype))


@pytest.mark.parametrize("exponent", [_c(2.0), _c(2.0, (1, 4)), _c(2.0, (3, 1))])
def test_square_becomes_a_product(exponent):
    x = Tensor([3, 4], name="x")
    g = check_pass(square_pow, Graph.from_outputs({"y": ops.pow(x, exponent) + 1.0}), exact=True)
    assert kinds(g) == ["mul", "add"]
    mul = g.ops[0]
    assert mul.inputs[0] is mul.inputs[1] is g.inputs[0]


def test_square_that_is_a_graph_output_keeps_its_name():
    x = Tensor([3, 4], name="x")
    y = ops.pow(x, _c(2.0))
    g = check_pass(square_pow, Graph.from_outputs({"y": y}), exact=True)
    assert kinds(g) == ["mul"] and list(g.outputs) == ["y"]


@pytest.mark.parametrize("case", ["cube", "half", "mixed", "tensor", "broadcasts_x"])
def test_look_alikes_stay(case):
    x = Tensor([3, 4], name="x")
    if case == "cube":
        y = ops.pow(x, _c(3.0))
    elif case == "half":
        y = ops.pow(x, _c(0.5))
    elif case == "mixed":  # 2 in one column only
        y = ops.pow(x, ag.constant(np.array([2, 2, 3, 2], np.float32)))
    elif case == "tensor":
        y = ops.pow(x, Tensor([3, 4], name="e"))
    else:  # x [3, 4] ** 2 [2, 3, 4] is [2, 3, 4]: x * x would be [3, 4]
        y = ops.pow(x, _c(2.0, (2, 3, 4)))
    g = check_pass(square_pow, Graph.from_outputs({"y": y}), exact=True)
    assert kinds(g) == ["pow"]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_compiled_square_gives_numpys_bits(tmp_path, dtype):
    """Special values included: -0, +-inf, NaN, overflow to inf, subnormal squares to 0."""
    x = Tensor([64], dtype=dtype, name="x")
    m = ag.compile_model({"y": ops.pow(x, _c(2.0, (), np.dtype(dtype)))}, target="cpu", workdir=tmp_path / "w")
    rng = np.random.default_rng(3)
    v = rng.standard_normal(64).astype(dtype) * 10
    v[:8] = [-0.0, np.inf, -np.inf, np.nan, 1e30 if dtype == "float32" else 6e4, 1e-30 if dtype == "float32" else 1e-7,
             -3.5, 0.0]
    out = m.run({"x": v})["y"]
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.power(v, np.asarray(2.0, dtype))
    np.testing.assert_array_equal(out, want)  # tolerance 0: bit for bit, NaN where numpy has NaN
    m.close()
