// Layer norm over rows: out = p[0], x = p[1], weight = p[2], bias = p[3];
// d = [rows, n]: each of `rows` contiguous rows of n elements is normalised on its own (the
// normalised dims, however many, are one row; weight and bias are [n]).
// The row normalised is prologue(x, extras) (extras from p[4]; d continues with x's outer
// dims and the extras' strides), evaluated as the row is read, never stored.
// Rows held in registers between their statistics and the output, so memory is read once:
// rows of up to 1024 elements take a warp each;
// Mean, then the variance over the registers (two-pass), with warp shuffles and block reductions.
// Rows are read as packs of 8 elements when n and every pointer allow, else one element at a time.
#include <cstdint>

#include "aitgen/gpu_kernel.h"
#include "aitgen/gpu_math.h"
#include "aitgen/gpu_reduce.h"

namespace {
using XT = ait::half;
__device__ __forceinline__ float cv_x(const XT& v) { return ait::to_f32((&v)[0]); }
// prologue {s2 = add(s0, s1) -> s2}
AIT_HD float n2(float a0, float a1) { return a0 + a1; }
using E0 = ait::half;
__device__ __forceinline__ float cv_e0(const E0& v) { return ait::to_f32((&v)[0]); }

struct RowArgs {
  const XT* x;
  int64_t rows, n;
  const E0* e0;
  int64_t est0[2];  // its strides along x's outer dims
  int64_t outer[2];                  // x's outer dims
};

struct RowIn {
  const XT* x;
  const E0* e0;  // this row of it
};

__device__ __forceinline__ RowIn row_at(const RowArgs& a, int64_t r) {
  RowIn w;
  w.x = a.x + r * a.n;
  int64_t eb0 = 0;
  int64_t rem = r;
#pragma unroll
  for (int j = 1; j >= 0; --j) {
    const int64_t idx = rem % a.outer[j];
    rem /= a.outer[j];
    eb0 += idx * a.est0[j];
  }
  w.e0 = a.e0 + eb0;
  return w;
}

// PACKED: one aligned access per operand (the host code checked n % V and the pointers);
// otherwise V == 1.
template <int V, bool PACKED>
__device__ __forceinline__ void load_row(const RowIn& w, int64_t i, float (&v)[V]) {
  ait::Pack<XT, V> px;
  ait::Pack<E0, V> pe0;
  if constexpr (PACKED) {
    px = ait::load_pack<V>(w.x + i);
    pe0 = ait::load_pack<V>(w.e0 + i);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      px.v[j] = w.x[i + j];
      pe0.v[j] = w.e0[i + j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float s0 = cv_x(px.v[j]);
    const float s1 = cv_e0(pe0.v[j]);
    const float s2 = n2(s0, s1);
    v[j] = s2;
  }
}

using T = ait::half;
constexpr float kEps = 1e-05f;
constexpr int kWarpThreads = 256;

struct Args {
  RowArgs in;
  T* out;
  const T* w;
  const T* b;
};

// The normalised row from column i: y = (v - mean) * rstd (* w + b), stored as V values.
template <int V, bool PACKED>
__device__ __forceinline__ void write_row(const Args& a, T* y, int64_t i, const float (&v)[V], float mean, float rstd) {
  ait::Pack<T, V> po;
  ait::Pack<T, V> pw;
  ait::Pack<T, V> pb;
  if constexpr (PACKED) {
    pw = ait::load_pack<V>(a.w + i);
    pb = ait::load_pack<V>(a.b + i);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      pw.v[j] = a.w[i + j];
      pb.v[j] = a.b[i + j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    float o = (v[j] - mean) * rstd;
    o = o * ait::to_f32(pw.v[j]);
    o = o + ait::to_f32(pb.v[j]);
    po.v[j] = ait::from_f32<T>(o);
  }
  if constexpr (PACKED) {
    ait::store_pack<V>(y + i, po);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) y[i + j] = po.v[j];
  }
}

// TPR threads per row (up to 32: lanes of a warp; else the block), each holding CHUNKS x V values of it.
template <int TPR, int CHUNKS, int V, bool PACKED>
__global__ void __launch_bounds__(TPR <= 32 ? kWarpThreads : TPR) cached(const Args a) {
  constexpr int kRowsPerBlock = (TPR <= 32 ? kWarpThreads : TPR) / TPR;
  const int t = threadIdx.x % TPR;
  const int64_t n = a.in.n;
  // The block's rows advance together, so a warp holding several rows (TPR < 32) keeps all its
  // lanes in its shuffles: a row past the end is computed on row 0's data and not stored.
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; r0 < a.in.rows;
       r0 += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t r = r0 + threadIdx.x / TPR;
    const bool live = r < a.in.rows;
    const RowIn w = row_at(a.in, live ? r : 0);
    float v[CHUNKS][V];
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int64_t i = (static_cast<int64_t>(c) * TPR + t) * V;
      if (i < n) {
        load_row<V, PACKED>(w, i, v[c]);
#pragma unroll
        for (int j = 0; j < V; ++j) sum += v[c][j];
      }
    }
    const float mean = ait::gpu::group_reduce<TPR>(sum, ait::SumOp(), 0.0f) / static_cast<float>(n);
    float sq = 0.0f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int64_t i = (static_cast<int64_t>(c) * TPR + t) * V;
      if (i < n) {
#pragma unroll
        for (int j = 0; j < V; ++j) sq = fmaf(v[c][j] - mean, v[c][j] - mean, sq);
      }
    }
    const float var = ait::gpu::group_reduce<TPR>(sq, ait::SumOp(), 0.0f) / static_cast<float>(n);
    const float rstd = 1.0f / sqrtf(var + kEps);
    T* y = a.out + (live ? r : 0) * n;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int64_t i = (static_cast<int64_t>(c) * TPR + t) * V;
      if (live && i < n) write_row<V, PACKED>(a, y, i, v[c], mean, rstd);
    }
  }
}

template <int V, bool PACKED>
void launch(const Args& a, ait::gpu::stream_t s) {
  const int64_t n = a.in.n;
  if (n <= 1024) {
    constexpr int kChunks = 24 / V;
    cached<32, kChunks, V, PACKED><<<ait::gpu::grid_blocks(a.in.rows, kWarpThreads / 32, 8), kWarpThreads, 0, s>>>(a);
    return;
  }
  ait::gpu::fail(ait::gpu::kErrorInvalidValue, "k_5cd87a85b9a4d2be: a row is longer than the kernel was built for");
}

}  // namespace

AIT_KERNEL k_5cd87a85b9a4d2be(void* const* p, const int64_t* d) {
  Args a;
  a.in.x = static_cast<const XT*>(p[1]);
  a.in.rows = d[0];
  a.in.n = d[1];
  a.in.e0 = static_cast<const E0*>(p[4]);
  for (int j = 0; j < 2; ++j) {
    a.in.outer[j] = d[2 + j];
    a.in.est0[j] = d[4 + j];
  }

  a.out = static_cast<T*>(p[0]);
  a.w = static_cast<const T*>(p[2]);
  a.b = static_cast<const T*>(p[3]);
  if (a.in.rows == 0 || a.in.n == 0) return;
  ait::gpu::stream_t s = ait::gpu::stream();
  if (a.in.n % 8 == 0 && ait::aligned_to(p[1], 8 * sizeof(XT)) &&
      ait::aligned_to(p[4], 8 * sizeof(E0)) &&
      ait::aligned_to(p[0], 8 * sizeof(T)) && ait::aligned_to(p[2], 8 * sizeof(T)) && ait::aligned_to(p[3], 8 * sizeof(T))) {
    launch<8, true>(a, s);
  } else {
    launch<1, false>(a, s);
  }
  AIT_CHECK_LAUNCH("k_5cd87a85b9a4d2be (layernorm)");
}
