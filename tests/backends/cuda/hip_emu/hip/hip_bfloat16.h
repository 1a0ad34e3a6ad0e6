// Host-emulator stand-in for HIP's <hip/hip_bfloat16.h> (HIP 5.2): hip_bfloat16 with the same
// conversions as the real one (explicit from float: round to nearest even, NaN kept quiet; to
// float: the upper 16 bits), written here because HIP's own header gives host-only compilers a
// bare struct without them.
#pragma once
#include <cstdint>
#include <cstring>
struct hip_bfloat16 {
  uint16_t data;
  hip_bfloat16() = default;
  explicit hip_bfloat16(float f) : data(round(f)) {}
  operator float() const {
    const uint32_t u = uint32_t(data) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }

 private:
  static uint16_t round(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (~u & 0x7f800000u) {
      u += 0x7fffu + ((u >> 16) & 1u);  // finite: to nearest, ties to even
    } else if (u & 0xffffu) {
      u |= 0x10000u;  // NaN: keep it a NaN after the truncation
    }
    return static_cast<uint16_t>(u >> 16);
  }
};
