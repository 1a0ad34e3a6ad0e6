"""Transform passes. PIPELINE is the order they run in; each lives in a file named after it.

Every pass is `def name(graph: Graph, opts: CompileOptions) -> Graph`, and the oracle gives the
same outputs before and after each one (tests/passes checks it on the model zoo and on random
graphs).
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..ir.graph import Graph, Outputs
from ..options import CompileOptions
from .constant_folding import constant_folding
from .convert_precision import convert_precision
from .dedup import dedup
from .fold_batchnorm import fold_batchnorm
from .fold_gemm_bias import fold_gemm_bias
from .fuse_attention import fuse_attention
from .fuse_memory_ops import fuse_memory_ops
from .fuse_parallel_gemms import fuse_parallel_gemms
from .fuse_conv_elementwise import fuse_conv_elementwise
from .fuse_elementwise import fuse_elementwise
from .fuse_norm_elementwise import fuse_norm_elementwise
from .fuse_mm_elementwise import fuse_mm_elementwise
from .merge_view_chains import merge_view_chains
from .gather_to_slice import gather_to_slice
from .match_gelu import match_gelu
from .match_norms import match_norms
from .group_ops import group_ops
from .name_graph import name_graph
from .pad_conv_channels import pad_conv_channels
from .patchify_conv import patchify_conv
from .quantize_int8 import quantize_int8
from .remove_no_ops import remove_no_ops
from .remove_unused import remove_unused
from .sink_permutes import sink_permutes
from .square_pow import square_pow
from .sink_reshapes import sink_reshapes
from .runner import PassFn, PassRecord, PipelineRun, run_passes as _run
from .toposort import toposort

PIPELINE: list[PassFn] = [
    # First: every later pass walks graph.ops in order, and a cycle must be reported, not looped on.
    toposort,
    # Before folding: a dead branch is not worth evaluating, deduplicating or naming.
    remove_unused,
    # Before fold_batchnorm: weights computed from constants (an importer's OIHW -> OHWI permute,
    # var + eps written out) must already be constants for the fold to fire.
    constant_folding,
    # After constant_folding (an imported weight's OIHW -> OHWI permute is a constant by then) and
    # before fold_batchnorm: the importer's NCHW <-> NHWC permute pairs around element-wise ops
    # cancel here, so conv -> permute -> permute -> batchnorm is conv -> batchnorm for the fold.
    sink_permutes,
    # After constant_folding (ONNX Constant indices are constants by then) and before
    # fuse_attention and fuse_memory_ops, which see through slices but not gathers: x[:, 0] and
    # qkv[i] imported as Gather become slices that fold into their consumer's strided reads.
    gather_to_slice,
    # After constant_folding (eps, sqrt(2) and a Pow's exponent are constants then) and before the
    # epilogue, element-wise and norm fusions, which would take the pieces of a layer norm or GELU
    # that an exporter wrote out op by op (ONNX below opset 17 / 20) into generic expressions.
    match_norms,
    match_gelu,
    # Before dedup: merging two identical convs that feed different batchnorms would give the conv
    # a second reader, and the single-reader rule would then block both folds.
    fold_batchnorm,
    # After fold_batchnorm: the fold computes in float32 and rounds once. Before remove_no_ops and
    # dedup: they drop the identity casts it leaves and merge the casts it adds. A no-op unless
    # opts.precision is set.
    convert_precision,
    # After fold_batchnorm (a conv's folded batchnorm is its bias, which the GEMM takes along) and
    # convert_precision (the ops it creates take the converted dtypes as they are). Before
    # merge_view_chains, which merges an importer's NCHW -> NHWC permute with the patch permute, and
    # before the epilogue fusions: the GEMM, not the conv, takes the bias, activation and residual.
    patchify_conv,
    # After patchify_conv (a patch conv over RGB is a GEMM by then, which needs no padding) and
    # convert_precision (only float16/bfloat16 convs are padded); before the epilogue fusions. CUDA only.
    pad_conv_channels,
    # After constant_folding: folding turns constant expressions into the ones and zeros that
    # x*1 and x+0 are recognised by.
    remove_no_ops,
    # After remove_no_ops (x ** 1 is gone) and before dedup (two squares of one tensor then merge).
    # After match_norms and match_gelu, which take pow or product forms alike.
    square_pow,
    # After constant_folding and remove_no_ops: both turn different expressions into the same
    # operands (two folded copies of one constant, x*1 next to x), which only then merge.
    dedup,
    # After constant_folding (a scale written as 1/sqrt(d) is then a constant) and before
    # fuse_mm_elementwise / fuse_elementwise, which would take the scale, mask add and softmax
    # input apart into epilogues and element-wise groups that no longer look like attention.
    fuse_attention,
    # After fuse_attention (a scores GEMM plus a mask over keys stays an add for its matcher) and
    # before fuse_parallel_gemms: an imported MatMul + Add is then a GEMM with its bias, which
    # packs with its Q/K/V siblings as the native Linear does.
    fold_gemm_bias,
    # Before fuse_mm_elementwise: it merges plain GEMMs (+ bias), and an epilogue fused first would
    # make Q, K and V differ. After fuse_attention: it only packs GEMMs whose parts the attention
    # reads through views, so the attention op must exist.
    fuse_parallel_gemms,
    # After fuse_attention, which matches the head split/merge permutes where the model put them,
    # and before sink_reshapes and fuse_memory_ops: a permute -> reshape -> permute chain that an
    # importer wrote (ViT's patch flatten from ONNX) is then one reshape (a view) or one permute.
    merge_view_chains,
    # Before the epilogue and element-wise fusions: gemm -> reshape -> gelu is then gemm -> gelu ->
    # reshape, and the GEMM takes the gelu as its epilogue. After fuse_attention, whose patterns
    # are written with the reshapes where the user put them.
    sink_reshapes,
    # After fold_batchnorm: the folded batchnorm is the conv's bias, and the ReLU and residual add
    # after it are then the conv's direct readers. After dedup: twin readers (relu(y) twice) or twin
    # GEMMs would each block the single-reader rule; merged, they fuse (and one GEMM is computed).
    fuse_conv_elementwise,
    # Same reasons as fuse_conv_elementwise; and before fuse_elementwise, so that gemm -> gelu goes
    # into the GEMM's epilogue instead of into an element-wise group of its own.
    fuse_mm_elementwise,
    # After fuse_mm_elementwise / fuse_conv_elementwise: what a GEMM or conv can absorb into its
    # epilogue saves a whole pass over memory there; the element-wise ops left over are grouped here.
    fuse_elementwise,
    # After fuse_elementwise: a whole element-wise group feeding a layernorm/softmax (residual add,
    # embedding sum, scale + mask) is then one op, which the norm takes in as its prologue.
    fuse_norm_elementwise,
    # After fuse_parallel_gemms: it folds that pass's split, and the head reshapes/permutes around
    # the attention, into the attention kernel's strided reads and writes; the other memory-op
    # chains into the reads of GEMMs and element-wise groups. After the vertical fusions above,
    # which rebuild ops around their operands and would not carry an operand's view along.
    fuse_memory_ops,
    # After the vertical fusions and fuse_memory_ops, before group_ops: an int8 GEMM/conv keeps the
    # epilogue its float op gathered (one oneDNN int8 primitive with post-ops), and calibration sees
    # the tensors the kernels read. A no-op unless opts.precision is "int8".
    quantize_int8,
    # After every vertical fusion: independent ops that are each one final kernel (a GEMM with its
    # epilogue, a norm with its prologue, an element-wise group) become one grouped kernel; a
    # grouped op absorbs nothing, so grouping earlier would block those fusions.
    group_ops,
    # Last: the passes above create unnamed tensors. A pass appended after this one must name
    # what it creates (or run name_graph again; it is idempotent).
    name_graph,
]


def run_pipeline(graph: Graph, opts: CompileOptions, pipeline: Optional[Sequence[PassFn]] = None) -> Graph:
    """Run `pipeline` (default PIPELINE) over `graph`, in place where the passes allow; see runner."""
    return _run(graph, opts, PIPELINE if pipeline is None else pipeline).graph


def run_passes(graph: Graph, opts: CompileOptions, pipeline: Optional[Sequence[PassFn]] = None) -> PipelineRun:
    """run_pipeline, and the records of the run (runner.PipelineRun: per-pass time and cost)."""
    return _run(graph, opts, PIPELINE if pipeline is None else pipeline)


def optimize(outputs_or_graph: "Outputs | Graph", opts: Optional[CompileOptions] = None) -> Graph:
    """Copy the user's outputs (or a Graph) and run PIPELINE over the copy.

    The copy is what lets the caller keep evaluating the original with the oracle afterwards.
    The fusions read the target's capabilities (opts.caps): pass the options of
    aitgen.compiler.compile_options(target); CompileOptions() without caps serves fusion=False only.
    """
    opts = opts if opts is not None else CompileOptions()
    if isinstance(outputs_or_graph, Graph):
        graph = outputs_or_graph.copy()
    else:
        graph = Graph.from_outputs(outputs_or_graph)
    return run_pipeline(graph, opts)


__all__ = ["PIPELINE", "PassFn", "PassRecord", "PipelineRun", "run_pipeline", "run_passes", "optimize", "toposort",
           "remove_unused", "constant_folding", "fold_batchnorm", "fold_gemm_bias", "convert_precision", "remove_no_ops",
           "dedup", "fuse_attention", "fuse_parallel_gemms", "fuse_memory_ops", "gather_to_slice", "match_gelu",
           "match_norms", "merge_view_chains", "square_pow", "pad_conv_channels", "patchify_conv", "sink_permutes", "sink_reshapes",
           "fuse_conv_elementwise", "fuse_mm_elementwise", "fuse_elementwise", "fuse_norm_elementwise", "group_ops",
           "name_graph", "quantize_int8"]
