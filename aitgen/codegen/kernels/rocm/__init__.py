"""ROCm lowering functions, one module per op family, as kernels/cuda has them; importing this
package registers them (codegen/lower.py BACKENDS imports it when the target is ROCm). Our own
kernels come from the package shared with CUDA (kernels/gpu: one source, the HIP dialect of
backends/rocm/include/aitgen/gpu_dialect.h, wave size 64); the GEMM/conv families through
Composable Kernel add their modules here."""
from .. import gpu  # noqa: F401 - our own kernels, shared with CUDA (kernels/gpu)
