"""Views and memory ops: reshape (flatten, squeeze, unsqueeze), permute (transpose), concat, split,
slice with steps, pad, expand, and Python indexing sugar (Tensor.__getitem__)."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

from ..ir.dims import Dim
from ..ir.tensor import Tensor

__all__ = ["ReshapeAttrs", "PermuteAttrs", "ConcatAttrs", "SplitAttrs", "SliceAttrs", "PadAttrs",
           "ExpandAttrs", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose",
           "concat", "split", "slice", "pad", "expand", "getitem"]


@dataclasses.dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[Dim, ...]  # fully resolved (no -1)


@dataclasses.dataclass(frozen=True)
class PermuteAttrs:
    perm: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ConcatAttrs:
    axis: int  # non-negative


@dataclasses.dataclass(frozen=True)
class SplitAttrs:
    axis: int
    sizes: tuple[Dim, ...]


@dataclasses.dataclass(frozen=True)
class SliceAttrs:
    """Per dim of the input: start, stop, step, already clamped to the dim (negative steps allowed)."""
    starts: tuple[int, ...]
    stops: tuple[Optional[int], ...]  # None = to the end in the step's direction (dynamic dims)
    steps: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PadAttrs:
    pads: tuple[tuple[int, int], ...]  # (before, after) per dim
    mode: str = "constant"             # constant, reflect, edge
    value: float = 0.0


@dataclasses.dataclass(frozen=True)
class ExpandAttrs:
    shape: tuple[Dim, ...]


def reshape(x: Tensor, shape: Sequence[Union[int, Dim]], name=None) -> Tensor:
    """One -1 allowed; sizes may be IntVars/expressions; the element count must match exactly."""
    raise NotImplementedError


def flatten(x: Tensor, start: int = 0, end: int = -1, name=None) -> Tensor:
    raise NotImplementedError


def squeeze(x: Tensor, axes=None, name=None) -> Tensor:
    raise NotImplementedError


def unsqueeze(x: Tensor, axes, name=None) -> Tensor:
    raise NotImplementedError


def permute(x: Tensor, perm: Sequence[int], name=None) -> Tensor:
    raise NotImplementedError


def transpose(x: Tensor, a: int, b: int, name=None) -> Tensor:
    raise NotImplementedError


def concat(tensors: Sequence[Tensor], axis: int = 0, name=None) -> Tensor:
    raise NotImplementedError


def split(x: Tensor, sizes_or_sections, axis: int = 0, name=None) -> list[Tensor]:
    """An int splits into that many equal parts; a list gives the sizes."""
    raise NotImplementedError


def slice(x: Tensor, starts: Sequence[int], ends: Sequence[int], axes: Optional[Sequence[int]] = None,  # noqa: A001
          steps: Optional[Sequence[int]] = None, name=None) -> Tensor:
    """ONNX Slice semantics (clamping, negative indices, negative steps)."""
    raise NotImplementedError


def pad(x: Tensor, pads, mode: str = "constant", value: float = 0.0, name=None) -> Tensor:
    """pads: (before, after) per dim from the first, or a flat list in torch order for the last dims."""
    raise NotImplementedError


def expand(x: Tensor, shape, name=None) -> Tensor:
    """numpy broadcast_to; -1 keeps the input's size."""
    raise NotImplementedError


def getitem(x: Tensor, idx) -> Tensor:
    """Basic indexing: ints, slices with steps, None, Ellipsis -> slice + reshape."""
    raise NotImplementedError
