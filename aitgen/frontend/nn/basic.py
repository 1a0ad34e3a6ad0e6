"""Shape-only and inference-trivial layers: Identity, Dropout, Flatten."""
from __future__ import annotations

from ... import ops
from .module import Module

__all__ = ["Identity", "Dropout", "Flatten"]


class Identity(Module):
    """Returns its input; takes (and ignores) any arguments, as torch's does."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Dropout(Module):
    """The identity: aitgen compiles inference graphs only. p is kept for printing and checking."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)

    def forward(self, x):
        return x

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Flatten(Module):
    """Merges dims start_dim..end_dim. Over NHWC activations the merged order is (H, W, C), not
    torch's (C, H, W): a Linear after it needs its weight columns permuted when importing."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x):
        return ops.flatten(x, self.start_dim, self.end_dim, name=self._op_name())

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
