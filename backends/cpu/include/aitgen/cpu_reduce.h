// Helpers of the reducing CPU kernels (pooling, norms, softmax, reductions): NaN-propagating
// max/min, a vectorised float32 exp, row sums that vectorise yet stay accurate, and the per-pixel
// loops of pooling.
#ifndef AITGEN_CPU_REDUCE_H_
#define AITGEN_CPU_REDUCE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "aitgen/cpu_convert.h"
#include "aitgen/cpu_kernel.h"
#include "aitgen/cpu_vmath.h"

// The 64-byte vector types below are returned between inline functions only (and passed by
// reference); on targets without AVX-512 GCC warns that their calling convention differs, which
// cannot matter here. GCC reports it at the end of the translation unit, so the warning stays off
// for the rest of the (generated) file rather than being popped.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ait {

// numpy's max/min propagate NaN: once the accumulator is NaN it stays NaN. Written as selects
// so loops over lanes vectorise. The NaN test reads the bits: GCC folds `v != v` on a value
// converted from float16 into a float16 compare, a library call per element.
inline bool is_nan(float v) { return (__builtin_bit_cast(uint32_t, v) & 0x7fffffffu) > 0x7f800000u; }
inline float max_nan(float acc, float v) { return ((v > acc) | is_nan(v)) ? v : acc; }
inline float min_nan(float acc, float v) { return ((v < acc) | is_nan(v)) ? v : acc; }
inline double max_nan(double acc, double v) { return ((v > acc) | (v != v)) ? v : acc; }
inline double min_nan(double acc, double v) { return ((v < acc) | (v != v)) ? v : acc; }
template <typename I>
inline I max_nan(I acc, I v) { return v > acc ? v : acc; }
template <typename I>
inline I min_nan(I acc, I v) { return v < acc ? v : acc; }

// Accumulators: float sums carry in double (a long float sum drifts), integer sums in the unsigned
// type of their width, so they wrap like the oracle's fixed-width sum without signed overflow.
template <typename C> struct Acc { using type = C; };
template <> struct Acc<float> { using type = double; };
template <> struct Acc<int32_t> { using type = uint32_t; };
template <> struct Acc<int64_t> { using type = uint64_t; };

// A pooled element as its compute type: floats through to_f32, integers as themselves.
inline float to_f32_or_int(float v) { return v; }
inline float to_f32_or_int(half v) { return to_f32(v); }
inline float to_f32_or_int(bf16 v) { return to_f32(v); }
inline float to_f32_or_int(fp4_e2m1 v) { return to_f32(v); }
inline float to_f32_or_int(fp8_e8m0 v) { return to_f32(v); }
template <int E, int M, int B, bool FNUZ, bool INF>
inline float to_f32_or_int(fp8<E, M, B, FNUZ, INF> v) { return to_f32(v); }
template <typename I>
inline I to_f32_or_int(I v) { return v; }

template <typename C> inline C lowest() {
  return std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                              : std::numeric_limits<C>::lowest();
}
template <typename C> inline C highest() {
  return std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity()
                                              : std::numeric_limits<C>::max();
}

// Row helpers over n contiguous elements, computed in float32. The float32 rows, the hot case,
// use GCC vector extensions: two accumulators stay in registers (an auto-vectorised reduction keeps
// its lanes in memory or, for max without -ffinite-math-only, stays scalar). The vectors are the
// target's width (cpu_vmath.h's vfloat: 16 lanes with AVX-512, 8 with AVX2): GCC 12 splits wider
// vectors' arithmetic, but lowers their compares and selects one lane at a time, which made the
// NaN-propagating max pool 38x slower on an AVX2 EPYC (3.8 ms for ResNet-50's, against 0.1).
// Sums add blocks of 1024 elements in double: vectorised, and accurate for long rows. Other storage
// types take plain loops.
constexpr int64_t kLanes = kVecFloats;
typedef int32_t vint __attribute__((vector_size(kVecFloats * 4)));
constexpr int64_t kBlock = 1024;

inline vfloat splat(float v) { return vfloat{} + v; }
inline vfloat loadu(const float* p) { return vload(p); }
inline void storeu(float* p, const vfloat& v) { std::memcpy(p, &v, sizeof v); }
// Horizontal sum and max by halving (a tree, not a lane-long dependency chain): lanes [0, w) meet
// lanes [w, 2w), for 16 lanes the order (lo8 + hi8, lo4 + hi4, (b0 + b2) + (b1 + b3)).
inline float hsum(const vfloat& v) {
  float a[kLanes];
  std::memcpy(a, &v, sizeof a);
  for (int64_t w = kLanes / 2; w >= 1; w /= 2)
    for (int64_t i = 0; i < w; ++i) a[i] += a[i + w];
  return a[0];
}
inline float hmax(const vfloat& v) {
  float a[kLanes];
  std::memcpy(a, &v, sizeof a);
  for (int64_t w = kLanes / 2; w >= 1; w /= 2)
    for (int64_t i = 0; i < w; ++i) a[i] = a[i] > a[i + w] ? a[i] : a[i + w];
  return a[0];
}

// exp(x) for x <= 0 (softmax's x - max), one vector, relative error ~1e-7; NaN stays NaN, and
// x < -87.3 (where float32 leaves the normal range) gives 0. Cody-Waite reduction x = n ln2 + r
// with n rounded by the 1.5 * 2^23 trick, Cephes' polynomial for exp(r), 2^n built in the bits.
inline vfloat exp_v(const vfloat& x) {
  const vfloat lo = splat(-87.3f);
  const vfloat xc = x < lo ? lo : x;
  const vfloat magic = splat(12582912.0f);
  const vfloat t = xc * 1.44269504088896341f + magic;
  const vfloat n = t - magic;
  vfloat r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  vfloat q = splat(1.9875691500E-4f);
  q = q * r + 1.3981999507E-3f;
  q = q * r + 8.3334519073E-3f;
  q = q * r + 4.1665795894E-2f;
  q = q * r + 1.6666665459E-1f;
  q = q * r + 5.0000001201E-1f;
  q = (q * r) * r + r + 1.0f;
  vint ti;
  std::memcpy(&ti, &t, sizeof ti);
  const vint bits = (ti - (0x4B400000 - 127)) << 23;
  vfloat scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < lo ? splat(0.0f) : q * scale;
}
// The same exp on one float, for loops the compiler vectorises itself (strided softmax, 16-bit
// rows): the one scalar form every kernel shares.
inline float exp_f32(float x) { return exp_poly(x); }

// float16 / bfloat16 rows go to the float32 forms a block at a time, converted into an L1 buffer
// by a loop that vectorises (to_f32 is branch-free for both). The generic forms (a double
// accumulator per element, a scalar exp) ran a float16 softmax 13x and a layer norm 7.6x slower
// than float32 (bfloat16 5.8x and 2.2x) on an AVX-512 EPYC.
template <typename T>
constexpr bool kNarrowFloat = std::is_same_v<T, half> || std::is_same_v<T, bf16>;
template <typename T, typename F>
inline void narrow_blocks(const T* x, int64_t n, F&& f) {
  alignas(64) float buf[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    to_f32_block(x + b, buf, m);
    f(static_cast<const float*>(buf), b, m);
  }
}

inline double row_sum(const float* x, int64_t n);
template <typename T>
inline double row_sum(const T* x, int64_t n) {
  double s = 0.0;
  if constexpr (kNarrowFloat<T>) {
    narrow_blocks(x, n, [&](const float* f, int64_t, int64_t m) { s += row_sum(f, m); });
  } else {
    for (int64_t i = 0; i < n; ++i) s += to_f32(x[i]);
  }
  return s;
}
inline double row_sum(const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = n - b < kBlock ? n : b + kBlock;
    vfloat a0 = splat(0.0f), a1 = splat(0.0f);
    int64_t i = b;
    for (; i + 2 * kLanes <= e; i += 2 * kLanes) {
      a0 += loadu(x + i);
      a1 += loadu(x + i + kLanes);
    }
    float s = hsum(a0 + a1);
    for (; i < e; ++i) s += x[i];
    total += s;
  }
  return total;
}

// Sum of (x - mu)^2: the second pass of a two-pass variance.
inline double row_sumsq(const float* x, int64_t n, float mu);
template <typename T>
inline double row_sumsq(const T* x, int64_t n, float mu) {
  double s = 0.0;
  if constexpr (kNarrowFloat<T>) {
    narrow_blocks(x, n, [&](const float* f, int64_t, int64_t m) { s += row_sumsq(f, m, mu); });
    return s;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float c = to_f32(x[i]) - mu;
    s += c * c;
  }
  return s;
}
inline double row_sumsq(const float* x, int64_t n, float mu) {
  double total = 0.0;
  const vfloat m = splat(mu);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = n - b < kBlock ? n : b + kBlock;
    vfloat a0 = splat(0.0f), a1 = splat(0.0f);
    int64_t i = b;
    for (; i + 2 * kLanes <= e; i += 2 * kLanes) {
      const vfloat c0 = loadu(x + i) - m, c1 = loadu(x + i + kLanes) - m;
      a0 += c0 * c0;
      a1 += c1 * c1;
    }
    float s = hsum(a0 + a1);
    for (; i < e; ++i) s += (x[i] - mu) * (x[i] - mu);
    total += s;
  }
  return total;
}

// One output pixel of pooling over n channels: y[j] = max (NaN-propagating) or sum / div of
// x[off[t] + j] over the ntaps taps, summed in tap order (as the oracle does). The float32 case
// keeps a vector of channels in a register across the taps; other types go through a stack block.
template <typename T, typename C>
inline T from_compute(C v) { return static_cast<T>(v); }
template <>
inline half from_compute<half, float>(float v) { return from_f32<half>(v); }
template <>
inline bf16 from_compute<bf16, float>(float v) { return from_f32<bf16>(v); }
template <>
inline fp4_e2m1 from_compute<fp4_e2m1, float>(float v) { return from_f32<fp4_e2m1>(v); }
template <>
inline fp8_e8m0 from_compute<fp8_e8m0, float>(float v) { return from_f32<fp8_e8m0>(v); }
template <>
inline fp8_e4m3fn from_compute<fp8_e4m3fn, float>(float v) { return from_f32<fp8_e4m3fn>(v); }
template <>
inline fp8_e5m2 from_compute<fp8_e5m2, float>(float v) { return from_f32<fp8_e5m2>(v); }
template <>
inline fp8_e4m3fnuz from_compute<fp8_e4m3fnuz, float>(float v) { return from_f32<fp8_e4m3fnuz>(v); }
template <>
inline fp8_e5m2fnuz from_compute<fp8_e5m2fnuz, float>(float v) { return from_f32<fp8_e5m2fnuz>(v); }

template <typename C, typename T>
inline void pool_max_scalar(T* y, const T* x, const int64_t* off, int ntaps, int64_t n) {
  constexpr int64_t B = 64;
  for (int64_t j0 = 0; j0 < n; j0 += B) {
    const int64_t nb = n - j0 < B ? n - j0 : B;
    C acc[B];
    for (int64_t j = 0; j < nb; ++j) acc[j] = lowest<C>();
    for (int t = 0; t < ntaps; ++t)
      for (int64_t j = 0; j < nb; ++j) acc[j] = max_nan(acc[j], static_cast<C>(to_f32_or_int(x[off[t] + j0 + j])));
    for (int64_t j = 0; j < nb; ++j) y[j0 + j] = from_compute<T>(acc[j]);
  }
}
template <typename C, typename T>
inline void pool_max(T* y, const T* x, const int64_t* off, int ntaps, int64_t n) {
  pool_max_scalar<C>(y, x, off, ntaps, n);
}
// float16 / bfloat16 storage: each tap's kLanes channels convert to float32 in bulk (cpu_convert.h,
// exact) and meet the accumulator as a vector, as float32 does; the maximum is one of the inputs,
// so converting it back is exact. Through pool_max_scalar (a max
// per element) ResNet-50's bfloat16 max pool took 2.6 ms of 42 on an AVX-512 EPYC.
template <typename T>
inline void pool_max_narrow(T* y, const T* x, const int64_t* off, int ntaps, int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    vfloat acc = splat(-INFINITY);
    for (int t = 0; t < ntaps; ++t) {
      float f[kLanes];
      to_f32_block(x + off[t] + j, f, kLanes);
      const vfloat v = loadu(f);
      acc = (v > acc) | (v != v) ? v : acc;
    }
    float r[kLanes];
    storeu(r, acc);
    from_f32_block(r, y + j, kLanes);
  }
  if (j < n) pool_max_scalar<float>(y + j, x + j, off, ntaps, n - j);  // the last channels
}
template <>
inline void pool_max<float, half>(half* y, const half* x, const int64_t* off, int ntaps, int64_t n) {
  pool_max_narrow(y, x, off, ntaps, n);
}
template <>
inline void pool_max<float, bf16>(bf16* y, const bf16* x, const int64_t* off, int ntaps, int64_t n) {
  pool_max_narrow(y, x, off, ntaps, n);
}
template <>
inline void pool_max<float, float>(float* y, const float* x, const int64_t* off, int ntaps, int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    vfloat acc = splat(-INFINITY);
    for (int t = 0; t < ntaps; ++t) {
      const vfloat v = loadu(x + off[t] + j);
      acc = (v > acc) | (v != v) ? v : acc;
    }
    storeu(y + j, acc);
  }
  for (; j < n; ++j) {
    float acc = -INFINITY;
    for (int t = 0; t < ntaps; ++t) acc = max_nan(acc, x[off[t] + j]);
    y[j] = acc;
  }
}

template <typename T>
inline void pool_avg_scalar(T* y, const T* x, const int64_t* off, int ntaps, int64_t n, float div) {
  constexpr int64_t B = 64;
  for (int64_t j0 = 0; j0 < n; j0 += B) {
    const int64_t nb = n - j0 < B ? n - j0 : B;
    float acc[B];
    for (int64_t j = 0; j < nb; ++j) acc[j] = 0.0f;
    for (int t = 0; t < ntaps; ++t)
      for (int64_t j = 0; j < nb; ++j) acc[j] += to_f32(x[off[t] + j0 + j]);
    for (int64_t j = 0; j < nb; ++j) y[j0 + j] = from_f32<T>(acc[j] / div);
  }
}
template <typename T>
inline void pool_avg(T* y, const T* x, const int64_t* off, int ntaps, int64_t n, float div) {
  pool_avg_scalar(y, x, off, ntaps, n, div);
}
// float16 / bfloat16: as pool_max_narrow, float32 vectors over kLanes channels; the sum runs over
// the taps in the same order as pool_avg_scalar's, so the results are the same.
template <typename T>
inline void pool_avg_narrow(T* y, const T* x, const int64_t* off, int ntaps, int64_t n, float div) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    vfloat acc = splat(0.0f);
    for (int t = 0; t < ntaps; ++t) {
      float f[kLanes];
      to_f32_block(x + off[t] + j, f, kLanes);
      acc += loadu(f);
    }
    float r[kLanes];
    storeu(r, acc / div);
    from_f32_block(r, y + j, kLanes);
  }
  if (j < n) pool_avg_scalar(y + j, x + j, off, ntaps, n - j, div);
}
template <>
inline void pool_avg<half>(half* y, const half* x, const int64_t* off, int ntaps, int64_t n, float div) {
  pool_avg_narrow(y, x, off, ntaps, n, div);
}
template <>
inline void pool_avg<bf16>(bf16* y, const bf16* x, const int64_t* off, int ntaps, int64_t n, float div) {
  pool_avg_narrow(y, x, off, ntaps, n, div);
}
template <>
inline void pool_avg<float>(float* y, const float* x, const int64_t* off, int ntaps, int64_t n, float div) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    vfloat acc = splat(0.0f);
    for (int t = 0; t < ntaps; ++t) acc += loadu(x + off[t] + j);
    storeu(y + j, acc / div);
  }
  for (; j < n; ++j) {
    float acc = 0.0f;
    for (int t = 0; t < ntaps; ++t) acc += x[off[t] + j];
    y[j] = acc / div;
  }
}

// float64 averages in double (the generic version above sums in float32).
template <>
inline void pool_avg<double>(double* y, const double* x, const int64_t* off, int ntaps, int64_t n, float div) {
  for (int64_t j = 0; j < n; ++j) {
    double acc = 0.0;
    for (int t = 0; t < ntaps; ++t) acc += x[off[t] + j];
    y[j] = acc / static_cast<double>(div);  // div: a product of two small counts, exact in float
  }
}

// Max of a row, NaN not propagated: softmax needs no NaN-exact max, since a NaN in the row turns
// its sum, and so every output, into NaN anyway.
inline float row_max(const float* x, int64_t n);
template <typename T>
inline float row_max(const T* x, int64_t n) {
  float m = -INFINITY;
  if constexpr (kNarrowFloat<T>) {
    narrow_blocks(x, n, [&](const float* f, int64_t, int64_t k) {
      const float b = row_max(f, k);
      m = m > b ? m : b;
    });
    return m;
  }
  for (int64_t i = 0; i < n; ++i) m = m > to_f32(x[i]) ? m : to_f32(x[i]);
  return m;
}
inline float row_max(const float* x, int64_t n) {
  vfloat a0 = splat(-INFINITY), a1 = a0;
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const vfloat v0 = loadu(x + i), v1 = loadu(x + i + kLanes);
    a0 = a0 > v0 ? a0 : v0;
    a1 = a1 > v1 ? a1 : v1;
  }
  float m = hmax(a0 > a1 ? a0 : a1);
  for (; i < n; ++i) m = m > x[i] ? m : x[i];
  return m;
}

// Sum of exp(x - m) over a row; e (when not null) receives each exp.
inline double row_exp_sum(const float* x, int64_t n, float m, float* e);
template <typename T>
inline double row_exp_sum(const T* x, int64_t n, float m, float* e) {
  double s = 0.0;
  if constexpr (kNarrowFloat<T>) {
    narrow_blocks(x, n, [&](const float* f, int64_t b, int64_t k) { s += row_exp_sum(f, k, m, e ? e + b : e); });
    return s;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = exp_f32(to_f32(x[i]) - m);
    if (e) e[i] = v;
    s += v;
  }
  return s;
}
inline double row_exp_sum(const float* x, int64_t n, float m, float* e) {
  double total = 0.0;
  const vfloat mv = splat(m);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = n - b < kBlock ? n : b + kBlock;
    vfloat a0 = splat(0.0f);
    int64_t i = b;
    for (; i + kLanes <= end; i += kLanes) {
      const vfloat v = exp_v(loadu(x + i) - mv);
      if (e) storeu(e + i, v);
      a0 += v;
    }
    float s = hsum(a0);
    for (; i < end; ++i) {
      const float v = exp_f32(x[i] - m);
      if (e) e[i] = v;
      s += v;
    }
    total += s;
  }
  return total;
}

// One row of a layer norm (kLayer) or an RMS norm over n contiguous elements: y = (x - mean) * rstd
// (* w + b), statistics in float32 from double sums. A row fits in L1/L2 for the shapes that
// matter (768..8192), so the extra pass of the two-pass variance costs little and keeps the
// oracle's accuracy for inputs with a large mean. X is the storage type, or float for a row a
// prologue computed. Shared by norm_rows.cpp.j2 and norm_rows_grouped.cpp.j2.
template <bool kLayer, bool kWeight, bool kBias, typename X, typename T>
inline void norm_row(const X* xr, T* yr, const T* w, const T* b, int64_t n, float eps) {
  if constexpr (kNarrowFloat<X>) {
    if (n <= kBlock) {  // a 16-bit row in one block: converted once for all three passes
      alignas(64) float row[kBlock];
      to_f32_block(xr, row, n);
      norm_row<kLayer, kWeight, kBias>(static_cast<const float*>(row), yr, w, b, n, eps);
      return;
    }
  }
  const float mean = kLayer ? static_cast<float>(row_sum(xr, n) / static_cast<double>(n)) : 0.0f;
  const float var = static_cast<float>(row_sumsq(xr, n, mean) / static_cast<double>(n));
  const float rstd = 1.0f / std::sqrt(var + eps);
  if constexpr (kNarrowFloat<T>) {  // 16-bit rows a block at a time, converted in bulk both ways
    alignas(64) float buf[kBlock];
    for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
      const int64_t m = n - b0 < kBlock ? n - b0 : kBlock;
      to_f32_block(xr + b0, buf, m);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) {
        float y = (buf[i] - mean) * rstd;
        if (kWeight) y = y * to_f32(w[b0 + i]);
        if (kBias) y = y + to_f32(b[b0 + i]);
        buf[i] = y;
      }
      from_f32_block(buf, yr + b0, m);
    }
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float y = (to_f32(xr[i]) - mean) * rstd;
    if (kWeight) y = y * to_f32(w[i]);
    if (kBias) y = y + to_f32(b[i]);
    yr[i] = from_f32<T>(y);
  }
}

}  // namespace ait

#endif  // AITGEN_CPU_REDUCE_H_
