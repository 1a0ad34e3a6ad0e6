"""Loading and running built models."""
from .model import Model, TensorSpec  # noqa: F401
