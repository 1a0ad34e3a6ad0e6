// Reductions and launch geometry of the GPU kernels (CUDA and HIP): warp-shuffle and block reductions of sums,
// extrema and Welford states (float32 accumulation), NaN-propagating max/min, and grid sizes for
// grid-stride loops.
#ifndef AITGEN_GPU_REDUCE_H_
#define AITGEN_GPU_REDUCE_H_

#include <cstdint>
#include <limits>

#include "aitgen/gpu_kernel.h"

namespace ait {

// numpy's max/min propagate NaN: once a NaN is seen, it stays.
AIT_HD float max_nan(float acc, float v) { return (v > acc || v != v) ? v : acc; }
AIT_HD float min_nan(float acc, float v) { return (v < acc || v != v) ? v : acc; }
AIT_HD double max_nan(double acc, double v) { return (v > acc || v != v) ? v : acc; }
AIT_HD double min_nan(double acc, double v) { return (v < acc || v != v) ? v : acc; }
template <typename I>
AIT_HD I max_nan(I acc, I v) { return v > acc ? v : acc; }
template <typename I>
AIT_HD I min_nan(I acc, I v) { return v < acc ? v : acc; }

template <typename C>
AIT_HD C lowest() {
  return std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
}
template <typename C>
AIT_HD C highest() {
  return std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
}

// Accumulators: float sums in float32 (the partial sums of a tree stay accurate), integer sums in
// the unsigned type of their width, so they wrap like the oracle's fixed-width sum without signed
// overflow.
template <typename C> struct Acc { using type = C; };
template <> struct Acc<int32_t> { using type = uint32_t; };
template <> struct Acc<int64_t> { using type = uint64_t; };

struct SumOp {
  template <typename A> AIT_HD A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {
  template <typename A> AIT_HD A operator()(A a, A b) const { return max_nan(a, b); }
};
struct MinOp {
  template <typename A> AIT_HD A operator()(A a, A b) const { return min_nan(a, b); }
};
// Max that skips NaN (fmaxf): softmax's row maximum, where a NaN makes every output NaN anyway
// through the sum of exponentials.
struct MaxFiniteOp {
  AIT_HD float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Welford state of a partial sequence: count, mean, sum of squared deviations. Combined with
// Chan's formula, so partials merge in any order without the cancellation of sum(x^2) - n mean^2.
// A plain aggregate (no initialisers), so that it can live in __shared__ memory.
struct Welford {
  float n, mean, m2;
  AIT_HD static Welford zero() { return Welford{0.0f, 0.0f, 0.0f}; }
  AIT_HD void add(float x) {
    n += 1.0f;
    const float d = x - mean;
    mean += d / n;
    m2 = fmaf(d, x - mean, m2);
  }
};
AIT_HD Welford combine(const Welford& a, const Welford& b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;
  const float wb = b.n / n;
  const float d = b.mean - a.mean;
  return Welford{n, fmaf(d, wb, a.mean), a.m2 + b.m2 + d * d * a.n * wb};
}
struct WelfordOp {
  AIT_HD Welford operator()(const Welford& a, const Welford& b) const { return combine(a, b); }
};

namespace gpu {

// Butterfly over the `width` lanes of each aligned lane group (width a power of two <= the warp
// size, 32 on NVIDIA, 64 on CDNA): every lane ends with the group's result.
template <int width = kWarpSize, typename A, typename Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
  static_assert(width <= kWarpSize && (width & (width - 1)) == 0, "a lane group is a power of two within a warp");
#pragma unroll
  for (int m = width / 2; m > 0; m /= 2) v = op(v, shfl_xor(v, m, width));
  return v;
}
template <int width = kWarpSize, typename Op>
__device__ __forceinline__ Welford warp_reduce(Welford v, Op op) {
  static_assert(width <= kWarpSize && (width & (width - 1)) == 0, "a lane group is a power of two within a warp");
#pragma unroll
  for (int m = width / 2; m > 0; m /= 2) {
    Welford o;
    o.n = shfl_xor(v.n, m, width);
    o.mean = shfl_xor(v.mean, m, width);
    o.m2 = shfl_xor(v.m2, m, width);
    v = op(v, o);
  }
  return v;
}

// Reduction over the whole block (blockDim.x a multiple of the warp size, at most 1024): warps
// reduce, warp leaders meet in shared memory, the first warp reduces those (1024 / kWarpSize of
// them, never more than its lanes); every thread gets the result. `identity` pads the first warp's
// missing lanes. Two barriers; safe to call repeatedly.
template <typename A, typename Op>
__device__ __forceinline__ A block_reduce(A v, Op op, A identity) {
  static_assert(1024 / kWarpSize <= kWarpSize, "one warp reduces the warps' partials");
  __shared__ A part[1024 / kWarpSize];
  __shared__ A result;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_reduce(v, op);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < static_cast<int>(blockDim.x / kWarpSize) ? part[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

// Reduction over the TPR threads that share a row: aligned lanes of a warp (TPR <= kWarpSize, a
// power of two: shuffles only, no barrier) or the whole block (TPR == blockDim.x).
template <int TPR, typename A, typename Op>
__device__ __forceinline__ A group_reduce(A v, Op op, A identity) {
  if constexpr (TPR <= kWarpSize) {
    return warp_reduce<TPR>(v, op);
  } else {
    return block_reduce(v, op, identity);
  }
}

// Blocks for a grid-stride loop over `work` items, `threads` per block: enough to fill every SM
// `per_sm` times (more only adds scheduling), never more than the work needs.
inline unsigned grid_blocks(int64_t work, int threads, int per_sm) {
  const int sms = run_state().sm_count > 0 ? run_state().sm_count : 108;
  const int64_t need = ceil_div(work, threads);
  const int64_t cap = static_cast<int64_t>(sms) * per_sm;
  return static_cast<unsigned>(need < cap ? (need > 0 ? need : 1) : cap);
}

// int32 index arithmetic is several times cheaper than int64 on the GPU: a kernel takes it when
// every index it forms, including a grid-stride step past the end, stays below 2^31.
inline bool fits_int32(int64_t n, int64_t step) { return n + step < (int64_t{1} << 31); }

}  // namespace gpu
}  // namespace ait

#endif  // AITGEN_GPU_REDUCE_H_
