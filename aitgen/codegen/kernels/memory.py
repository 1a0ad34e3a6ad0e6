"""Lowering of the memory family for the CPU backend (being written)."""
