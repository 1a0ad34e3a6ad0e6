"""CUDA lowering functions (`@lowering("cuda", OpKind.X, ...)`), one module per op family, named as
in aitgen/ops and backends/cuda/templates; importing this package registers them (codegen/lower.py
BACKENDS imports it when the target is CUDA). Each family adds its module to the imports below; an
op whose family is not imported has no CUDA kernel, and lower_graph names it (UnsupportedOpError)."""
from . import attention  # noqa: F401,E402
from . import gemm  # noqa: F401,E402
from .. import gpu  # noqa: F401,E402 - our own kernels, shared with ROCm (kernels/gpu)
from . import conv  # noqa: F401,E402
from . import grouped  # noqa: F401,E402 - GROUPED dispatcher (members: gemm)
