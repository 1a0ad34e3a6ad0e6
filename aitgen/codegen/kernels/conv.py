"""Lowering of the conv family for the CPU backend (being written)."""
