"""remove_no_ops: each identity goes; look-alikes that change shape, dtype or values stay."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.ir import Graph, Tensor
from aitgen.passes import remove_no_ops
from pass_equivalence import check_pass


def _c(value, shape=()) -> Tensor:
    return ag.constant(np.full(shape, value, np.float32))


IDENTITIES: dict[str, Callable[[Tensor], Tensor]] = {
    "x*1": lambda x: x * _c(1.0),
    "1*x": lambda x: _c(1.0, (4,)) * x,
    "x+0": lambda x: x + _c(0.0, (1, 4)),
    "0+x": lambda x: _c(0.0) + x,
    "x-0": lambda x: x - _c(0.0),
    "x/1": lambda x: x / _c(1.0),
    "x**1": lambda x: ops.pow(x, _c(1.0)),
    "reshape same": lambda x: ops.reshape(x, [3, 4]),
    "reshape there and back": lambda x: ops.reshape(ops.reshape(x, [12]), [3, 4]),
    "cast same": lambda x: ops.cast(x, "float32"),
    "permute identity": lambda x: ops.permute(x, [0, 1]),
    "permute pair": lambda x: ops.permute(ops.permute(x, [1, 0]), [1, 0]),
    "expand same": lambda x: ops.expand(x, [3, 4]),
    "slice whole": lambda x: ops.slice(x, [0, 0], [3, 4]),
    "pad zero": lambda x: ops.pad(x, [(0, 0), (0, 0)]),
    "clamp unbounded": lambda x: ops.clamp(x),
    "concat one": lambda x: ops.concat([x], axis=0),
    "split in one": lambda x: ops.split(x, 1, axis=1)[0],
    "neg neg": lambda x: ops.neg(ops.neg(x)),
    "where all true": lambda x: ops.where(ag.constant(np.ones((3, 4), bool)), x, ops.tanh(x)),
}

NOT_IDENTITIES: dict[str, Callable[[Tensor], Tensor]] = {
    "x*1 broadcasting to a larger shape": lambda x: x * _c(1.0, (2, 3, 4)),
    "x*2": lambda x: x * _c(2.0),
    "x*[1,2,1,1]": lambda x: x * ag.constant(np.array([1, 2, 1, 1], np.float32)),
    "0-x": lambda x: _c(0.0) - x,
    "1/x": lambda x: _c(1.0) / (x + _c(1.0)),
    "x+1": lambda x: x + _c(1.0),
    "permute that does not cancel": lambda x: ops.reshape(ops.permute(x, [1, 0]), [3, 4]),
    "reversing slice": lambda x: ops.slice(x, [-1], [-5], axes=[1], steps=[-1]),
    "clamp": lambda x: ops.clamp(x, max=0.5),
    "split in two": lambda x: ops.concat(ops.split(x, 2, axis=1)[::-1], axis=1),
    "pad": lambda x: ops.slice(ops.pad(x, [(0, 0), (1, 0)]), [0, 0], [3, 4]),
}


def _graph(fn: Callable[[Tensor], Tensor]) -> Graph:
    x = ag.Tensor([3, 4], name="x")
    return Graph.from_outputs({"y": ops.tanh(fn(ops.relu(x)))})


@pytest.mark.parametrize("name", list(IDENTITIES))
def test_identity_is_removed(name):
    out = check_pass(remove_no_ops, _graph(IDENTITIES[name]), exact=True)
    assert [op.kind.value for op in out.ops] == ["relu", "tanh"]


@pytest.mark.parametrize("name", list(NOT_IDENTITIES))
def test_look_alike_is_kept(name):
    g = _graph(NOT_IDENTITIES[name])
    before = len(g.ops)
    out = check_pass(remove_no_ops, g, exact=True)
    assert len(out.ops) == before


def test_output_that_would_become_an_input_or_constant_keeps_its_op():
    x = ag.Tensor([4], name="x")
    g = Graph.from_outputs({"a": x * 1.0, "b": ops.reshape(_c(2.0, (4,)), [4])})
    out = check_pass(remove_no_ops, g, exact=True)
    assert sorted(op.kind.value for op in out.ops) == ["mul", "reshape"]


def test_output_that_would_alias_another_output_keeps_its_op():
    x = ag.Tensor([4], name="x")
    r = ops.relu(x)
    out = check_pass(remove_no_ops, Graph.from_outputs({"a": r, "b": r * 1.0}), exact=True)
    assert out.outputs["a"] is not out.outputs["b"]


def test_output_moves_to_the_identitys_source():
    x = ag.Tensor([4], name="x")
    out = check_pass(remove_no_ops, Graph.from_outputs({"y": ops.relu(x) + 0.0}), exact=True)
    assert [op.kind.value for op in out.ops] == ["relu"] and out.outputs["y"].producer is out.ops[0]


def test_chains_collapse_in_one_sweep():
    def chain(x):
        return ops.permute(ops.permute(ops.neg(ops.neg(x * 1.0)), [1, 0]), [1, 0]) - 0.0
    out = check_pass(remove_no_ops, _graph(chain), exact=True)
    assert [op.kind.value for op in out.ops] == ["relu", "tanh"]
