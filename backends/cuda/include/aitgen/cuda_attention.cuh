// The tensor-core attention kernel's pieces (templates/attention_mma.cu.j2): the run-time argument
// layout and shared memory of aitgen/gpu_attention.h (shared with ROCm and the CUDA-core kernel,
// backends/gpu/templates/attention_simt.cu.j2), and the sm_80+ warp-level primitives of the tensor-core path
// (cp.async, ldmatrix, mma.sync m16n8k16), written as inline PTX so that no CUTLASS header is needed
// and a kernel compiles in seconds.
#ifndef AITGEN_CUDA_ATTENTION_CUH_
#define AITGEN_CUDA_ATTENTION_CUH_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "aitgen/cuda_kernel.cuh"
#include "aitgen/gpu_attention.h"

namespace ait {
namespace attn {

// Two floats rounded to T, lo in the low half: the register layout of an mma A fragment.
template <typename T>
AIT_HD uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// sm_80+ primitives (also what sm_90a runs: the tensor-core path uses mma.sync, not wgmma)
// ---------------------------------------------------------------------------------------------
#if defined(__CUDACC__)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronous; src_bytes = 0 writes zeros (rows past the end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices; lane i gives the row address of matrix i / 8, row i % 8; lane 4r + w
// receives columns 2w, 2w + 1 of row r of each (of its transpose with .trans).
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a (16x16, row) * b (16x8, col), float32 accumulators.
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 2^x with the SFU (about 2 ulp; exp2(-inf) = 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}


#else  // !__CUDACC__
// The same primitives for a host compile of the kernels: tests/backends/cuda/cuda_host_emu.h runs
// each CUDA thread as a fiber and provides __shfl_xor_sync, through which the warp-collective
// operations below exchange fragments with the lane mapping the PTX ISA gives them. Then the whole
// kernel (tiling, the cp.async ring, masks, tails, stores) runs on a machine without a GPU.

// Lane `src`'s value of v (each lane names its own source; every lane of the warp must call).
template <typename V>
inline V from_lane(V v, int src) {
  return __shfl_xor_sync(0xffffffffu, v, static_cast<int>(threadIdx.x % 32) ^ src);
}

inline void cp_async16(void* dst, const void* src, int src_bytes) {
  if (src_bytes)
    std::memcpy(dst, src, 16);
  else
    std::memset(dst, 0, 16);
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

inline uint32_t b16_at(const void* row, int col) {
  uint16_t v;
  std::memcpy(&v, static_cast<const uint16_t*>(row) + col, 2);
  return v;
}
inline void ldmatrix_x4(uint32_t r[4], const void* p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int i = 0; i < 4; ++i) {
    const void* row = from_lane(p, 8 * i + lane / 4);
    r[i] = b16_at(row, 2 * (lane % 4)) | b16_at(row, 2 * (lane % 4) + 1) << 16;
  }
}
inline void ldmatrix_x4_trans(uint32_t r[4], const void* p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int i = 0; i < 4; ++i) {
    const void* lo = from_lane(p, 8 * i + 2 * (lane % 4));
    const void* hi = from_lane(p, 8 * i + 2 * (lane % 4) + 1);
    r[i] = b16_at(lo, lane / 4) | b16_at(hi, lane / 4) << 16;
  }
}

template <typename T>
inline float b16_value(uint32_t pair, int upper) {
  const uint16_t bits = static_cast<uint16_t>(upper ? pair >> 16 : pair & 0xffffu);
  T v;
  std::memcpy(&v, &bits, 2);
  return to_f32(v);
}
template <typename T>
inline void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  // Lane 4m + w holds A[m][2w..], A[m + 8][2w..], A[m][2w + 8..], A[m + 8][2w + 8..] and
  // B[2w..][m], B[2w + 8..][m]; this lane computes C[g][2t..2t + 1] and C[g + 8][2t..2t + 1].
  const uint64_t a01 = a[0] | uint64_t{a[1]} << 32, a23 = a[2] | uint64_t{a[3]} << 32;
  const uint64_t bb = b0 | uint64_t{b1} << 32;
  float arow[2][16], bcol[2][16];
  for (int w = 0; w < 4; ++w) {
    const uint64_t x01 = from_lane(a01, 4 * g + w), x23 = from_lane(a23, 4 * g + w);
    for (int e = 0; e < 2; ++e) {
      arow[0][2 * w + e] = b16_value<T>(static_cast<uint32_t>(x01), e);
      arow[1][2 * w + e] = b16_value<T>(static_cast<uint32_t>(x01 >> 32), e);
      arow[0][2 * w + 8 + e] = b16_value<T>(static_cast<uint32_t>(x23), e);
      arow[1][2 * w + 8 + e] = b16_value<T>(static_cast<uint32_t>(x23 >> 32), e);
    }
  }
  for (int n = 0; n < 2; ++n) {
    for (int w = 0; w < 4; ++w) {
      const uint64_t y = from_lane(bb, 4 * (2 * t + n) + w);
      for (int e = 0; e < 2; ++e) {
        bcol[n][2 * w + e] = b16_value<T>(static_cast<uint32_t>(y), e);
        bcol[n][2 * w + 8 + e] = b16_value<T>(static_cast<uint32_t>(y >> 32), e);
      }
    }
  }
  for (int h = 0; h < 2; ++h)
    for (int n = 0; n < 2; ++n) {
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) sum += arow[h][k] * bcol[n][k];
      c[2 * h + n] += sum;
    }
}

inline float exp2_approx(float x) { return std::exp2(x); }


#endif  // __CUDACC__

}  // namespace attn
}  // namespace ait

#endif  // AITGEN_CUDA_ATTENTION_CUH_
