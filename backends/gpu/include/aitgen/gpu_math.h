// Math and memory-access helpers of the GPU kernels (CUDA and HIP).
//
// 1. The `ait::` functions that the fused-expression C++ calls (codegen/kernels/common/expr.py
//    _EXPR: sigmoid_poly, tanh_poly, erf_poly, gelu_erf; also exp_poly and erfc_poly), as
//    __host__ __device__ float functions. They are written with explicit fmaf and IEEE division
//    only, so the host and the device evaluate the same operations and round them alike: the
//    host-compiled functors that tests/backends/cuda/test_cuda_own_kernels.py checks against
//    scipy on this machine are the math a GPU runs. (Device code may still contract a plain
//    `a * b + c` of the surrounding expression into an FMA; inside these functions nothing is
//    left to contract.) The polynomials are our own least-squares fits on Chebyshev nodes in
//    float64, coefficients rounded to float32.
// 2. Packs: V adjacent elements moved as one aligned access (128-bit for 16 bytes), the unit of
//    the vectorised element-wise, copy, norm and pooling kernels.
#ifndef AITGEN_GPU_MATH_H_
#define AITGEN_GPU_MATH_H_

#include <cstdint>
#include <cstring>

#include "aitgen/gpu_kernel.h"

namespace ait {

AIT_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// 2^k for k in [-126, 127] (a normal float built in the exponent bits).
AIT_HD float exp2i(int k) { return bits_to_float(static_cast<uint32_t>(k + 127) << 23); }

// exp(x) in float32, within 1 ulp of the correctly rounded value over the normal range, with
// subnormal results (x down to -103.9) and overflow to +inf past 88.72; NaN stays NaN.
// x = n ln2 + r with |r| <= ln2/2 (n rounded by adding 1.5 * 2^23 in one FMA, and r reduced with
// two FMAs, exact products), e^r = 1 + r + r^2 P(r) with P of degree 5 (relative fit 1e-9), and
// 2^n applied as two normal factors so that results below 2^-126 round once, to a subnormal.
AIT_HD float exp_poly(float x) {
  const bool nan = x != x;
  float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  xc = nan ? 0.0f : xc;
  const float kRound = 12582912.0f;  // 1.5 * 2^23
  const float n = fmaf(xc, 1.44269504088896341f, kRound) - kRound;
  float r = fmaf(-n, 0.693145751953125f, xc);  // ln2 split in a 16-bit head and its tail
  r = fmaf(-n, 1.42860682030941723e-06f, r);
  float p = 1.982649555e-04f;
  p = fmaf(p, r, 1.394602121e-03f);
  p = fmaf(p, r, 8.333429694e-03f);
  p = fmaf(p, r, 4.166626930e-02f);
  p = fmaf(p, r, 1.666666567e-01f);
  p = fmaf(p, r, 5.000000000e-01f);
  const float e = fmaf(p, r * r, r) + 1.0f;
  const int k = static_cast<int>(n);
  const int k1 = k / 2;
  return nan ? x : (e * exp2i(k1)) * exp2i(k - k1);
}

// erf(x)/x for |x| <= 1: a degree-6 polynomial in x^2 (fit 3e-9).
AIT_HD float erf_small(float x) {
  const float u = x * x;
  float p = 7.933493907e-05f;
  p = fmaf(p, u, -8.034846396e-04f);
  p = fmaf(p, u, 5.191218574e-03f);
  p = fmaf(p, u, -2.685539983e-02f);
  p = fmaf(p, u, 1.128362566e-01f);
  p = fmaf(p, u, -3.761262894e-01f);
  p = fmaf(p, u, 1.128379226e+00f);
  return x * p;
}

// erfc(a) for a in [1, 10] (callers clamp): exp(-a^2) * t * Q(t - 0.42) with t = 1 / (1 + a/2)
// in [1/6, 2/3] and Q of degree 8 fitted to erfcx(a) / t (relative fit 3e-8). exp(-a^2) is taken
// of a^2 rounded and corrected by its rounding error l (one FMA gives it exactly): exp(-h - l) =
// exp(-h) (1 - l), since a^2 near 100 would otherwise carry a 4e-6 relative error.
AIT_HD float erfc_tail(float a) {
  const float t = 1.0f / fmaf(0.5f, a, 1.0f);
  const float s = t - 0.42f;
  float q = -3.710391000e-02f;
  q = fmaf(q, s, 9.155634791e-02f);
  q = fmaf(q, s, 5.324684829e-02f);
  q = fmaf(q, s, -1.411968619e-01f);
  q = fmaf(q, s, -1.222728118e-01f);
  q = fmaf(q, s, 1.932740510e-01f);
  q = fmaf(q, s, 5.179383159e-01f);
  q = fmaf(q, s, 6.008577943e-01f);
  q = fmaf(q, s, 4.593144357e-01f);
  const float h = a * a;
  const float l = fmaf(a, a, -h);
  return exp_poly(-h) * (1.0f - l) * (t * q);
}

AIT_HD float erf_poly(float x) {
  const float a = fabsf(x);
  const float tail = 1.0f - erfc_tail(a > 10.0f ? 10.0f : (a < 1.0f ? 1.0f : a));
  return a <= 1.0f ? erf_small(x) : copysignf(tail, x);
}

// erfc(x) without the cancellation of 1 - erf(x) for large x. Beyond 10 it rounds to 0 (erfc(10)
// is 2e-45, one subnormal step), so erfc(+inf) = 0 and GELU(-inf) = -inf * 0 = NaN, as the oracle.
AIT_HD float erfc_poly(float x) {
  const float a = fabsf(x);
  const float tail = a > 10.0f ? 0.0f : erfc_tail(a < 1.0f ? 1.0f : a);
  return a <= 1.0f ? 1.0f - erf_small(x) : (x > 0.0f ? tail : 2.0f - tail);
}

// GELU(x) = x/2 erfc(-x / sqrt 2): relative accuracy also for negative x, where 1 + erf cancels.
AIT_HD float gelu_erf(float x) { return 0.5f * x * erfc_poly(-0.7071067811865476f * x); }

// tanh: |x| < 0.55: x + x^3 P(x^2) (degree 4, fit 2e-9); beyond, 1 - 2 / (e^{2|x|} + 1) with the
// sign of x. tanh rounds to 1 in float32 from 9.01 on, so the argument is capped at 9.1 (the cap
// is written so that NaN passes through it).
AIT_HD float tanh_poly(float x) {
  const float a = fabsf(x);
  const float u = x * x;
  float p = -6.287823431e-03f;
  p = fmaf(p, u, 2.108218335e-02f);
  p = fmaf(p, u, -5.385515466e-02f);
  p = fmaf(p, u, 1.333261728e-01f);
  p = fmaf(p, u, -3.333331943e-01f);
  const float big = copysignf(1.0f - 2.0f / (exp_poly(2.0f * (a > 9.1f ? 9.1f : a)) + 1.0f), x);
  return a < 0.55f ? fmaf(x * u, p, x) : big;
}

// 1 / (1 + e^-x), through e = e^-|x| so that both tails keep relative accuracy (x < 0 gives
// e / (1 + e), down to subnormal results).
AIT_HD float sigmoid_poly(float x) {
  const float e = exp_poly(-fabsf(x));
  const float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

// float64 computes in double (the fused-expression C++ calls the same names for both types).
AIT_HD double erf_poly(double x) { return erf(x); }
AIT_HD double gelu_erf(double x) { return 0.5 * x * erfc(-0.7071067811865476 * x); }
AIT_HD double tanh_poly(double x) { return tanh(x); }
AIT_HD double sigmoid_poly(double x) {
  const double e = exp(-fabs(x));
  const double r = 1.0 / (1.0 + e);
  return x >= 0.0 ? r : e * r;
}

// -- packs ----------------------------------------------------------------------------------

// V elements of T as one access of sizeof(T) * V bytes; the pointer must be aligned to that
// (the kernels' host code checks it and takes a scalar variant otherwise).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <int V, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& v) {
  *reinterpret_cast<Pack<T, V>*>(p) = v;
}

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace ait

#endif  // AITGEN_GPU_MATH_H_
