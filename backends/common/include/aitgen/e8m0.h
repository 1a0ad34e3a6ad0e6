// float8 e8m0 (ONNX FLOAT8E8M0, ml_dtypes float8_e8m0fnu): an exponent only, 2^(bits - 127);
// 0xff is NaN; no sign, no zero. Stored as one byte.
//   - decoding: bits 0 is 2^-127 (a float32 subnormal), 0xff NaN;
//   - from_f32 (a plain store) follows ml_dtypes' astype: a mantissa of 1.5 or more rounds up (ties
//     away), below 2^-127 gives 2^-127 (from 1.5 * 2^-127 up: 2^-126); zero, negatives, infinities,
//     NaN and overflow give 0xff;
//   - ONNX Cast's round_mode (up/down/nearest) and saturate act on the float32 bits as onnx's
//     reference (numpy_helper.to_float8e8m0) does: e8m0_cast returns that result as a float, a power
//     of two (or NaN) that from_f32 then stores exactly.
#ifndef AITGEN_E8M0_H_
#define AITGEN_E8M0_H_

#include <cstdint>
#include <cstring>

#include "aitgen/fp8.h"  // AIT_FP8_HD

namespace ait {

struct fp8_e8m0 {
  uint8_t bits;
};

AIT_FP8_HD float e8m0_bits_to_float(uint32_t b) {
  const uint32_t u = b == 0xffu ? 0x7fc00000u : (b == 0 ? 0x00400000u : b << 23);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

AIT_FP8_HD float to_f32(fp8_e8m0 v) { return e8m0_bits_to_float(v.bits); }

AIT_FP8_HD fp8_e8m0 e8m0_from_float(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint32_t e = (u >> 23) & 0xffu, m = u & 0x7fffffu;
  fp8_e8m0 r;
  if ((u >> 31) || e == 0xffu || (e == 0 && m == 0)) {
    r.bits = 0xff;
  } else if (e == 0) {
    r.bits = m >= 0x600000u ? 1 : 0;  // subnormal: m * 2^-149, 2^-127 is m = 0x400000
  } else {
    const uint32_t k = e + (m >= 0x400000u ? 1u : 0u);
    r.bits = static_cast<uint8_t>(k >= 0xffu ? 0xffu : k);
  }
  return r;
}

// ONNX Cast to FLOAT8E8M0. mode: 0 up, 1 down, 2 nearest.
AIT_FP8_HD float e8m0_cast(float x, int mode, bool saturate) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t e = (u >> 23) & 0xffu;
  if (e == 0xffu) return e8m0_bits_to_float(0xffu);
  bool up = false;
  if (mode == 0) {
    up = (u & 0x7fffffu) != 0;
  } else if (mode == 2) {
    const bool g = (u & 0x400000u) != 0, rr = (u & 0x200000u) != 0, s = (u & 0x1fffffu) != 0;
    up = g && (rr || s || e > 0);
  }
  if (up && !(saturate && e == 0xfeu)) ++e;
  return e8m0_bits_to_float(e);
}

}  // namespace ait

#endif  // AITGEN_E8M0_H_
