"""Lowering of the pool family for the CPU backend (being written)."""
