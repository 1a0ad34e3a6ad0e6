"""Argument checks shared by the layers; errors name the module (and its path once assigned)."""
from __future__ import annotations

from typing import Optional, Union

from ...errors import ShapeError
from ...ir.tensor import Tensor


def label(mod) -> str:
    path = getattr(mod, "_path", None)
    return f"{type(mod).__name__} '{path}'" if path else type(mod).__name__


def pair(v: Union[int, tuple, list], what: str) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{what} must be an int or a pair, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def positive(v: int, what: str) -> int:
    if isinstance(v, bool) or int(v) != v or int(v) <= 0:
        raise ValueError(f"{what} must be a positive int, got {v!r}")
    return int(v)


def check_input(mod, x, rank: Optional[int] = None, channels: Optional[int] = None,
                channel_what: str = "features") -> None:
    """Checks the ops would also make, but worded in terms of the layer the user wrote."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{label(mod)}: expected a Tensor, got {type(x).__name__}")
    if rank is not None and x.ndim != rank:
        raise ShapeError(f"{label(mod)}: expected a rank-{rank} input, got shape "
                         f"[{', '.join(map(str, x.shape))}]")
    if channels is not None and x.ndim:
        last = x.shape[-1]
        if last.is_static and last.value != channels:
            raise ShapeError(f"{label(mod)}: input has {last.value} {channel_what} in its last dim, "
                             f"expected {channels} (shape [{', '.join(map(str, x.shape))}])")
