"""CPU lowering functions (`@lowering("cpu", OpKind.X, ...)`), one module per op family, named as
in aitgen/ops and backends/cpu/templates; importing this package registers them (codegen/lower.py
BACKENDS imports it when the target is the CPU). An op whose family is not imported has no CPU
kernel, and lower_graph names it (UnsupportedOpError)."""
from . import attention, conv, dynamic, elementwise, gather, gemm, linalg, linear_attention, loop  # noqa: F401
from . import norm, pool, reduce, roi_align, scan, scatter, softmax, topk, view  # noqa: F401
from . import grouped  # noqa: F401,E402 - GROUPED dispatcher (members: gemm, layernorm, rmsnorm, element-wise)
