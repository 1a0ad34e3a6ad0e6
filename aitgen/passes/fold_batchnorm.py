"""fold_batchnorm: fold an inference batchnorm into the conv2d / gemm that feeds it.

    bn(y) = (y - mean) * s + beta,  s = scale / sqrt(var + eps),  y = x (*) W + b
          = x (*) (W * s) + ((b - mean) * s + beta)

s scales every output channel, so it multiplies the weight along its output-channel axis:
  conv2d            OHWI weight            axis 0 (grouped and depthwise convs too)
  conv_transpose2d  [C_in, KH, KW, C_out]  axis 3 (groups == 1 only; grouped ones are skipped)
  gemm              B [K, N] ('r')         axis 1
                    B [N, K] ('c', linear) axis 0
The batchnorm normalises the last dim, which is the output-channel dim of all three.

Folds only when the producer's output is read by the batchnorm alone (another reader needs the
unscaled value) or by copies of it (same parameter tensors and eps, which one fold serves; dedup
runs later, so copies may still be there), is no graph output, and when the weight, the old bias
and all four batchnorm parameters are constants. The fold computes in float64 and rounds once to
the weight's dtype; it reorders float arithmetic, so results match the unfolded graph to
rounding (tests: 1e-5), not bit for bit. New arrays every time: the old weight may be shared
with another op or owned by the user's module.

Skipped when opts.fold_constants is False, for the same reason as constant_folding: the user
wants the original weights and batchnorm parameters settable at run time.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ops.registry import make_op1
from ..options import CompileOptions
from ._util import new_constant, output_ids

_PRODUCERS = (OpKind.CONV2D, OpKind.CONV_TRANSPOSE2D, OpKind.GEMM)


def fold_batchnorm(graph: Graph, opts: CompileOptions) -> Graph:
    if not opts.fold_constants:
        return graph
    outs = output_ids(graph)
    names = {t.name for t in graph.tensors if t.name}
    done: set[int] = set()
    for bn in list(graph.ops):
        if bn.kind == OpKind.BATCHNORM and id(bn) not in done:
            done.update(id(op) for op in _try_fold(graph, bn, outs, names))
    graph.sort()
    return graph


def _try_fold(graph: Graph, bn: Op, outs: set[int], names: set[str]) -> list[Op]:
    """Fold bn (and its copies) into y's producer; returns the batchnorms folded away."""
    y = bn.inputs[0]
    prod = y.producer
    if prod is None or prod.kind not in _PRODUCERS or len(prod.outputs) != 1:
        return []
    copies = y.users
    if id(y) in outs or not all(_same_batchnorm(u, bn) for u in copies):
        return []
    if sum(id(u.outputs[0]) in outs for u in copies) > 1:
        return []  # one folded tensor cannot be two graph outputs
    if len(prod.inputs) < 2 or not y.dtype.is_float or not y.shape or not y.shape[-1].is_static:
        return []
    weight = prod.inputs[1]
    bias = prod.inputs[2] if len(prod.inputs) > 2 else None
    params = bn.inputs[1:5]
    if not weight.is_constant or (bias is not None and not bias.is_constant):
        return []
    if len(params) != 4 or not all(p.is_constant for p in params):
        return []
    axis = _channel_axis(prod)
    channels = y.shape[-1].value
    if axis is None or weight.value.shape[axis] != channels:
        return []
    if any(p.value.shape != (channels,) for p in params) or (bias is not None and bias.value.shape != (channels,)):
        return []

    scale, beta, mean, var = (p.value.astype(np.float64) for p in params)
    s = scale / np.sqrt(var + float(bn.attrs.eps))
    bshape = [1] * weight.value.ndim
    bshape[axis] = channels
    new_w = weight.value.astype(np.float64) * s.reshape(bshape)
    old_b = bias.value.astype(np.float64) if bias is not None else np.zeros(channels)
    new_b = (old_b - mean) * s + beta

    bias_dtype = bias.dtype if bias is not None else y.dtype
    w_t = new_constant(new_w, weight.dtype, name=_derived(weight.name, names))
    b_t = new_constant(new_b, bias_dtype, name=_derived(bias.name if bias is not None else params[1].name, names))
    out = make_op1(prod.kind, [prod.inputs[0], w_t, b_t], prod.attrs, name=prod.name)
    out.name = bn.outputs[0].name if bn.outputs[0].name is not None else y.name
    for u in list(copies):
        if id(u.outputs[0]) in outs:
            outs.discard(id(u.outputs[0]))
            outs.add(id(out))
        graph.replace_all_uses(u.outputs[0], out)
    return list(copies)


def _same_batchnorm(u: Op, bn: Op) -> bool:
    return (u.kind == OpKind.BATCHNORM and len(u.inputs) == len(bn.inputs) and u.inputs[0] is bn.inputs[0]
            and all(a is b for a, b in zip(u.inputs[1:], bn.inputs[1:])) and u.attrs == bn.attrs)


def _channel_axis(prod: Op) -> Optional[int]:
    if prod.kind == OpKind.CONV2D:
        return 0
    if prod.kind == OpKind.CONV_TRANSPOSE2D:
        return 3 if prod.attrs.groups == 1 else None
    # gemm: the weight must be the B operand; a constant A with an activation B cannot be scaled.
    return 0 if prod.attrs.trans_b else 1


def _derived(name: Optional[str], names: set[str]) -> Optional[str]:
    """A new name after `name`, unused in the graph: the old constant may live on in another op
    (a shared weight), and two folds of one shared weight must not collide either."""
    if not name:
        return None
    new, n = f"{name}.bnfold", 1
    while new in names:
        n += 1
        new = f"{name}.bnfold{n}"
    names.add(new)
    return new
