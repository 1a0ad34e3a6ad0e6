"""What several zoo models share: input tensors, position rows, the BERT-style additive mask."""
from __future__ import annotations

from typing import Optional, Union

import numpy as np

from .. import ops
from ..ir.dims import Dim, IntVar
from ..ir.tensor import Tensor, constant

DimArg = Union[int, IntVar]


def check_dim(name: str, d: DimArg) -> DimArg:
    # A typo such as batch="8" would otherwise surface as an obscure ShapeError deep in an op.
    if isinstance(d, bool) or not isinstance(d, (int, Dim)):
        raise TypeError(f"{name} must be an int or an aitgen.IntVar, got {d!r}")
    if isinstance(d, int) and d < 1:
        raise ValueError(f"{name} must be >= 1, got {d}")
    return d


def image_input(batch: DimArg, image_size: int, dtype: str = "float32", name: str = "x") -> Tensor:
    """An NHWC RGB image batch."""
    return Tensor([check_dim("batch", batch), image_size, image_size, 3], dtype, name=name)


def token_input(batch: DimArg, seq: DimArg, name: str) -> Tensor:
    return Tensor([check_dim("batch", batch), check_dim("seq", seq)], "int64", name=name)


def check_seq(seq: DimArg, max_position: int) -> None:
    # The position table has max_position rows; a longer sequence has no embedding to look up.
    hi = seq if isinstance(seq, int) else seq.upper
    if hi > max_position:
        raise ValueError(f"seq (up to {hi}) exceeds max_position {max_position}")


def position_rows(table: Tensor, seq: DimArg, name: Optional[str] = None) -> Tensor:
    """Rows 0..seq-1 of a position table [P, H] -> [seq, H] (HF's position_ids = arange(seq)).

    A slice with a symbolic end works for a static and a dynamic seq alike; seq's upper bound must
    fit the table.
    """
    return ops.slice(table, [0], [seq], axes=[0], name=name)


def cast_parameters(module, dtype: str) -> None:
    """Re-create every parameter of `module` in `dtype` (values drawn in float32, then rounded)."""
    from ..frontend import nn

    mods = dict(module.named_modules())
    for path, prm in list(module.named_parameters()):
        if prm.dtype.is_float:
            parent, _, leaf = path.rpartition(".")
            setattr(mods[parent], leaf, nn.Parameter(prm.value, dtype=dtype))


def additive_mask(attention_mask: Tensor, dtype: str = "float32", name: str = "extended_attention_mask") -> Tensor:
    """HF's extended mask: int [B, S] with 1 = attend -> (1 - m) * -10000 as [B, 1, 1, S].

    -10000 rather than -inf keeps fully padded rows finite, as BERT was trained.
    """
    m = ops.cast(attention_mask, dtype, name=f"{name}.cast")
    ext = ops.mul(ops.sub(1.0, m, name=f"{name}.invert"), -10000.0, name=f"{name}.scale")
    b, s = attention_mask.shape
    return ops.reshape(ext, [b, 1, 1, s], name=name)
