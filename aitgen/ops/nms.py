"""non_max_suppression (ONNX NonMaxSuppression): per batch and class, greedily keep the
highest-scoring boxes whose IoU with every kept one is at most the threshold.

Output: int64 [count, 3] rows (batch, class, box), batch-major then class then selection order;
count is a produced size (aitgen/ops/dynamic.py) bound by the kernel, at most B*C*N. Scores tie
by the lower box index first. IoU computes in float32 (the boxes' type), as onnx's reference does,
so a threshold that sits exactly on an IoU decides the same way in the oracle and the kernel.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ..errors import DTypeError
from ..ir.dims import IntVar
from ..ir.dtype import DType
from ..ir.op import OpKind
from ..ir.tensor import Tensor
from .dynamic import produced_var
from .registry import Category, check, make_op1, register

__all__ = ["NmsAttrs", "non_max_suppression"]


@dataclasses.dataclass(frozen=True)
class NmsAttrs:
    count: IntVar
    center_point_box: bool = False
    score_threshold: bool = False  # whether the score-threshold operand applies (given)


def _infer(inputs, a: NmsAttrs):
    boxes, scores, max_out, iou, score = inputs
    check(boxes.dtype == DType.float32 and scores.dtype == DType.float32, "boxes and scores must be float32",
          DTypeError)
    check(boxes.ndim == 3 and boxes.shape[2] == 4, "boxes must be [batch, boxes, 4]")
    check(scores.ndim == 3 and scores.shape[0] == boxes.shape[0] and scores.shape[2] == boxes.shape[1],
          "scores must be [batch, classes, boxes]")
    check(max_out.dtype == DType.int64 and iou.dtype == DType.float32 and score.dtype == DType.float32,
          "max_output_boxes_per_class is int64, the thresholds float32", DTypeError)
    for t in (max_out, iou, score):
        check(all(d.is_static for d in t.shape) and int(np.prod([d.value for d in t.shape])) == 1,
              "max_output_boxes_per_class and the thresholds hold one element each")
    ub = boxes.shape[0].upper * scores.shape[1].upper * boxes.shape[1].upper
    check(isinstance(a.count, IntVar) and a.count.produced and a.count.ub >= ub, "count must be a produced size")
    return [((a.count, 3), DType.int64)]


def _suppress(b1, b2, center: bool, thr) -> bool:
    if not center:
        x1 = sorted((b1[1], b1[3])); x2 = sorted((b2[1], b2[3]))  # noqa: E702
        y1 = sorted((b1[0], b1[2])); y2 = sorted((b2[0], b2[2]))  # noqa: E702
    else:
        x1 = (b1[0] - b1[2] / 2, b1[0] + b1[2] / 2); x2 = (b2[0] - b2[2] / 2, b2[0] + b2[2] / 2)  # noqa: E702
        y1 = (b1[1] - b1[3] / 2, b1[1] + b1[3] / 2); y2 = (b2[1] - b2[3] / 2, b2[1] + b2[3] / 2)  # noqa: E702
    ix = (max(x1[0], x2[0]), min(x1[1], x2[1]))
    iy = (max(y1[0], y2[0]), min(y1[1], y2[1]))
    if ix[1] <= ix[0] or iy[1] <= iy[0]:
        return False
    inter = (ix[1] - ix[0]) * (iy[1] - iy[0])
    a1 = (x1[1] - x1[0]) * (y1[1] - y1[0])
    a2 = (x2[1] - x2[0]) * (y2[1] - y2[0])
    union = a1 + a2 - inter
    if inter <= 0 or a1 <= 0 or a2 <= 0 or union <= 0:
        return False
    return bool(inter / union > thr)


def _ref(args, a: NmsAttrs, ctx):
    boxes, scores = args[0].astype(np.float32), args[1].astype(np.float32)
    k = max(int(args[2].reshape(-1)[0]), 0)
    thr, sthr = np.float32(args[3].reshape(-1)[0]), np.float32(args[4].reshape(-1)[0])
    rows = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = [i for i in range(s.shape[0]) if not a.score_threshold or s[i] > sthr]
            cand.sort(key=lambda i: (-s[i], i))
            kept: list[int] = []
            for i in cand:
                if len(kept) >= k:
                    break
                if not any(_suppress(boxes[b, i], boxes[b, j], a.center_point_box, thr) for j in kept):
                    kept.append(i)
            rows += [(b, c, i) for i in kept]
    return [np.array(rows, np.int64).reshape(-1, 3)]


register(OpKind.NMS, Category.GATHER, NmsAttrs, _infer, _ref, num_inputs=(5, 5))


def non_max_suppression(boxes: Tensor, scores: Tensor, max_out: Tensor, iou: Tensor, score: Tensor,
                        center_point_box: bool = False, score_threshold: bool = True,
                        name: Optional[str] = None) -> Tensor:
    """int64 [count, 3] (batch, class, box) of the kept boxes; count is known after the run."""
    ub = boxes.shape[0].upper * scores.shape[1].upper * boxes.shape[1].upper
    count = produced_var(f"{name or 'nms'}_count", ub)
    return make_op1(OpKind.NMS, [boxes, scores, max_out, iou, score],
                    NmsAttrs(count, bool(center_point_box), bool(score_threshold)), name)
