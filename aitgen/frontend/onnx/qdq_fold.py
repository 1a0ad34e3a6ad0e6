"""QDQ models (onnxruntime's quantize_static, QuantFormat.QDQ) folded into int8 kernels (issue 14).

With load(..., fold_qdq=True), a MatMul / Gemm / 2-D Conv whose activation is DQ(Q(x, s, zp), s, zp)
and whose weight is DQ(W, s_w, 0) of a constant int8 W becomes one QGEMM / QCONV2D
(aitgen/ops/qlinear.py): the integers the QDQ graph defines, summed in int32, then dequantised,
where the float graph sums their float images. Same numbers up to float rounding. Two forms:
- an activation on QGEMM's uint8 grid [0, 255] (uint8 with zero point 0, or int8 with -128, the
  same integers shifted: what onnxruntime writes for a non-negative tensor, after a ReLU or an
  image input): the kernel reads x and quantises it itself, as it does for quantize_int8;
- any other zero point (onnxruntime's asymmetric activations of signed tensors) or int8: the
  kernel reads Q's integer output (the composite: ONNX's clamp, [-128, 127] included) as it is,
  and sum (q - zp) W = sum q W - zp sum W moves the constant second term into the bias. A conv's
  padding is then a Pad of zp before it: the QDQ graph pads with real 0, that is q = zp.

Everything else keeps the composites of ops_quant.py (same numbers as before):
- a weight zero point other than 0, a weight scale not per tensor or per output channel, a
  weight computed at run time; per-axis activation scales; a bias computed at run time under a
  non-zero zero point; scales not constant float32 > 0; Q and DQ of the activation that differ;
- CPUs without VNNI (or AMX): oneDNN sums u8 x s8 pairs in int16 there, which saturates for
  weights beyond [-63, 63], and a file's weights cannot be re-quantised to fit (quantize_int8's
  weight_grid does that to weights it makes itself);
- subgraphs (their names may shadow the producers seen here).

Opt-in because the int8 kinds have CPU kernels only: a QDQ model imported for another target
keeps its float composites.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import IntImm
from ...ir.dtype import DType
from ...ir.op import OpKind
from ...ir.tensor import Tensor, constant
from ...ops.qlinear import QConv2dAttrs, QGemmAttrs
from ...ops.registry import make_op1
from .registry import NodeContext


def _node(ctx: NodeContext, name: str, op_type: str):
    node = ctx._loader.qdq_producer(name)
    return node if node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx") else None


def _const(ctx: NodeContext, node, i: int) -> Optional[np.ndarray]:
    if node is None or i >= len(node.input) or not node.input[i]:
        return None
    v = ctx._loader.values.get(node.input[i])
    return v if isinstance(v, np.ndarray) and v.dtype != object else None


def _plain(node, *banned: str) -> bool:
    """No attribute that changes the math here (block_size, output_dtype, precision, saturate off)."""
    for a in node.attribute:
        if a.name in banned and a.i != 0:
            return False
        if a.name == "saturate" and a.i != 1:
            return False
    return True


def _good_scale(s: Optional[np.ndarray]) -> bool:
    return (s is not None and s.dtype == np.float32 and s.ndim <= 1 and s.size >= 1
            and bool(np.all(np.isfinite(s))) and bool(np.all(s > 0)))


# (zero point dtype, value) that quantise onto QGEMM's uint8 grid [0, 255]: uint8 with 0, and int8
# with -128 (onnxruntime's QInt8 default for a non-negative tensor): clamp(rint(x / s) - 128,
# -128, 127) + 128 = clamp(rint(x / s), 0, 255), and DQ gives (q + 128) * s, the same values.
_UINT8_GRID = {(np.dtype(np.uint8), 0), (np.dtype(np.int8), -128)}


def _activation(ctx: NodeContext, i: int) -> Optional[tuple[Tensor, float, DType, int]]:
    """(x, x_scale, act, zero point) for an input i = DQ(Q(x, s, zp), s, zp), else None. On the
    uint8 grid x is the float input, which the kernel quantises itself (zero point 0); otherwise x
    is Q's integer output (the composite, ONNX's own clamp) and the kernel reads it as it is, the
    zero point left to the caller's compensation."""
    dq = _node(ctx, ctx.input_names[i], "DequantizeLinear")
    q = _node(ctx, dq.input[0], "QuantizeLinear") if dq is not None else None
    if q is None or not _plain(q, "block_size", "output_dtype", "precision") \
            or not _plain(dq, "block_size", "output_dtype"):
        return None
    s, zp, s2, zp2 = _const(ctx, q, 1), _zero_point(ctx, q), _const(ctx, dq, 1), _zero_point(ctx, dq)
    if not (_good_scale(s) and s.size == 1 and s2 is not None and s2.dtype == s.dtype and s2.size == 1
            and s2.reshape(()) == s.reshape(())):
        return None
    if zp is None or zp2 is None or zp.dtype not in (np.uint8, np.int8) or zp2.dtype != zp.dtype \
            or zp.size != 1 or zp2.size != 1 or zp.reshape(()) != zp2.reshape(()):
        return None
    x = ctx._loader.tensor_of(q.input[0], ctx)
    # a constant x is left to constant folding, as quantize_int8 leaves it
    if x.dtype is not DType.float32 or x.is_constant:
        return None
    scale = float(s.reshape(()))
    if (zp.dtype, int(zp.reshape(()))) in _UINT8_GRID:
        return x, scale, DType.uint8, 0
    xq = ctx._loader.tensor_of(q.output[0], ctx)
    return xq, scale, xq.dtype, int(zp.reshape(()))


def _zero_point(ctx: NodeContext, node) -> Optional[np.ndarray]:
    """Input 2 of a Q/DQ node; left out, ONNX's default: uint8 0 (output_dtype is refused above)."""
    if len(node.input) < 3 or not node.input[2]:
        return np.zeros((), np.uint8)
    return _const(ctx, node, 2)


def _compensated(bias, n: int, zp: int, xs: float, ws: np.ndarray, colsum: np.ndarray):
    """The bias less x_scale * w_scale[n] * zp * sum_k W[k, n]: sum (q - zp) W = sum q W - zp sum W,
    the second term a constant per output channel. In float64, rounded once to float32: the
    result differs from the QDQ graph's by float rounding only. None (no fold) for a bias computed
    at run time."""
    if zp == 0:
        return bias
    if bias is not None and not bias.is_constant:
        return False
    b = np.zeros(n) if bias is None else bias.value.astype(np.float64)
    comp = (np.float32(xs) * ws).astype(np.float32).astype(np.float64) * zp * colsum.astype(np.float64)
    return constant((b - comp).astype(np.float32), DType.float32)


def _weight(ctx: NodeContext, i: int, n: int, axis: int) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(W int8, w_scale [n] float32) for an input i = DQ(constant int8 W, s_w, 0), s_w per tensor or
    along `axis` (the output channels), else None."""
    dq = _node(ctx, ctx.input_names[i], "DequantizeLinear")
    if dq is None or not _plain(dq, "block_size", "output_dtype"):
        return None
    w, s, zp = _const(ctx, dq, 0), _const(ctx, dq, 1), _const(ctx, dq, 2)
    if w is None or w.dtype != np.int8 or not _good_scale(s):
        return None
    if zp is not None and (zp.dtype != np.int8 or zp.shape != s.shape or zp.any()):
        return None
    if s.size != 1:
        a = {a.name: a.i for a in dq.attribute}.get("axis", 1)
        if a % w.ndim != axis or s.shape != (n,):
            return None
    return w, np.broadcast_to(s.reshape(-1), (n,)).astype(np.float32)


def _exact_here() -> bool:
    # the CPU's rule (kernels/cpu/gemm.py), read only when a pattern matched
    from ...codegen.kernels.cpu.gemm import int8_vnni
    return int8_vnni()


def _bias(b: Optional[Tensor], n: int) -> Optional[Tensor]:
    return b if b is None or (b.dtype is DType.float32 and b.ndim == 1 and b.shape[0] == n) else False


def _operands(ctx: NodeContext, x: Tensor, xs: float, w: np.ndarray, ws: np.ndarray, bias):
    base = f"qdq:{ctx.label}"
    ins = [x, constant(w, DType.int8, name=f"{base}/w_int8"),
           constant(np.array([xs], np.float32), name=f"{base}/x_scale"),
           constant(ws, DType.float32, name=f"{base}/w_scale")] + ([bias] if bias is not None else [])
    return ins, base


def fold_matmul(ctx: NodeContext, bias: Optional[Tensor] = None, trans_b: bool = False) -> Optional[Tensor]:
    """MatMul (inputs 0, 1) or Gemm (transA 0, alpha = beta = 1, bias a float32 [N] or none) as a
    QGEMM, or None where the pattern does not hold exactly."""
    if not ctx._loader.fold_qdq:
        return None
    act = _activation(ctx, 0)
    w0 = _const(ctx, _node(ctx, ctx.input_names[1], "DequantizeLinear"), 0)
    if act is None or w0 is None or w0.ndim != 2 or act[0].ndim < 2:
        return None
    n = w0.shape[0] if trans_b else w0.shape[1]
    wq = _weight(ctx, 1, n, 0 if trans_b else 1)
    if wq is None or _bias(bias, n) is False or act[0].shape[-1] != IntImm(w0.shape[1 if trans_b else 0]) \
            or not _exact_here():
        return None
    x, xs, kind, zp = act
    bias = _compensated(bias, n, zp, xs, wq[1], wq[0].astype(np.int64).sum(axis=1 if trans_b else 0))
    if bias is False:
        return None
    ins, base = _operands(ctx, x, xs, wq[0], wq[1], bias)
    return make_op1(OpKind.QGEMM, ins, QGemmAttrs(trans_b=trans_b, act=kind), base)


def fold_conv(ctx: NodeContext, to_nhwc, to_nchw, bias: Optional[Tensor], stride, padding, dilation,
              groups: int) -> Optional[Tensor]:
    """A 2-D Conv as a QCONV2D (NHWC inside, as ops_nn's), or None."""
    if not ctx._loader.fold_qdq:
        return None
    act = _activation(ctx, 0)
    w0 = _const(ctx, _node(ctx, ctx.input_names[1], "DequantizeLinear"), 0)
    if act is None or w0 is None or w0.ndim != 4 or act[0].ndim != 4:
        return None
    wq = _weight(ctx, 1, w0.shape[0], 0)
    x, xs, kind, zp = act
    if wq is None or _bias(bias, w0.shape[0]) is False or not _exact_here():
        return None
    bias = _compensated(bias, w0.shape[0], zp, xs, wq[1], wq[0].astype(np.int64).sum(axis=(1, 2, 3)))
    if bias is False:
        return None
    x = to_nhwc(x)
    if zp and any(padding):
        # the QDQ graph pads with real 0, that is q = zp, the kernel would pad with q = 0: the
        # padding is made here, of zp, so that the constant compensation holds at every tap
        t, b, l, r = padding
        x = ops.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), value=float(zp), name=f"qdq:{ctx.label}/pad_zero_point")
        padding = (0, 0, 0, 0)
    ins, base = _operands(ctx, x, xs, np.ascontiguousarray(wq[0].transpose(0, 2, 3, 1)), wq[1], bias)
    attrs = QConv2dAttrs(tuple(stride), tuple(padding), tuple(dilation), groups, kind)
    return to_nchw(make_op1(OpKind.QCONV2D, ins, attrs, base))
