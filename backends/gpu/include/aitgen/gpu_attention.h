// Shared pieces of the fused attention kernels of both GPU backends (backends/gpu/templates/
// attention_simt.cu.j2; CUDA's tensor-core attention_mma.cu.j2 through cuda_attention.cuh): the
// run-time argument layout that aitgen/codegen/kernels/common/attention.py's attention_args builds
// (the CPU kernel reads the same), the kernels' dynamic shared memory, and a warp barrier.
#ifndef AITGEN_GPU_ATTENTION_H_
#define AITGEN_GPU_ATTENTION_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "aitgen/gpu_kernel.h"

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
    // Zeroed first: the kernel argument is copied byte for byte, padding included (after `scale`),
    // and stale stack bytes there would differ between runs and graph replays (and can look like
    // a device pointer to the mock device's argument scan).
    Args a;
    std::memset(&a, 0, sizeof a);
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
    a.nqb = gpu::ceil_div(a.sq, block_q);
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

#if defined(__CUDACC__) || defined(__HIPCC__)

// The kernel's dynamic shared memory.
#define AIT_ATTN_SMEM(name) extern __shared__ __align__(128) unsigned char name[]

// Dynamic shared memory past the platform's default limit needs an opt-in, on each device the
// kernel runs on (a cheap host-side call, made before every launch): gpu_dialect.h says how.
template <typename Kernel>
inline void opt_in_smem(Kernel* kernel, int bytes, const char* what) {
  gpu::check(gpu::allow_dynamic_smem(kernel, bytes), what);
}

// The lanes of a warp meet (their shared-memory writes before it are seen after it).
__device__ __forceinline__ void warp_sync() { gpu::warp_sync(); }

#else  // a host compile: tests/backends/cuda/cuda_host_emu.h runs each GPU thread as a fiber

// Blocks run one at a time there, so one static buffer serves every block.
#define AIT_ATTN_SMEM(name) alignas(128) static unsigned char name[228 * 1024]

template <typename Kernel>
inline void opt_in_smem(Kernel*, int, const char*) {}

inline void warp_sync() { (void)gpu::shfl_xor(0, 0); }  // every lane meets

#endif

}  // namespace attn
}  // namespace ait

#endif  // AITGEN_GPU_ATTENTION_H_
