// The CUDA backend's kernel contract: the shared one of backends/gpu (aitgen/gpu_kernel.h) in its
// CUDA dialect. Kept under this name for the CUDA-only sources (GEMM, conv, attention templates and
// the runtime, backends/cuda/src) that define or use ait::cuda::run_state() and friends.
#ifndef AITGEN_CUDA_KERNEL_CUH_
#define AITGEN_CUDA_KERNEL_CUH_

#include "aitgen/gpu_dialect.h"
#include "aitgen/gpu_kernel.h"

#define AIT_CUDA_BAD_INPUT_RECORD AIT_GPU_BAD_INPUT_RECORD

#endif  // AITGEN_CUDA_KERNEL_CUH_
