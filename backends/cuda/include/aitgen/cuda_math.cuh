// The math and pack helpers of the CUDA-only templates (GEMM/conv epilogues): the shared ones of
// backends/gpu (aitgen/gpu_math.h), kept reachable under their old name.
#ifndef AITGEN_CUDA_MATH_CUH_
#define AITGEN_CUDA_MATH_CUH_

#include "aitgen/cuda_kernel.cuh"
#include "aitgen/gpu_math.h"

#endif  // AITGEN_CUDA_MATH_CUH_
