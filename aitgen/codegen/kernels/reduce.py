"""Lowering of the reduce family for the CPU backend (being written)."""
