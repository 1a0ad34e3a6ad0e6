"""Frontends: the nn module API (and, later, ONNX and torch.export importers)."""
from . import nn  # noqa: F401
