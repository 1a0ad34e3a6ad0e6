"""Every pass, and the whole PIPELINE, keeps the oracle's outputs: on the zoo and on random graphs.

Exactness (see pass_equivalence): all passes are bit-exact except fold_batchnorm, which reorders
float arithmetic and is held to 1e-5; PIPELINE contains it, so it is held to 1e-5 too.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from aitgen.ir import Graph
from aitgen.compiler import compile_options
from aitgen.options import CompileOptions
from aitgen.passes import (PIPELINE, constant_folding, dedup, fold_batchnorm, name_graph, remove_no_ops,
                           remove_unused, run_passes, run_pipeline, toposort)
from aitgen.passes.fuse_attention import fuse_attention
from aitgen.passes.fuse_conv_elementwise import fuse_conv_elementwise
from aitgen.passes.fuse_mm_elementwise import fuse_mm_elementwise
from aitgen.passes.fuse_parallel_gemms import fuse_parallel_gemms
from aitgen.passes.name_graph import is_valid_name
from pass_equivalence import check_pass
from pass_graphgen import random_graphs
from pass_zoo import ZOO, zoo_graph

# Passes that reorder float arithmetic; every other pass in PIPELINE (one appended later included)
# is held to bit-exact outputs until it is listed here.
# Epilogue fusion computes a 16-bit chain in float32 without rounding between the ops (as every
# kernel does), so a float16/bfloat16 graph changes in its last bits; float32 stays exact.
REORDERS_ARITHMETIC = {fold_batchnorm, fuse_conv_elementwise, fuse_mm_elementwise}
# fuse_attention scales q before the product and keeps the scores in float32; fuse_parallel_gemms'
# wider product may sum in another order (BLAS blocks by N).
REORDERS_ARITHMETIC |= {fuse_attention, fuse_parallel_gemms}
# fuse_elementwise / fuse_norm_elementwise: a fused 16-bit group (or a norm's prologue) computes in
# float32 without rounding between its ops.
from aitgen.passes.fuse_elementwise import fuse_elementwise  # noqa: E402
from aitgen.passes.fuse_norm_elementwise import fuse_norm_elementwise  # noqa: E402
REORDERS_ARITHMETIC |= {fuse_elementwise, fuse_norm_elementwise}
# match_norms / match_gelu: the norm and GELU kernels sum and round in their own order;
# fold_gemm_bias: a 16-bit GEMM then rounds once (product + bias in float32), not twice.
from aitgen.passes.fold_gemm_bias import fold_gemm_bias  # noqa: E402
from aitgen.passes.match_gelu import match_gelu  # noqa: E402
from aitgen.passes.match_norms import match_norms  # noqa: E402
REORDERS_ARITHMETIC |= {match_norms, match_gelu, fold_gemm_bias}
PASSES = [pytest.param(fn, fn not in REORDERS_ARITHMETIC, id=fn.__name__) for fn in dict.fromkeys(PIPELINE)]


def test_the_cleanup_passes_are_in_the_pipeline():
    cleanup = {toposort, remove_unused, constant_folding, fold_batchnorm, remove_no_ops, dedup, name_graph}
    assert cleanup <= set(PIPELINE)


RUNS: list = []  # whole_pipeline's runs, newest last: their pass records


def whole_pipeline(graph: Graph, opts: CompileOptions) -> Graph:
    RUNS.append(run_passes(graph, opts))
    return RUNS[-1].graph


@pytest.mark.parametrize("model", ZOO)
@pytest.mark.parametrize("pass_fn, exact", PASSES)
def test_pass_keeps_zoo_outputs(pass_fn, exact, model):
    check_pass(pass_fn, zoo_graph(model), exact=exact)


@pytest.mark.parametrize("model", ZOO)
def test_pipeline_keeps_zoo_outputs_with_verify(model):
    graph = check_pass(whole_pipeline, zoo_graph(model), exact=False, opts=compile_options(verify=True))
    names = [t.name for t in graph.tensors] + [op.name for op in graph.ops]
    assert all(is_valid_name(n) for n in names)
    assert len(names) == len(set(names))
    assert [r.name for r in RUNS[-1].records] == [p.__name__ for p in PIPELINE]


@pytest.mark.parametrize("pass_fn, exact", PASSES)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs())
def test_pass_keeps_random_graph_outputs(pass_fn, exact, graph):
    check_pass(pass_fn, graph, exact=exact)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs(max_steps=16))
def test_pipeline_keeps_random_graph_outputs(graph):
    check_pass(whole_pipeline, graph, exact=False, opts=compile_options(verify=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs())
def test_pipeline_is_idempotent(graph):
    # A second run finds nothing left to do: each pass reached its fixed point in one sweep.
    once = run_pipeline(graph.copy(), compile_options())
    twice = run_pipeline(once.copy(), compile_options())
    assert str(twice) == str(once)
