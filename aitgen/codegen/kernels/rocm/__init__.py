"""ROCm lowering functions, one module per op family, as kernels/cuda has them; importing this
package registers them (codegen/lower.py BACKENDS imports it when the target is ROCm). Our own
kernels (element-wise, reductions, softmax, norms, pooling, gather, views, the SIMT attention
kernel) come from the package shared with CUDA (kernels/gpu: one source, the HIP dialect of
backends/rocm/include/aitgen/gpu_dialect.h, wave size 64); GEMM, BMM and conv go through Composable
Kernel (gemm, conv; grouped: groups of independent GEMMs in one launch), attention through CK's
fused GEMM-softmax-GEMM where it fits, else the shared SIMT kernel (attention). An op whose family
is not imported has no ROCm kernel, and lower_graph names it (UnsupportedOpError)."""
from .. import gpu  # noqa: F401 - our own kernels, shared with CUDA (kernels/gpu)
from . import attention, conv, gemm, grouped  # noqa: F401 - Composable Kernel device ops (attention: else SIMT)
