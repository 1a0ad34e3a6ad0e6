// The CUDA spelling of what the shared GPU kernels (backends/gpu) ask of the platform. Each GPU
// backend has a header of this name (backends/rocm/include/aitgen/gpu_dialect.h is the HIP one);
// a kernel template includes it through aitgen/gpu_kernel.h and never names the platform itself,
// so one source serves both.
//   - storage types ait::half / ait::bf16 and their float32 conversions;
//   - ait::gpu::stream_t / error_t / kSuccess / kErrorInvalidValue / last_error();
//   - ait::gpu::kWarpSize and the lane shuffles shfl_xor / shfl_up / shfl (width: the lane group,
//     a power of two <= kWarpSize), which every warp and block reduction is written in;
//   - AIT_GPU_RUNTIME_NS: the namespace in which the backend's runtime defines the run state.
#ifndef AITGEN_GPU_DIALECT_H_
#define AITGEN_GPU_DIALECT_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define AIT_GPU_RUNTIME_NS cuda
#define AIT_HD __host__ __device__ __forceinline__

namespace ait {

using half = __half;
using bf16 = __nv_bfloat16;

AIT_HD float half_to_f32(half v) { return __half2float(v); }
AIT_HD float bf16_to_f32(bf16 v) { return __bfloat162float(v); }
AIT_HD half f32_to_half(float v) { return __float2half_rn(v); }
AIT_HD bf16 f32_to_bf16(float v) { return __float2bfloat16_rn(v); }

namespace gpu {

using stream_t = cudaStream_t;
using error_t = cudaError_t;
constexpr error_t kSuccess = cudaSuccess;
constexpr error_t kErrorInvalidValue = cudaErrorInvalidValue;
constexpr error_t kErrorInvalidConfiguration = cudaErrorInvalidConfiguration;
inline error_t last_error() { return cudaGetLastError(); }

// Lanes of a warp on every NVIDIA GPU. Python's geometry (codegen/kernels/gpu/dialect.py) carries
// the same number; a kernel checks that they agree (static_assert in gpu_reduce.h's users).
constexpr int kWarpSize = 32;

// Every lane of the warp takes part in our shuffles (the kernels keep whole warps converged around
// them), hence the full mask.
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int mask, int width = kWarpSize) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
template <typename T>
__device__ __forceinline__ T shfl_up(T v, unsigned delta, int width = kWarpSize) {
  return __shfl_up_sync(0xffffffffu, v, delta, width);
}
template <typename T>
__device__ __forceinline__ T shfl(T v, int src, int width = kWarpSize) {
  return __shfl_sync(0xffffffffu, v, src, width);
}

__device__ __forceinline__ void warp_sync() { __syncwarp(); }

// Past 48 KiB of dynamic shared memory a kernel must opt in (up to 99 KiB on every sm_80+ GPU).
template <typename Kernel>
inline error_t allow_dynamic_smem(Kernel* kernel, int bytes) {
  return bytes > 48 * 1024 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
                           : cudaSuccess;
}

}  // namespace gpu
}  // namespace ait

#endif  // AITGEN_GPU_DIALECT_H_
