"""Lowering of the gemm family for the CPU backend (being written)."""
