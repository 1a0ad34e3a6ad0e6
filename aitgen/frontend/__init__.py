"""Frontends: the nn module API, the ONNX importer (frontend.onnx) and the torch.export importer (frontend.torch)."""
from . import nn  # noqa: F401
