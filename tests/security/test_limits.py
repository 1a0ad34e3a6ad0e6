"""Compile-time limits are checked, not wrapped: a cycle is a GraphError (never an endless walk),
a size or offset that int64 arithmetic in generated code could not hold is a LimitError naming the
tensor, and bad dims and IntVar bounds are refused when they are made."""
from __future__ import annotations

import contextlib
import signal

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.cexpr import dim_expr
from aitgen.errors import GraphError, InvalidNameError, LimitError, ShapeError
from aitgen.ir import verify
from aitgen.ir.dims import IntImm


@contextlib.contextmanager
def within(seconds: float):
    """Turn a hang into a test failure: an endless loop is exactly the bug some of these guard."""
    def fail(*_):
        raise TimeoutError(f"did not finish within {seconds} s")
    old = signal.signal(signal.SIGALRM, fail)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- cycles ----------------------------------------------------------------------------------------

def _cyclic():
    """x -> a -> b -> c, then a is made to read c by editing op.inputs: a -> b -> c -> a."""
    x = ag.Tensor([4], name="x")
    a = ops.relu(x, name="a")
    c = ops.tanh(ops.neg(a, name="b"), name="c")
    a.producer.inputs[0] = c
    return {"y": c}


def _self_loop():
    x = ag.Tensor([4], name="x")
    y = ops.add(x, x, name="s")
    y.producer.inputs[1] = y
    return {"y": y}


@pytest.mark.parametrize("make, names", [(_cyclic, "abc"), (_self_loop, "s")])
def test_cycle_is_a_graph_error_everywhere(make, names, tmp_path):
    feeds = {"x": np.ones(4, np.float32)}
    calls = [lambda o: ag.Graph.from_outputs(o), lambda o: ag.reference.run(o, feeds),
             lambda o: ag.compile_model(o, target="cpu", workdir=tmp_path / "m", load=False)]
    for call in calls:
        with within(20), pytest.raises(GraphError, match="cycle") as e:
            call(make())
        assert all(f"'{n}'" in str(e.value) for n in names), str(e.value)
    assert not (tmp_path / "m").exists()


def test_cycle_made_in_a_built_graph(tmp_path):
    x = ag.Tensor([4], name="x")
    g = ag.Graph.from_outputs({"y": ops.tanh(ops.relu(x, name="a"), name="c")})
    a = next(op for op in g.ops if op.name == "a")
    a.inputs[0] = g.outputs["y"]
    with within(20):
        with pytest.raises(GraphError):
            verify(g)  # walks the stored op list: it stops, at the op that reads a later result
        with pytest.raises(GraphError, match="cycle"):
            g.copy()
        with pytest.raises(GraphError, match="cycle"):
            g.sort()
        with pytest.raises(GraphError, match="cycle"):
            ag.compile_model(g, target="cpu", workdir=tmp_path / "m", load=False)


# -- sizes and offsets -----------------------------------------------------------------------------

def test_huge_intvar_bound_is_a_limit_error_naming_the_tensor(tmp_path):
    b = ag.IntVar("b", 1, 2**62)  # fits an int64 itself; a float32 [b, 64] is 2**70 bytes
    x = ag.Tensor([b, 64], name="x")
    with within(60), pytest.raises(LimitError, match="tensor 'x'"):
        ag.compile_model({"y": ops.relu(x)}, target="cpu", workdir=tmp_path / "m", load=False)


def test_intermediate_past_the_limit_is_named(tmp_path):
    b = ag.IntVar("b", 1, 2**61)
    x = ag.Tensor([b], "int8", name="x")  # 2**61 bytes: fits
    with within(60), pytest.raises(LimitError, match="tensor 'wide'"):
        ag.compile_model({"wide": ops.cast(x, "float32")}, target="cpu", workdir=tmp_path / "m", load=False)


def test_arena_past_the_limit(tmp_path):
    # Each tensor fits (2**61 bytes), but two intermediates live at once: the arena would be 2**62.
    b = ag.IntVar("b", 1, 2**59)
    x = ag.Tensor([b], name="x")
    y = ops.add(ops.relu(x, name="r"), ops.tanh(x, name="t"), name="y")
    with within(60), pytest.raises(LimitError, match="arena"):
        ag.compile_model({"y": y}, target="cpu", workdir=tmp_path / "m", load=False, fusion=False)


def test_bound_slots_past_the_limit_are_refused():
    # The arena's tensors fit, but the bound slots after them (codegen/bounds.py) would pass 2**62 - 1.
    import types

    from aitgen.codegen.program import build_program
    from aitgen.codegen.spec import BoundRef, KernelCall, KernelSpec
    from aitgen.ir.dims import MAX_SIZE
    a, b, w = (ag.Tensor([1], name=n) for n in "abw")

    def call(ptrs):
        spec = KernelSpec.make("cpu/templates/conv_onednn.cpp.j2", bound_at=len(ptrs),
                               post_ops=[{"alg": "relu", "guard": True}])
        return KernelCall(spec, ptrs + [BoundRef(t) for t in ptrs], [], "c", writes=[0])

    plan = types.SimpleNamespace(arena_bytes=MAX_SIZE - 4, offsets={}, alignment=64)
    graph = types.SimpleNamespace(tensors=[])
    with pytest.raises(LimitError, match="bound slots"):
        build_program(graph, plan, [call([a, w, w]), call([b, a, w])], {}, 0)


def test_size_expressions_that_could_wrap_are_refused():
    b, c = ag.IntVar("b", 0, 2**40), ag.IntVar("c", 0, 2**40)
    assert dim_expr(b * 3 + 1, {b: 0, c: 1}) == "(INT64_C(3)*v[0] + INT64_C(1))"
    with pytest.raises(LimitError, match="output 'y'"):
        dim_expr(b * c, {b: 0, c: 1}, "output 'y'")  # 2**80: C++ would wrap it


def test_a_big_but_fitting_model_still_builds(tmp_path):
    # Bounds near the limit are fine as long as no size reaches it: [b, 4] float32 is 2**59 bytes.
    # (Build only: a run allocates outputs at their largest shape.)
    b = ag.IntVar("b", 1, 2**55)
    x = ag.Tensor([b, 4], name="x")
    work = ag.compile_model({"y": ops.relu(x) * 2.0}, target="cpu", workdir=tmp_path / "m", load=False)
    assert (work / "model.json").exists()


# -- dims and IntVar bounds, refused when made -----------------------------------------------------

def test_negative_static_dim_is_refused_naming_the_tensor():
    with pytest.raises(ShapeError, match="tensor 'x'.*negative"):
        ag.Tensor([2, -1], name="x")


def test_static_dim_past_int64_is_refused_not_wrapped():
    with pytest.raises(LimitError, match="tensor 'x'"):
        ag.Tensor([2**64 + 3], name="x")
    with pytest.raises(LimitError, match="tensor 'x'"):
        ag.Tensor([2**62], name="x")
    with pytest.raises(LimitError):
        IntImm(2**64 + 3)
    assert IntImm(-5).value == -5  # negative constants are legal inside expressions (H - k)


@pytest.mark.parametrize("lb, ub", [(True, 4), (1, False), (1.0, 4), (1, 4.5), ("1", 4), (None, 4),
                                    (np.bool_(True), 4), (2, 1), (-1, 4)])
def test_bad_intvar_bounds_are_shape_errors(lb, ub):
    with pytest.raises(ShapeError, match="IntVar 'b'"):
        ag.IntVar("b", lb, ub)


def test_intvar_bound_past_int64_is_a_limit_error():
    with pytest.raises(LimitError, match="IntVar 'b'"):
        ag.IntVar("b", 1, 2**63)
    assert ag.IntVar("b", 1, 2**63 - 1).ub == 2**63 - 1


def test_numpy_integer_bounds_are_accepted_as_ints(tmp_path):
    b = ag.IntVar("b", np.int64(1), np.uint16(6))
    assert (b.lb, b.ub) == (1, 6) and type(b.lb) is int and type(b.ub) is int
    x = ag.Tensor([b, np.int32(3)], name="x")
    y = ops.tanh(x)
    with ag.compile_model({"y": y}, target="cpu", workdir=tmp_path / "m") as m:
        feeds = {"x": np.linspace(-2, 2, 15, dtype=np.float32).reshape(5, 3)}
        np.testing.assert_allclose(m.run(feeds)["y"], ag.reference.run({"y": y}, feeds)["y"], rtol=1e-6, atol=1e-6)


def test_non_string_intvar_name():
    with pytest.raises(InvalidNameError):
        ag.IntVar(7, 1, 4)
