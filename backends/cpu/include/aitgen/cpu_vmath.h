// Vectorisable math for CPU kernels: an exp the compiler can put in a SIMD loop, and a register-tiled
// float32 small GEMM. glibc's expf is scalar unless built with -ffast-math (libmvec), which would
// also relax the rest of a kernel; softmax-style loops need the vector form to keep up with FMA.
#ifndef AITGEN_CPU_VMATH_H_
#define AITGEN_CPU_VMATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ait {

// exp(x) in float32 within ~2 ulp of expf for x in [-87, 88]; exactly 0 below -87 (and for -inf),
// so masked scores vanish. Cephes' range reduction x = n ln2 + r with a degree-6 polynomial; 2^n is
// built in the exponent bits. Plain arithmetic only, so `#pragma omp simd` loops vectorise.
inline float exp_poly(float x) {
  const float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, 4);
  return x < -87.0f ? 0.0f : p * two_n;
}

// erf, erfc and tanh in float32 for SIMD loops (glibc's erff/tanhf are scalar calls, which keep a
// GELU loop from vectorising: BERT-base's GELUs took 10.6 ms through std::erf). Both branches of
// every select are computed, so the loops if-convert. NaN propagates; +-inf give +-1 (erf, tanh).
// Measured against scipy in float64 over [-12, 12] and down to 1e-30 (tests/backends/cpu/
// test_fused_elementwise_cpu.py): erf within 2.4 ulp (1.8e-7 relative), tanh within 1.3 ulp.
//
// erfc(a) for a in [1, 9.5] (the caller clamps): exp(-a^2) * t * g(t - 0.55), t = 1/a, with g a
// degree-10 least-squares (near minimax, 3.4e-8) fit of a e^(a^2) erfc(a); centring t keeps the
// Horner sum free of cancellation. exp(-a^2) is taken of a^2 rounded to float and corrected by the
// rounding error (an FMA gives it exactly): without that, a^2 ~ 80 would carry 5e-6 relative error.
inline float erfc_tail(float a) {
  const float t = 1.0f / a;
  const float s = t - 0.55f;
  float g = -0.04756593704f;
  g = g * s - 0.03058185987f;
  g = g * s + 0.1056439355f;
  g = g * s - 0.07345818728f;
  g = g * s + 0.009617130272f;
  g = g * s + 0.05098721758f;
  g = g * s - 0.09690913558f;
  g = g * s + 0.09831754118f;
  g = g * s - 0.02036582679f;
  g = g * s - 0.1700347215f;
  g = g * s + 0.5023534298f;
  const float a2 = a * a;
#if defined(__FMA__)
  const float lo = __builtin_fmaf(a, a, -a2);  // a*a - a2, exactly
#else
  const float lo = 0.0f;
#endif
  return exp_poly(-a2) * (1.0f - lo) * g * t;
}

// erf(x)/x for |x| <= 1 as a degree-6 polynomial in x^2 (1.2e-9 fit; Cephes' erff uses the same).
inline float erf_small(float x) {
  const float u = x * x;
  float p = 7.853846910e-05f;
  p = p * u - 8.010189049e-04f;
  p = p * u + 5.188327283e-03f;
  p = p * u - 2.685381100e-02f;
  p = p * u + 1.128358543e-01f;
  p = p * u - 3.761262596e-01f;
  p = p * u + 1.128379107e+00f;
  return x * p;
}

inline float erf_poly(float x) {
  const float a = std::fabs(x);
  const float tail = 1.0f - erfc_tail(std::min(std::max(a, 1.0f), 9.5f));
  return a <= 1.0f ? erf_small(x) : std::copysign(tail, x);
}

// erfc(x) = 1 - erf(x) without the cancellation 1 - erf(x) suffers for large x.
inline float erfc_poly(float x) {
  const float a = std::fabs(x);
  const float tail = erfc_tail(std::min(std::max(a, 1.0f), 9.5f));
  return a <= 1.0f ? 1.0f - erf_small(x) : (x > 0.0f ? tail : 2.0f - tail);
}

// GELU(x) = x/2 (1 + erf(x/sqrt 2)) = x/2 erfc(-x/sqrt 2): the erfc form keeps full relative
// accuracy for negative x, where 1 + erf cancels.
inline float gelu_erf(float x) { return 0.5f * x * erfc_poly(-0.7071067811865476f * x); }

// tanh: Cephes' tanhf. |x| < 0.625: x + x^3 P(x^2); beyond, 1 - 2 / (exp(2|x|) + 1). tanh(x) rounds
// to 1 in float32 above x = 9.01, so the argument is capped at 9.1 and exp never overflows.
inline float tanh_poly(float x) {
  const float a = std::fabs(x);
  const float u = x * x;
  float p = -5.70498872745e-3f;
  p = p * u + 2.06390887954e-2f;
  p = p * u - 5.37397155531e-2f;
  p = p * u + 1.33314422036e-1f;
  p = p * u - 3.33332819422e-1f;
  const float big = std::copysign(1.0f - 2.0f / (exp_poly(2.0f * std::min(a, 9.1f)) + 1.0f), x);
  return a < 0.625f ? x + x * u * p : big;
}

// 1 / (1 + e^-x) through e = e^-|x| <= 1 (as cuda_math.cuh): e^-x itself would saturate at e^88
// for x < -88, leaving ~6e-39 where the sigmoid is 0, so that silu(-inf) = -inf * 6e-39 = -inf
// instead of the NaN of -inf * 0 (the oracle's and torch's), and silu(-3e38) = -1.8 instead of -0.
// x < 0 gives e / (1 + e), which keeps relative accuracy in that tail too.
inline float sigmoid_poly(float x) {
  const float e = exp_poly(-std::fabs(x));
  const float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

// float64 computes in double through libm: the float32 polynomials above would cost it its
// precision (the fused-expression C++ calls the same names for both types).
inline double erf_poly(double x) { return std::erf(x); }
inline double gelu_erf(double x) { return 0.5 * x * std::erfc(-0.7071067811865476 * x); }
inline double tanh_poly(double x) { return std::tanh(x); }
inline double sigmoid_poly(double x) {
  const double e = std::exp(-std::fabs(x));
  const double r = 1.0 / (1.0 + e);
  return x >= 0.0 ? r : e * r;
}

// Small float32 GEMM for blocks already in cache (attention tiles), no packing:
// C[M x N] (+)= A[M x K] * B[K x N]; B and C row-major with leading dimensions; A's element (r, k)
// is A[r * lda + k * ak], so A may be stored transposed (lda = 1, ak = its row length): it is only
// ever broadcast. A register tile of R rows x NV vectors of C stays in registers while K streams;
// each B vector is loaded once per k and feeds R FMAs. GCC vector types make that reuse explicit:
// with plain loops GCC re-loads B for every row (a memory operand per FMA), which caps the tile at
// the L1 load bandwidth (~75% of FMA peak on AVX-512).
#if defined(__AVX512F__)
constexpr int kVecFloats = 16;
#elif defined(__AVX__)
constexpr int kVecFloats = 8;
#else
constexpr int kVecFloats = 4;
#endif
typedef float vfloat __attribute__((vector_size(kVecFloats * 4)));
// Tile shape: 6 rows x 4 vectors is 24 accumulators + 4 B vectors of AVX-512's 32 registers; with
// 16 registers (AVX2) 6 x 2 leaves room likewise.
constexpr int kTileRows = 6;
constexpr int kTileVecs = kVecFloats == 16 ? 4 : 2;

inline vfloat vload(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <int R, int NV>
inline void gemm_tile(const float* A, int64_t lda, int64_t ak, const float* B, int64_t ldb, float* C,
                      int64_t ldc, int64_t K, bool accumulate) {
  vfloat c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? vload(C + r * ldc + v * kVecFloats) : vfloat{};
  for (int64_t k = 0; k < K; ++k) {
    vfloat b[NV];
    for (int v = 0; v < NV; ++v) b[v] = vload(B + k * ldb + v * kVecFloats);
    for (int r = 0; r < R; ++r) {
      const float a = A[r * lda + k * ak];
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(C + r * ldc + v * kVecFloats, &c[r][v], sizeof(vfloat));
}

// Columns past the last whole vector, one at a time.
inline void gemm_cols(const float* A, int64_t lda, int64_t ak, const float* B, int64_t ldb, float* C,
                      int64_t ldc, int64_t M, int64_t n, int64_t K, bool accumulate) {
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float s = accumulate ? C[r * ldc + j] : 0.0f;
      for (int64_t k = 0; k < K; ++k) s += A[r * lda + k * ak] * B[k * ldb + j];
      C[r * ldc + j] = s;
    }
}

template <int R>
inline void gemm_rows(const float* A, int64_t lda, int64_t ak, const float* B, int64_t ldb, float* C,
                      int64_t ldc, int64_t N, int64_t K, bool accumulate) {
  constexpr int64_t W = kTileVecs * kVecFloats;
  int64_t j = 0;
  for (; j + W <= N; j += W) gemm_tile<R, kTileVecs>(A, lda, ak, B + j, ldb, C + j, ldc, K, accumulate);
  for (; j + kVecFloats <= N; j += kVecFloats) gemm_tile<R, 1>(A, lda, ak, B + j, ldb, C + j, ldc, K, accumulate);
  if (j < N) gemm_cols(A, lda, ak, B + j, ldb, C + j, ldc, R, N - j, K, accumulate);
}

inline void gemm_small(const float* A, int64_t lda, int64_t ak, const float* B, int64_t ldb, float* C,
                       int64_t ldc, int64_t M, int64_t N, int64_t K, bool accumulate) {
  int64_t i = 0;
  for (; i + kTileRows <= M; i += kTileRows)
    gemm_rows<kTileRows>(A + i * lda, lda, ak, B, ldb, C + i * ldc, ldc, N, K, accumulate);
  const float* a = A + i * lda;
  float* c = C + i * ldc;
  switch (M - i) {  // the last rows, one tile of their own height
    case 5: gemm_rows<5>(a, lda, ak, B, ldb, c, ldc, N, K, accumulate); break;
    case 4: gemm_rows<4>(a, lda, ak, B, ldb, c, ldc, N, K, accumulate); break;
    case 3: gemm_rows<3>(a, lda, ak, B, ldb, c, ldc, N, K, accumulate); break;
    case 2: gemm_rows<2>(a, lda, ak, B, ldb, c, ldc, N, K, accumulate); break;
    case 1: gemm_rows<1>(a, lda, ak, B, ldb, c, ldc, N, K, accumulate); break;
    default: break;
  }
}

}  // namespace ait

#endif  // AITGEN_CPU_VMATH_H_
