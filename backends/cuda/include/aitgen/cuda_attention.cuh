// Shared pieces of the fused attention kernels (templates/attention_mma.cu.j2, attention_simt.cu.j2):
// the run-time argument layout that aitgen/codegen/kernels/common/attention.py's attention_args builds
// (the CPU kernel reads the same), and the sm_80+ warp-level primitives of the tensor-core path
// (cp.async, ldmatrix, mma.sync m16n8k16), written as inline PTX so that no CUTLASS header is needed
// and a kernel compiles in seconds.
#ifndef AITGEN_CUDA_ATTENTION_CUH_
#define AITGEN_CUDA_ATTENTION_CUH_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "aitgen/cuda_kernel.cuh"

namespace ait {
namespace attn {

constexpr float kLog2e = 1.4426950408889634f;

// d = {Sq, Sk, D, Dv, nb[RB], bs[5][RB] (q, k, v, out, mask), row strides of q, k, v, out,
//      mask query stride, mask key stride, scale float32 bits, element offsets of q, k, v, out, mask}
// (all in elements). Passed to the kernel by value: a few hundred bytes of parameter space.
template <int RB>
struct Args {
  int64_t sq, sk, d, dv;
  int64_t nb[RB];
  int64_t bs[5][RB];
  int64_t q_rs, k_rs, v_rs, o_rs, m_sq, m_sk;
  int64_t eo[5];
  int64_t batch;  // product of nb
  int64_t nqb;    // query tiles per batch item
  float scale;

  static Args read(const int64_t* d, int64_t block_q, bool scale_from_head_dim) {
    Args a;
    a.sq = d[0];
    a.sk = d[1];
    a.d = d[2];
    a.dv = d[3];
    const int64_t* nb = d + 4;
    const int64_t* bs = nb + RB;
    const int64_t* rs = bs + 5 * RB;
    a.batch = 1;
    for (int j = 0; j < RB; ++j) {
      a.nb[j] = nb[j];
      a.batch *= nb[j];
      for (int o = 0; o < 5; ++o) a.bs[o][j] = bs[o * RB + j];
    }
    a.q_rs = rs[0];
    a.k_rs = rs[1];
    a.v_rs = rs[2];
    a.o_rs = rs[3];
    a.m_sq = rs[4];
    a.m_sk = rs[5];
    for (int o = 0; o < 5; ++o) a.eo[o] = rs[7 + o];
    if (scale_from_head_dim) {  // a symbolic head dim: 1/sqrt(D) as the reference computes it
      a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.d)));
    } else {
      const uint32_t bits = static_cast<uint32_t>(rs[6]);
      std::memcpy(&a.scale, &bits, 4);
    }
    a.nqb = cuda::ceil_div(a.sq, block_q);
    return a;
  }

  // Element offsets of batch item b into q, k, v, out and mask (offsets of the views included).
  __device__ __forceinline__ void offsets(int64_t b, int64_t off[5]) const {
    for (int o = 0; o < 5; ++o) off[o] = eo[o];
#pragma unroll
    for (int j = RB - 1; j >= 0; --j) {
      const int64_t idx = b % nb[j];
      b /= nb[j];
#pragma unroll
      for (int o = 0; o < 5; ++o) off[o] += idx * bs[o][j];
    }
  }

  // Whether every row of q, k, v and out starts on a 16-byte boundary (8 elements of 2 bytes),
  // so tiles move as 16-byte cp.async / vector stores; otherwise the kernels copy element-wise.
  bool rows_aligned(const void* const* ptrs) const {
    for (int o = 0; o < 4; ++o) {
      // ptrs = {out, q, k, v}: operand o (q, k, v, out) is ptrs[(o + 1) % 4]
      const uintptr_t base = reinterpret_cast<uintptr_t>(ptrs[(o + 1) % 4]);
      if ((base + static_cast<uintptr_t>(eo[o]) * 2) % 16 != 0) return false;
      for (int j = 0; j < RB; ++j)
        if (bs[o][j] % 8 != 0) return false;
    }
    return q_rs % 8 == 0 && k_rs % 8 == 0 && v_rs % 8 == 0 && o_rs % 8 == 0;
  }
};

AIT_HD int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
AIT_HD int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

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

// The kernel's dynamic shared memory.
#define AIT_ATTN_SMEM(name) extern __shared__ __align__(128) unsigned char name[]

// Past 48 KiB of dynamic shared memory a kernel must opt in, on each device it runs on (a cheap
// host-side call, made before every launch that needs it).
template <typename Kernel>
inline void opt_in_smem(Kernel* kernel, int bytes, const char* what) {
  if (bytes > 48 * 1024)
    cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
}

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

__device__ __forceinline__ void warp_sync() { __syncwarp(); }

#else  // !__CUDACC__
// The same primitives for a host compile of the kernels: tests/backends/cuda/cuda_host_emu.h runs
// each CUDA thread as a fiber and provides __shfl_xor_sync, through which the warp-collective
// operations below exchange fragments with the lane mapping the PTX ISA gives them. Then the whole
// kernel (tiling, the cp.async ring, masks, tails, stores) runs on a machine without a GPU.

// Blocks run one at a time there, so one static buffer serves every block.
#define AIT_ATTN_SMEM(name) alignas(128) static unsigned char name[228 * 1024]

template <typename Kernel>
inline void opt_in_smem(Kernel*, int, const char*) {}

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

inline void warp_sync() { (void)__shfl_xor_sync(0xffffffffu, 0, 0); }  // every lane meets

#endif  // __CUDACC__

}  // namespace attn
}  // namespace ait

#endif  // AITGEN_CUDA_ATTENTION_CUH_
