"""QDQ models (onnxruntime's quantize_static, QuantFormat.QDQ) folded into int8 kernels (issue 14).

With load(..., fold_qdq=True), a MatMul / Gemm / 2-D Conv whose activation is DQ(Q(x, s, 0), s, 0)
and whose weight is DQ(W, s_w, 0) of a constant int8 W becomes one QGEMM / QCONV2D
(aitgen/ops/qlinear.py) reading x itself: the integers the QDQ graph defines, summed in int32, then
dequantised, where the float graph sums their float images. Same numbers up to float rounding.

Only where that is exact on the CPU that builds the model; everything else keeps the composites of
ops_quant.py (same numbers as before):
- the activation must be on QGEMM's uint8 grid [0, 255]: uint8 with zero point 0, or int8 with
  zero point -128, the same integers shifted (onnxruntime writes either for a non-negative tensor,
  after a ReLU or an image input). Any other zero point (onnxruntime's asymmetric activations of
  signed tensors) has no place in the int8 kernels yet, and symmetric int8 activations are
  quantised by ONNX into [-128, 127], by the kernels into [-127, 127];
- the weight's zero point must be 0, its scale per tensor or per output channel;
- scales constant, float32, finite and > 0; Q and DQ of the activation with the same values;
- VNNI (or AMX) on this CPU: without it oneDNN sums u8 x s8 pairs in int16, which saturates for
  weights beyond [-63, 63], and a file's weights cannot be re-quantised to fit (quantize_int8's
  weight_grid does that to weights it makes itself);
- only the top-level graph (a subgraph's names may shadow the producers seen here).

Opt-in because the int8 kinds have CPU kernels only: a QDQ model imported for another target
keeps its float composites.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

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


def _activation(ctx: NodeContext, i: int) -> Optional[tuple[Tensor, float]]:
    """(x, x_scale) for an input i = DQ(Q(x, s, zp), s, zp) on the uint8 grid, else None."""
    dq = _node(ctx, ctx.input_names[i], "DequantizeLinear")
    q = _node(ctx, dq.input[0], "QuantizeLinear") if dq is not None else None
    if q is None or len(q.input) < 3 or len(dq.input) < 3 or not _plain(q, "block_size", "output_dtype",
                                                                          "precision") \
            or not _plain(dq, "block_size", "output_dtype"):
        return None
    s, zp, s2, zp2 = _const(ctx, q, 1), _const(ctx, q, 2), _const(ctx, dq, 1), _const(ctx, dq, 2)
    if not (_good_scale(s) and s.size == 1 and s2 is not None and s2.dtype == s.dtype and s2.size == 1
            and s2.reshape(()) == s.reshape(())):
        return None
    for z in (zp, zp2):
        if z is None or z.size != 1 or (z.dtype, int(z.reshape(()))) not in _UINT8_GRID:
            return None
    x = ctx._loader.tensor_of(q.input[0], ctx)
    # a constant x is left to constant folding, as quantize_int8 leaves it
    return (x, float(s.reshape(()))) if x.dtype is DType.float32 and not x.is_constant else None


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
    ins, base = _operands(ctx, act[0], act[1], wq[0], wq[1], bias)
    return make_op1(OpKind.QGEMM, ins, QGemmAttrs(trans_b=trans_b, act=DType.uint8), base)


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
    if wq is None or _bias(bias, w0.shape[0]) is False or not _exact_here():
        return None
    ins, base = _operands(ctx, to_nhwc(act[0]), act[1], np.ascontiguousarray(wq[0].transpose(0, 2, 3, 1)),
                          wq[1], bias)
    attrs = QConv2dAttrs(tuple(stride), tuple(padding), tuple(dilation), groups, DType.uint8)
    return to_nchw(make_op1(OpKind.QCONV2D, ins, attrs, base))
