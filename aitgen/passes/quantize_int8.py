"""quantize_int8: float32 GEMMs and convs with constant weights become int8 ones (precision="int8").

A no-op unless opts.precision is "int8". The activations each eligible op reads are calibrated on
opts.calibration (aitgen/quant/calibrate.py, opts.calibration_method) by running the graph as it
stands here through the oracle; then each op becomes a QGEMM / QCONV2D (ops/qlinear.py):
- its weight per output channel symmetric int8, w_scale[n] = max|w[n]| / 127 (a new constant, so a
  shared float32 weight stays whole for its other readers); fewer bits on CPUs without VNNI
  (weight_grid), where oneDNN's int8 kernels would otherwise saturate or round;
- its activation per tensor, int8 symmetric or uint8 (a non-negative one), with the calibrated scale;
- int32 accumulation, then dequantisation, bias and the op's fused epilogue in float32;
- requantisation fused (_requantize): where every reader of the result is an int8 op that
  quantises it the same way, or adds it to its own result as a residual, the result is stored
  int8/uint8 (a ResNet bottleneck's convs, and its output: the next block's conv1 reads it as x,
  its conv3 as a quantised residual, extra_scales). A result that int8 ops only add as a residual
  (a ResNet stage's downsample conv, whose conv3 adds it) is calibrated itself, as the readers'
  x are, and stored with its own scale: int8 bytes instead of float32 ones, as onnxruntime's
  QLinearConv -> QLinearAdd does.

What stays float32: every op that is not a GEMM/conv with a constant weight, so softmax, layer norms,
residual adds (computed in float32 in the epilogue after dequantisation, or as their own ops) and attention (score and context
BMMs read two activations; the fused attention op is not a GEMM). Transposed convs too.

Placed after the vertical fusions and fuse_memory_ops, before group_ops: the int8 kernel is then one
oneDNN primitive with the epilogue the float GEMM had gathered (a residual, a GELU) as post-ops, and
calibration sees the very tensors the kernels read. Not in convert_precision's place: fusions there
would have to learn the int8 kinds, for nothing (they only move float epilogues). The oracle of the
graph after this pass has the kernels' integer semantics (tests/quant).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..ir.dtype import DType
from ..ir.graph import Graph
from ..ir.op import Op, OpKind
from ..ir.tensor import Tensor
from ..ops.fused import Epilogue, Expr, split_operands
from ..ops.qlinear import QConv2dAttrs, QGemmAttrs, extra_scales
from ..ops.registry import make_op1
from ..options import CompileOptions
from ..quant.calibrate import ActScale, check_feeds, observe
from ._util import new_constant


def quantize_int8(graph: Graph, opts: CompileOptions) -> Graph:
    if opts.precision != "int8":
        return graph
    ops = [op for op in graph.ops if _eligible(op)]
    if not ops:
        return graph
    feeds = check_feeds(opts.calibration, graph.inputs)
    acts = {id(op.inputs[0]): op.inputs[0] for op in ops}
    residual_only = _residual_only(graph, ops)
    acts.update((id(op.outputs[0]), op.outputs[0]) for op in residual_only)
    scales = observe(graph, list(acts.values()), feeds, opts.calibration_method)
    reduced = opts.caps is not None and opts.caps.int8_reduced_weights
    # before replacing: the operand a later op reads may be an earlier op's result, which changes
    per_op = [(op, scales[id(op.inputs[0])]) for op in ops]
    # id(the int8 op's result) -> (that result, its own calibrated ActScale), for _requantize
    own_scales: dict[int, tuple[Tensor, ActScale]] = {}
    for op, s in per_op:
        new = _quantized(op, s.scale, s.act, weight_grid(s.act, reduced))
        new.name = op.outputs[0].name
        if op in residual_only:
            own_scales[id(new)] = (new, scales[id(op.outputs[0])])
        graph.replace_all_uses(op.outputs[0], new)
    graph.sort()   # drops the replaced ops from their operands' readers, which _requantize counts
    _requantize(graph, own_scales)
    graph.sort()
    return graph


def _residual_only(graph: Graph, ops: list[Op]) -> list[Op]:
    """The eligible ops whose result every reader is an eligible op adding it as a residual (and not
    also reading it as x), so that no reader's x scale could give it one: it gets its own."""
    eligible = {id(op) for op in ops}
    outs = {id(t) for t in graph.outputs.values()}
    found = []
    for op in ops:
        y = op.outputs[0]
        readers = list({id(u): u for u in y.users}.values())
        if (id(y) not in outs and readers and _k_static(op)
                and all(id(u) in eligible and u.inputs[0] is not y and sum(t is y for t in u.inputs) == 1
                        and _residual_slot(u, y) is not None and tuple(u.outputs[0].shape) == tuple(y.shape)
                        for u in readers)):
            found.append(op)
    return found


_Q = (OpKind.QGEMM, OpKind.QCONV2D)


def _requantize(graph: Graph, own_scales: Optional[dict] = None) -> None:
    """An int8 op whose result every reader takes quantised stores it quantised (attrs.out_act): one
    pass over a quarter of the bytes instead of a float32 store, a load and a quantisation. Its
    readers: int8 ops quantising it as their x, all the same way (a ResNet bottleneck's 1x1 -> 3x3
    -> 1x1), and int8 ops adding it to their result in their epilogue (the next bottleneck's
    residual: attrs.extra_scales), as long as one reader gives the scale, or `own_scales` (id(result) ->
    (result, ActScale)) gives one to a result read only as a residual. The producer's epilogue
    may add a residual (float or quantised) and end in a ReLU into uint8 (the saturation at 0 is the
    ReLU); K must be static and > 0. Until nothing changes: a reader rebuilt with extra_scales may
    then be requantised itself."""
    outs = {id(t) for t in graph.outputs.values()}
    # Ops tried, by id, holding each op: a replaced op is dropped from the graph, and without the
    # reference its id could be reused by a new op, which would then be skipped as tried (a
    # conv3 of a small ResNet left float32 in one test run of several).
    tried: dict[int, Op] = {}
    changed = True
    while changed:
        changed = False
        for op in [o for o in graph.ops if o.kind in _Q and o.attrs.out_act is None and id(o) not in tried]:
            tried[id(op)] = op
            if _requantize_one(graph, op, outs, own_scales or {}):
                graph.sort()
                changed = True
                break


def _requantize_one(graph: Graph, op: Op, outs: set, own_scales: dict) -> bool:
    y = op.outputs[0]
    readers = list({id(u): u for u in y.users}.values())
    if id(y) in outs or not readers or not _k_static(op):
        return False
    # A max pool between the producer and int8 readers of its result (ResNet's stem: conv, relu,
    # max pool, then layer1's conv1 and downsample) pools the quantised values instead: quantising
    # is monotonic, so the max of the quantised window is the quantised max, bit for bit.
    pool = None
    if len(readers) == 1 and readers[0].kind is OpKind.MAX_POOL2D and id(readers[0].outputs[0]) not in outs:
        pool = readers[0]
        readers = list({id(u): u for u in pool.outputs[0].users}.values())
        if not readers or any(u.inputs[0] is not pool.outputs[0] for u in readers):
            return False
    src = pool.outputs[0] if pool is not None else y
    as_x, as_extra = [], []
    for u in readers:
        if u.kind not in _Q or getattr(u.attrs, "operand_views", None) is not None or sum(t is src for t in u.inputs) != 1:
            return False
        if u.inputs[0] is src:
            as_x.append(u)
        elif _residual_slot(u, y) is not None and tuple(u.outputs[0].shape) == tuple(y.shape):
            as_extra.append(u)
        else:
            return False
    if as_x:
        keys = {(u.attrs.act, float(u.inputs[2].value[0])) for u in as_x}
        if len(keys) != 1:
            return False
        ((act, x_scale),) = keys
        scale = as_x[0].inputs[2]   # the readers' x_scale constant: the same value, one of them
    else:   # residual readers only: the result's own calibrated scale
        held = own_scales.get(id(y))
        if held is None or held[0] is not y:
            return False
        act, x_scale = held[1].act, float(np.float32(held[1].scale))
        scale = new_constant(np.array([x_scale], np.float32), DType.float32, name=f"{y.name or op.name}_out_scale")
    ep = _requantized_epilogue(op.attrs.epilogue, act)
    if ep is False:
        return False
    own, extras = split_operands(op.inputs, op.attrs)
    attrs = dataclasses.replace(op.attrs, epilogue=ep, out_act=act)
    new = make_op1(op.kind, own + [scale] + extras, attrs, op.name)
    new.name = y.name
    graph.replace_all_uses(y, new)
    if pool is not None:
        pooled = make_op1(OpKind.MAX_POOL2D, [new], pool.attrs, pool.name)
        pooled.name = pool.outputs[0].name
        graph.replace_all_uses(pool.outputs[0], pooled)
    for u in as_extra:   # now reading `new`: it says so in extra_scales
        slot = _residual_slot(u, new)
        scales = list(extra_scales(u.attrs, u.attrs.epilogue.num_extra))
        scales[slot - 1] = x_scale
        r = make_op1(u.kind, list(u.inputs), dataclasses.replace(u.attrs, extra_scales=tuple(scales)), u.name)
        r.name = u.outputs[0].name
        graph.replace_all_uses(u.outputs[0], r)
    return True


def _residual_slot(u: Op, t) -> Optional[int]:
    """The epilogue slot of `t` in u when u's epilogue adds it to its result first thing (the form
    the CPU kernel takes as oneDNN post-ops, a quantised operand included), else None."""
    ep = u.attrs.epilogue
    if ep is None:
        return None
    _, extras = split_operands(u.inputs, u.attrs)
    slots = [1 + j for j, x in enumerate(extras) if x is t]
    if len(slots) != 1:
        return None
    (slot,) = slots
    e = ep.expr
    readers = [n for n in e.nodes if slot in n.args]
    first = e.nodes[0] if e.nodes else None
    if len(readers) != 1 or readers[0] is not first or first.kind is not OpKind.ADD or set(first.args) != {0, slot}:
        return None
    return slot


def _requantized_epilogue(ep: Optional[Epilogue], act: DType):
    """The producer's epilogue once its result is stored as `act`, or False where it cannot be: none;
    a ReLU into uint8 (dropped: the saturation is the ReLU); a chain of unary post-op kinds (a GELU);
    result + residual, then optionally that ReLU (into uint8)."""
    if ep is None:
        return None
    if _is_relu(ep):
        return None if act is DType.uint8 else False
    if _is_unary_chain(ep):
        return ep   # a BERT FFN's GELU: oneDNN post-ops, then the store into act
    e = ep.expr
    add = e.nodes[0] if e.nodes else None
    if add is None or add.kind is not OpKind.ADD or 0 not in add.args or e.num_inputs != 2 or set(add.args) != {0, 1}:
        return False
    if len(e.nodes) == 1 and e.outputs == (2,):
        return ep
    relu = e.nodes[1] if len(e.nodes) == 2 else None
    if relu is not None and relu.kind is OpKind.RELU and relu.args == (2,) and e.outputs == (3,) and act is DType.uint8:
        return Epilogue(Expr(e.num_inputs, e.nodes[:1], (2,)))
    return False


# Unary kinds an int8 kernel takes as oneDNN eltwise post-ops before a quantised store
# (codegen/kernels/cpu/epilogue.py: its _ELTWISE, GELU both ways and RELU for int8 kernels). Their
# input is the dequantised accumulator plus bias: finite, so oneDNN's handling of NaN and inf,
# which keeps the float kernels' GELU (erf) and ReLU in a loop, cannot show.
_POST_OP_UNARY = (OpKind.RELU, OpKind.GELU, OpKind.TANH, OpKind.SIGMOID, OpKind.SILU, OpKind.HARDSWISH)


def _is_unary_chain(ep) -> bool:
    """The epilogue is f(g(...(acc))) of _POST_OP_UNARY kinds, reading nothing else."""
    e = ep.expr
    if e.num_inputs != 1 or not e.nodes:
        return False
    cur = 0
    for i, n in enumerate(e.nodes):
        if n.kind not in _POST_OP_UNARY or tuple(n.args) != (cur,) or not n.dtype.is_float:
            return False
        cur = e.num_inputs + i
    return tuple(e.outputs) == (cur,)


def _is_relu(ep) -> bool:
    e = ep.expr
    return (e.num_inputs == 1 and len(e.nodes) == 1 and e.nodes[0].kind is OpKind.RELU
            and e.nodes[0].args == (0,) and e.outputs[0] == 1)


def _k_static(op: Op) -> bool:
    w = op.inputs[1]
    return all(d.is_static for d in w.shape) and w.value.size > 0


def _eligible(op: Op) -> bool:
    f32 = DType.float32
    if op.kind is OpKind.GEMM:
        a, b = op.inputs[:2]
        views = op.attrs.operand_views
        return (not op.attrs.trans_a and b.is_constant and b.ndim == 2 and not a.is_constant
                and a.dtype is f32 and op.outputs[0].dtype is f32 and (views is None or views[1] is None))
    if op.kind is OpKind.CONV2D:
        x, w = op.inputs[:2]
        return w.is_constant and not x.is_constant and x.dtype is f32 and op.outputs[0].dtype is f32
    return False


def weight_grid(act: DType, reduced: bool) -> tuple[int, int]:
    """(largest |q|, step) of the int8 weights: [-127, 127] with VNNI. Without (Capabilities.
    int8_reduced_weights): [-63, 63] for uint8 activations, so that 2 x 255 x 63 fits vpmaddubsw's
    int16 pair sums; even values in [-62, 62] for int8 ones, which oneDNN shifts to u8 (+128) and
    whose weights it halves there (exactly, when they are even). ORT's reduce_range, for the same reason."""
    if not reduced:
        return 127, 1
    return (63, 1) if act is DType.uint8 else (62, 2)


def quantize_weight(w: np.ndarray, axis: int, qmax: int = 127, step: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (along `axis`) symmetric int8 on the grid step * k, |q| <= qmax: (q, scale),
    scale = max|w| / qmax (1 for a zero channel)."""
    w = np.asarray(w, np.float32)
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=red) if w.size else np.zeros(w.shape[axis], np.float32)
    scale = np.where(amax > 0, amax / np.float32(qmax), np.float32(1.0)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = step * np.rint(w / (scale.reshape(shape) * np.float32(step)))
    return np.clip(q, -qmax, qmax).astype(np.int8), scale


def _quantized(op: Op, x_scale: float, act: DType, grid: tuple[int, int]) -> Tensor:
    own_n = len(op.inputs) - (op.attrs.epilogue.num_extra if op.attrs.epilogue is not None else 0)
    x, w = op.inputs[:2]
    bias: Optional[Tensor] = op.inputs[2] if own_n == 3 else None
    extras = op.inputs[own_n:]
    base = w.name or op.name or "w"
    if op.kind is OpKind.GEMM:
        axis = 0 if op.attrs.trans_b else 1
        q, ws = quantize_weight(w.value, axis, *grid)
        views = op.attrs.operand_views
        if views is not None:   # a's view stays first; the new scale operands are read whole
            views = (views[0], None, None, None) + ((None,) if bias is not None else ()) + tuple(views[own_n:])
        attrs = QGemmAttrs(op.attrs.trans_b, act, op.attrs.epilogue, views)
        kind = OpKind.QGEMM
    else:
        q, ws = quantize_weight(w.value, 0, *grid)
        a = op.attrs
        attrs = QConv2dAttrs(a.stride, a.padding, a.dilation, a.groups, act, a.epilogue)
        kind = OpKind.QCONV2D
    wq = new_constant(q, DType.int8, name=f"{base}_int8")
    xs = new_constant(np.array([x_scale], np.float32), DType.float32, name=f"{base}_x_scale")
    wsc = new_constant(ws, DType.float32, name=f"{base}_w_scale")
    inputs = [x, wq, xs, wsc] + ([bias] if bias is not None else []) + list(extras)
    return make_op1(kind, inputs, attrs, op.name)
