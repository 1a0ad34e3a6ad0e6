"""Lowering of the norm family for the CPU backend (being written)."""
