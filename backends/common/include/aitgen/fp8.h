// float8 storage types (ONNX / ml_dtypes: e4m3fn, e5m2, e4m3fnuz, e5m2fnuz) and their conversions,
// shared by the CPU and CUDA backends. Kernels compute in float32 (or double) and store fp8, as the
// numpy oracle does through ml_dtypes; the conversions here match ml_dtypes bit for bit
// (tests/ops/test_dtypes_fp8.py checks every fp8 value and a sweep of float32 bit patterns):
//   - round to nearest, ties to even, from the exact double value (a float converts exactly);
//   - a value past the largest finite one after rounding overflows: e5m2 to +-inf, e4m3fn to its
//     NaN (0x7f | sign), the fnuz forms to their one NaN 0x80 (non-saturating, as numpy's astype;
//     ONNX Cast's saturate=1 clamps before converting: codegen/kernels/common/expr.py);
//   - NaN converts to 0x7f | sign (e4m3fn), 0x7e | sign (e5m2), 0x80 (fnuz);
//   - the fnuz forms have no negative zero: a result of -0 is 0x00;
//   - decoding gives the quiet NaN 0x7fc00000 with the pattern's sign (fnuz: negative).
// Bit manipulation only (no libm), so the same code runs on the host and on a GPU.
#ifndef AITGEN_FP8_H_
#define AITGEN_FP8_H_

#include <cstdint>
#include <cstring>

#ifndef AIT_FP8_HD
#if defined(__CUDACC__) || defined(__HIPCC__)
#define AIT_FP8_HD __host__ __device__ __forceinline__
#else
#define AIT_FP8_HD inline
#endif
#endif

namespace ait {

// E exponent bits, M mantissa bits, exponent bias B, FNUZ: NaN is 0x80 and there is no -0 or inf;
// INF: the format has infinities (e5m2 only). E4M3FN (not fnuz) spends only S.1111.111 on NaN.
template <int E, int M, int B, bool FNUZ, bool INF>
struct fp8 {
  uint8_t bits;
  static constexpr int kE = E, kM = M, kB = B;
  static constexpr bool kFnuz = FNUZ, kInf = INF;
  // Largest finite magnitude's bit pattern: 0x7e (e4m3fn), 0x7b (e5m2), 0x7f (fnuz).
  static constexpr uint8_t kMaxBits = FNUZ ? 0x7f : (INF ? 0x7b : 0x7e);
};

using fp8_e4m3fn = fp8<4, 3, 7, false, false>;
using fp8_e5m2 = fp8<5, 2, 15, false, true>;
using fp8_e4m3fnuz = fp8<4, 3, 8, true, false>;
using fp8_e5m2fnuz = fp8<5, 2, 16, true, false>;

AIT_FP8_HD double fp8_bits_to_double(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

// 2^k for the small exponents fp8 needs, exactly.
AIT_FP8_HD double fp8_exp2(int k) { return fp8_bits_to_double(static_cast<uint64_t>(k + 1023) << 52); }

template <int E, int M, int B, bool FNUZ, bool INF>
AIT_FP8_HD double fp8_to_double(fp8<E, M, B, FNUZ, INF> v) {
  const uint32_t b = v.bits;
  const bool neg = (b & 0x80u) != 0;
  const uint32_t e = (b >> M) & ((1u << E) - 1u);
  const uint32_t m = b & ((1u << M) - 1u);
  const double nan = fp8_bits_to_double(0x7ff8000000000000ull);
  if (FNUZ && b == 0x80u) return -nan;  // ml_dtypes reads the fnuz NaN with the sign bit set
  if (!FNUZ && !INF && (b & 0x7fu) == 0x7fu) return neg ? -nan : nan;
  if (INF && e == (1u << E) - 1u) {
    const double inf = fp8_bits_to_double(0x7ff0000000000000ull);
    return m == 0 ? (neg ? -inf : inf) : (neg ? -nan : nan);
  }
  double mag = e == 0 ? static_cast<double>(m) * fp8_exp2(1 - B - M)
                      : static_cast<double>(m + (1u << M)) * fp8_exp2(static_cast<int>(e) - B - M);
  return neg ? -mag : mag;
}

template <int E, int M, int B, bool FNUZ, bool INF>
AIT_FP8_HD float to_f32(fp8<E, M, B, FNUZ, INF> v) {
  return static_cast<float>(fp8_to_double(v));  // exact: every fp8 value is a float
}

// Round-to-nearest-even conversion of a double (see the head of the file for the special cases).
template <typename F>
AIT_FP8_HD F fp8_from_double(double x) {
  constexpr int E = F::kE, M = F::kM, B = F::kB;
  uint64_t u;
  memcpy(&u, &x, 8);
  const uint32_t sign = static_cast<uint32_t>(u >> 63) << 7;
  const int ea = static_cast<int>((u >> 52) & 0x7ff);
  const uint64_t mant = u & ((1ull << 52) - 1);
  const uint8_t nan_bits = F::kFnuz ? 0x80 : static_cast<uint8_t>(sign | (F::kInf ? 0x7e : 0x7f));
  const uint8_t ovf_bits = F::kInf ? static_cast<uint8_t>(sign | 0x7c) : nan_bits;
  F r;
  if (ea == 0x7ff) {
    r.bits = mant ? nan_bits : ovf_bits;
    return r;
  }
  const uint8_t zero_bits = F::kFnuz ? 0 : static_cast<uint8_t>(sign);
  if (ea == 0) {  // zero or a double subnormal: far below half the smallest fp8 subnormal
    r.bits = zero_bits;
    return r;
  }
  const int e_unb = ea - 1023;
  const int emin = 1 - B;  // exponent of the smallest normal
  if (e_unb > (1 << E) - B + 1) {  // far past the largest finite value of any of the forms
    r.bits = ovf_bits;
    return r;
  }
  const uint64_t sig = (1ull << 52) | mant;  // 53 significant bits
  int shift = 52 - M;
  int64_t field = e_unb + B;  // exponent field if the result is normal
  if (e_unb < emin) {
    shift += emin - e_unb;
    field = 0;
  }
  uint64_t q;
  if (shift > 53) {
    q = 0;  // below half the smallest subnormal
  } else {
    q = sig >> shift;
    const uint64_t rem = sig & ((1ull << shift) - 1);
    const uint64_t half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  // Normal: q holds the implicit bit, so (field - 1) << M plus q also carries a mantissa that
  // rounded up into the next exponent. Subnormal: q itself is the pattern (q == 2^M is the smallest
  // normal).
  const uint64_t mag = field == 0 ? q : (static_cast<uint64_t>(field - 1) << M) + q;
  if (mag > F::kMaxBits) {
    r.bits = ovf_bits;
  } else if (mag == 0) {
    r.bits = zero_bits;
  } else {
    r.bits = static_cast<uint8_t>(sign | mag);
  }
  return r;
}

}  // namespace ait

#endif  // AITGEN_FP8_H_
