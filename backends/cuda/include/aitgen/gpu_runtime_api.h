// The GPU runtime API of the shared sources (backends/gpu/): on CUDA it is the CUDA runtime itself.
// Its twin backends/rocm/include/aitgen/gpu_runtime_api.h maps the same CUDA names to HIP, so one
// runtime (gpu/src/gpu_runtime.cu) serves both backends; each backend's include dirs pick its twin.
#ifndef AITGEN_GPU_RUNTIME_API_H_
#define AITGEN_GPU_RUNTIME_API_H_

#include <cuda_runtime.h>

#endif  // AITGEN_GPU_RUNTIME_API_H_
