"""The loop shape of a reduction, on every backend.

x is viewed as groups of adjacent dims that are all kept (K) or all reduced (R); static size-1
dims are dropped (they change no index). The last group picks the loop shape: a reduced last group
is a contiguous run reduced per output ("row"), a kept last group is a contiguous block of outputs
accumulated across the reduced groups ("col"). Group sizes are dims, so one kernel serves every
shape with the same grouping.
"""
from __future__ import annotations

from typing import Sequence

from ....ir.dims import Dim, IntImm
from ....ir.op import OpKind
from ....ir.tensor import Tensor
from ....ir.dtype import DType
from ...cexpr import COMPUTE

# The reduction kinds and the name their kernels take them by.
REDUCE_OPS = {OpKind.REDUCE_SUM: "sum", OpKind.REDUCE_MEAN: "mean", OpKind.REDUCE_MAX: "max",
              OpKind.REDUCE_MIN: "min", OpKind.REDUCE_VAR: "var", OpKind.REDUCE_PROD: "prod"}


def group_axes(shape: Sequence[Dim], reduced: set[int]) -> tuple[list[bool], list[Dim]]:
    """(is_reduced per group, group sizes) of `shape`: adjacent dims of one kind merged, static
    1s dropped, and a size-1 group of a kind added when none is left (so both kinds exist)."""
    kinds: list[bool] = []
    sizes: list[Dim] = []
    for i, d in enumerate(shape):
        if d.is_static and d.value == 1:
            continue
        r = i in reduced
        if kinds and kinds[-1] == r:
            sizes[-1] = sizes[-1] * d
        else:
            kinds.append(r)
            sizes.append(d)
    if True not in kinds:  # nothing left to reduce: every output reduces one element
        kinds.append(True)
        sizes.append(IntImm(1))
    if False not in kinds:  # everything reduced: one output
        kinds.insert(0, False)
        sizes.insert(0, IntImm(1))
    return kinds, sizes


def reduce_plan(op: str, x: Tensor, axes: set[int]) -> tuple[list[bool], list[Dim], str, list[int], list[int], str]:
    """The loop shape of a reduction, on every backend: (is_reduced per group, group sizes, mode,
    the kept groups and the reduced groups that index outputs / runs, compute type)."""
    kinds, sizes = group_axes(x.shape, axes)
    last = len(kinds) - 1
    mode = "row" if kinds[-1] else "col"
    kept = [g for g, r in enumerate(kinds) if not r and (mode == "row" or g != last)]
    red = [g for g, r in enumerate(kinds) if r and (mode == "col" or g != last)]
    # mean/var of integers compute in float32 (the oracle's float mean); of float64, in double
    ct = ("double" if x.dtype is DType.float64 else "float") if op in ("mean", "var") else COMPUTE[x.dtype]
    return kinds, sizes, mode, kept, red, ct
