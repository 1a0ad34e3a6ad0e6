"""Lowering of the attention family for the CPU backend (being written)."""
