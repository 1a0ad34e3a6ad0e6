// Shared helpers of the CPU kernels: storage types and their float32 conversions. Kernels compute
// in float32 (float64 in double) and store in the tensor's type, as the numpy oracle does.
#ifndef AITGEN_CPU_KERNEL_H_
#define AITGEN_CPU_KERNEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// Fused element-wise functors (codegen/kernels/common/expr.py node_expr) call its vectorisable
// erf/tanh/exp, and any kernel may render one (GEMM/conv epilogues too).
#include "aitgen/cpu_vmath.h"
#include "aitgen/e8m0.h"
#include "aitgen/fp4.h"
#include "aitgen/fp8.h"

// Kernels are internal to the model library (hidden); model.cpp calls them by name.
#define AIT_KERNEL extern "C" void

namespace ait {

// float16: converted by to_f32 / from_f32 below, in forms that loops vectorise.
struct half {
  uint16_t bits;
};
// bfloat16: the high half of a float32, rounded to nearest even.
struct bf16 {
  uint16_t bits;
};

inline float to_f32(float v) { return v; }
inline double to_f32(double v) { return v; }  // float64 loads keep their precision
inline float to_f32(half v) {
  // GCC 12 converts _Float16 one element at a time (scalar F16C), AVX512-FP16 or not (on a Xeon
  // with AVX512-FP16 a loop of them reports "no vectype"), and a loop over a tensor stays scalar.
  // This branch-free form (exact for every half: zeros, subnormals, inf, NaN) vectorises: integer
  // shifts, one multiply, selects (tests/backends/cpu/test_conversions_cpu.py).
  const uint32_t w = static_cast<uint32_t>(v.bits) << 16;
  const uint32_t sign = w & 0x80000000u, two_w = w + w;
  uint32_t nb = (two_w >> 4) + (0xE0u << 23), db = (two_w >> 17) | (126u << 23);
  float normal, denormal;
  std::memcpy(&normal, &nb, 4);
  std::memcpy(&denormal, &db, 4);
  normal *= 0x1.0p-112f;  // rebias the exponent; inf and NaN stay themselves
  denormal -= 0.5f;       // a subnormal half's magnitude, exactly
  uint32_t nbits, dbits;
  std::memcpy(&nbits, &normal, 4);
  std::memcpy(&dbits, &denormal, 4);
  // The select as mask arithmetic: GCC 12 if-converts a ?: here only with AVX-512 masks, and
  // leaves the loop scalar ("control flow in loop") on AVX2.
  const uint32_t sub = 0u - static_cast<uint32_t>(two_w < (1u << 27));
  const uint32_t r = sign | (dbits & sub) | (nbits & ~sub);
  float f;
  std::memcpy(&f, &r, 4);
  return f;
}
inline float to_f32(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) { return v; }
template <>
inline double from_f32<double>(float v) { return v; }
template <>
inline fp4_e2m1 from_f32<fp4_e2m1>(float v) { return fp4_from_float(v); }
template <>
inline fp8_e8m0 from_f32<fp8_e8m0>(float v) { return e8m0_from_float(v); }
template <>
inline fp8_e4m3fn from_f32<fp8_e4m3fn>(float v) { return fp8_from_double<fp8_e4m3fn>(v); }
template <>
inline fp8_e5m2 from_f32<fp8_e5m2>(float v) { return fp8_from_double<fp8_e5m2>(v); }
template <>
inline fp8_e4m3fnuz from_f32<fp8_e4m3fnuz>(float v) { return fp8_from_double<fp8_e4m3fnuz>(v); }
template <>
inline fp8_e5m2fnuz from_f32<fp8_e5m2fnuz>(float v) { return fp8_from_double<fp8_e5m2fnuz>(v); }
template <>
inline half from_f32<half>(float v) {
  // Round to nearest even in float arithmetic, branch-free so that loops vectorise (see to_f32):
  // scaling up then down rounds the mantissa at half's precision, subnormals included; +-inf and
  // overflow give inf, NaN stays a (quiet) NaN.
  float base = (std::fabs(v) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t w;
  std::memcpy(&w, &v, 4);
  const uint32_t shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = std::max(bias, 0x71000000u);
  const uint32_t bb = (bias >> 1) + 0x07800000u;
  float b;
  std::memcpy(&b, &bb, 4);
  base = b + base;
  uint32_t bits;
  std::memcpy(&bits, &base, 4);
  const uint32_t nonsign = ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu);
  half r;
  const uint32_t nan = 0u - static_cast<uint32_t>(shl1_w > 0xFF000000u);  // as in to_f32: masks
  r.bits = static_cast<uint16_t>((sign >> 16) | (0x7E00u & nan) | (nonsign & ~nan));
  return r;
}

template <>
inline bf16 from_f32<bf16>(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  bf16 r;
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
    r.bits = static_cast<uint16_t>((u >> 16) | 0x40);  // keep NaN a NaN
  } else {
    r.bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return r;
}

// Integer and bool types load and store as themselves (no float round trip).
template <typename T>
inline T load(const T* p, int64_t i) { return p[i]; }

}  // namespace ait

#endif  // AITGEN_CPU_KERNEL_H_
