"""Lowering functions, one file per op family; importing this package registers them."""
from . import elementwise  # noqa: F401
