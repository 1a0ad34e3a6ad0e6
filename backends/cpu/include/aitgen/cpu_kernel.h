// Shared helpers of the CPU kernels: storage types and their float32 conversions. Kernels compute
// in float32 (float64 in double) and store in the tensor's type, as the numpy oracle does.
#ifndef AITGEN_CPU_KERNEL_H_
#define AITGEN_CPU_KERNEL_H_

#include <cmath>
#include <cstdint>
#include <cstring>

// Fused element-wise functors (codegen/kernels/common/expr.py node_expr) call its vectorisable
// erf/tanh/exp, and any kernel may render one (GEMM/conv epilogues too).
#include "aitgen/cpu_vmath.h"
#include "aitgen/fp8.h"

// Kernels are internal to the model library (hidden); model.cpp calls them by name.
#define AIT_KERNEL extern "C" void

namespace ait {

// float16 through the compiler's _Float16 (x86-64 GCC >= 12 converts with F16C when -march allows).
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
  _Float16 h;
  std::memcpy(&h, &v.bits, 2);
  return static_cast<float>(h);
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
inline fp8_e4m3fn from_f32<fp8_e4m3fn>(float v) { return fp8_from_double<fp8_e4m3fn>(v); }
template <>
inline fp8_e5m2 from_f32<fp8_e5m2>(float v) { return fp8_from_double<fp8_e5m2>(v); }
template <>
inline fp8_e4m3fnuz from_f32<fp8_e4m3fnuz>(float v) { return fp8_from_double<fp8_e4m3fnuz>(v); }
template <>
inline fp8_e5m2fnuz from_f32<fp8_e5m2fnuz>(float v) { return fp8_from_double<fp8_e5m2fnuz>(v); }
template <>
inline half from_f32<half>(float v) {
  _Float16 h = static_cast<_Float16>(v);
  half r;
  std::memcpy(&r.bits, &h, 2);
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
