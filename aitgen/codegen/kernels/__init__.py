"""Lowering functions: common/ (what every backend shares) and one package per backend (cpu/,
cuda/), whose import registers that backend's lowerings. codegen/lower.py BACKENDS names the
package of each backend and imports only the target's; this package imports nothing itself."""
