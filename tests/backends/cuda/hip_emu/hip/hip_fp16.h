// Host-emulator stand-in for HIP's <hip/hip_fp16.h>: __half as an IEEE binary16 (g++'s _Float16,
// whose conversions round to nearest even, as the GPU's do) with the conversions the kernels use.
#pragma once
struct __half {
  _Float16 v;
};
static_assert(sizeof(__half) == 2, "__half is two bytes");
inline float __half2float(__half h) { return static_cast<float>(h.v); }
inline __half __float2half_rn(float f) { return __half{static_cast<_Float16>(f)}; }
