// argmax along one axis (first index of a tie): out = p[0] (int64), x = p[1].
// x is viewed as [outer, n, inner] (d[0], d[1], d[2]); out is [outer, inner]. A NaN counts as the
// extreme (numpy's rule): the first NaN, or the last one when the last index is selected.
// inner > 1: one thread per output walks the axis (a warp reads 64 adjacent columns);
// inner == 1: one warp per output, lanes striding the contiguous row, candidates merged by shuffles.
#include <cstdint>
#include <stdexcept>

#include "aitgen/gpu_kernel.h"
#include "aitgen/gpu_math.h"
#include "aitgen/gpu_reduce.h"

namespace {
constexpr int kThreads = 256;
using T = ait::half;
using C = float;

__device__ __forceinline__ C cv(const T& v) { return ait::to_f32((&v)[0]); }

// Whether candidate (v, k) beats the current best (b, bk); bk < 0: no candidate yet. A total order
// on (value, index) pairs, so candidates merge in any order.
__device__ __forceinline__ bool beats(C v, int64_t k, C b, int64_t bk) {
  if (k < 0) return false;
  if (bk < 0) return true;
  const bool vn = v != v, bn = b != b;  // NaN
  if (vn || bn) return vn && (!bn || k < bk);
  return v > b || (v == b && k < bk);
}

__global__ void __launch_bounds__(kThreads) col_kernel(int64_t* out, const T* x, int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t o = e / inner, i = e - o * inner;
    const T* xo = x + o * n * inner + i;
    C best = cv(xo[0]);
    int64_t bk = 0;
    for (int64_t k = 1; k < n; ++k) {
      const C v = cv(xo[k * inner]);
      if (beats(v, k, best, bk)) {
        best = v;
        bk = k;
      }
    }
    out[e] = bk;
  }
}

__global__ void __launch_bounds__(kThreads) row_kernel(int64_t* out, const T* x, int64_t outer, int64_t n) {
  constexpr int kWarps = kThreads / 64;
  const int lane = threadIdx.x % 64;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 64; o < outer;
       o += static_cast<int64_t>(gridDim.x) * kWarps) {
    const T* xo = x + o * n;
    C best = C(0);
    int64_t bk = -1;
    for (int64_t k = lane; k < n; k += 64) {
      const C v = cv(xo[k]);
      if (beats(v, k, best, bk)) {
        best = v;
        bk = k;
      }
    }
#pragma unroll
    for (int m = 32; m > 0; m /= 2) {
      const C v = ait::gpu::shfl_xor(best, m);
      const int64_t k = ait::gpu::shfl_xor(bk, m);
      if (beats(v, k, best, bk)) {
        best = v;
        bk = k;
      }
    }
    if (lane == 0) out[o] = bk;
  }
}

}  // namespace

AIT_KERNEL k_da18162203a467f7(void* const* p, const int64_t* d) {
  int64_t* out = static_cast<int64_t*>(p[0]);
  const T* x = static_cast<const T*>(p[1]);
  const int64_t outer = d[0], n = d[1], inner = d[2];
  if (outer * inner == 0) return;
  if (n == 0) throw std::runtime_error("argmax: the reduced axis is empty; the index of an extreme of nothing is undefined");
  ait::gpu::stream_t s = ait::gpu::stream();
  if (inner == 1) {
    row_kernel<<<ait::gpu::grid_blocks(outer, kThreads / 64, 8), kThreads, 0, s>>>(out, x, outer, n);
  } else {
    col_kernel<<<ait::gpu::grid_blocks(outer * inner, kThreads, 8), kThreads, 0, s>>>(out, x, outer, n, inner);
  }
  AIT_CHECK_LAUNCH("k_da18162203a467f7 (argmax)");
}
