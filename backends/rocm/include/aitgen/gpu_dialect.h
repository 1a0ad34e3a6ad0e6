// The HIP spelling of what the shared GPU kernels (backends/gpu) ask of the platform: the same
// names as backends/cuda/include/aitgen/gpu_dialect.h (see there for the list), for ROCm's HIP
// (5.2 and later) on CDNA GPUs (gfx90a, gfx940).
// What differs from CUDA, and why:
//   - a wavefront has 64 lanes on CDNA (kWarpSize), so every warp and block reduction of the
//     shared kernels, and Python's threads-per-row geometry (codegen/kernels/gpu/dialect.py), works
//     with 64;
//   - HIP's shuffles take no lane mask (a wavefront always runs them together): __shfl_xor(v, m, w);
//   - bfloat16 is HIP 5.2's hip_bfloat16 (hip/hip_bfloat16.h), converted by its own constructor and
//     float operator (round to nearest even, NaN kept), as CUDA's __float2bfloat16_rn does.
#ifndef AITGEN_GPU_DIALECT_H_
#define AITGEN_GPU_DIALECT_H_

#include <hip/hip_runtime.h>
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>

#define AIT_GPU_RUNTIME_NS rocm
#define AIT_HD __host__ __device__ __forceinline__

namespace ait {

using half = __half;
using bf16 = hip_bfloat16;

AIT_HD float half_to_f32(half v) { return __half2float(v); }
AIT_HD float bf16_to_f32(bf16 v) { return static_cast<float>(v); }
AIT_HD half f32_to_half(float v) { return __float2half_rn(v); }
AIT_HD bf16 f32_to_bf16(float v) { return bf16(v); }

namespace gpu {

using stream_t = hipStream_t;
using error_t = hipError_t;
constexpr error_t kSuccess = hipSuccess;
constexpr error_t kErrorInvalidValue = hipErrorInvalidValue;
constexpr error_t kErrorInvalidConfiguration = hipErrorInvalidConfiguration;
inline error_t last_error() { return hipGetLastError(); }

// Lanes of a wavefront on CDNA (gfx90a, gfx940); RDNA's wave32 is not a target of this backend.
constexpr int kWarpSize = 64;

template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int mask, int width = kWarpSize) {
  return __shfl_xor(v, mask, width);
}
template <typename T>
__device__ __forceinline__ T shfl_up(T v, unsigned delta, int width = kWarpSize) {
  return __shfl_up(v, delta, width);
}
template <typename T>
__device__ __forceinline__ T shfl(T v, int src, int width = kWarpSize) {
  return __shfl(v, src, width);
}

// A wavefront runs its lanes in lockstep; this keeps the compiler from moving memory accesses
// across the point where they meet.
__device__ __forceinline__ void warp_sync() { __builtin_amdgcn_wave_barrier(); }

// CDNA gives every workgroup its 64 KiB of LDS without an opt-in (the lowering keeps below it).
template <typename Kernel>
inline error_t allow_dynamic_smem(Kernel*, int) {
  return hipSuccess;
}

}  // namespace gpu
}  // namespace ait

#endif  // AITGEN_GPU_DIALECT_H_
