// float4 e2m1 (ONNX FLOAT4E2M1, ml_dtypes float4_e2m1fn) stored one element per byte, the value in
// the low nibble: sign bit 3, two exponent bits (bias 1), one mantissa bit. Magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6; no infinities, no NaN. The conversion matches ml_dtypes' astype (the
// oracle's): round to nearest, ties to even; beyond 6 (infinities too) saturates to +-6; NaN gives
// the zero of the opposite sign (ml_dtypes' result, checked in tests/ops/test_dtypes_subbyte.py).
#ifndef AITGEN_FP4_H_
#define AITGEN_FP4_H_

#include <cstdint>
#include <cstring>

#include "aitgen/fp8.h"  // AIT_FP8_HD

namespace ait {

struct fp4_e2m1 {
  uint8_t bits;
};

AIT_FP8_HD float to_f32(fp4_e2m1 v) {
  // The 8 magnitudes by code (exact floats); halves of integers need no table beyond this.
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = mag[v.bits & 7u];
  return (v.bits & 8u) ? -m : m;
}

AIT_FP8_HD fp4_e2m1 fp4_from_float(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 31) << 3);
  fp4_e2m1 r;
  if (x != x) {
    r.bits = static_cast<uint8_t>(sign ^ 8u);
    return r;
  }
  const float a = x < 0 ? -x : x;
  // Midpoints between neighbours; at a tie the even code (mantissa bit 0) wins, so "<=" where the
  // lower neighbour's code is even and "<" where it is odd.
  uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.0f) c = 6;
  else c = 7;
  r.bits = static_cast<uint8_t>(sign | c);
  return r;
}

}  // namespace ait

#endif  // AITGEN_FP4_H_
