// Bulk conversions between 16-bit float storage and float32: n elements at a time with the
// vector instructions made for it where the target has them (F16C for float16; a widening move
// and a shift for bfloat16), else the element-wise forms of cpu_kernel.h. Used where a kernel
// handles 16-bit data a block at a time (cpu_reduce.h's rows and pools, the element-wise kernels'
// flat loop): GCC 12 turns neither ait::to_f32(half) nor _Float16 conversions into vcvtph2ps.
#ifndef AITGEN_CPU_CONVERT_H_
#define AITGEN_CPU_CONVERT_H_

#include <cstdint>
#include <immintrin.h>

#include "aitgen/cpu_kernel.h"

namespace ait {

// n elements to float32. float16 with F16C (AVX512-FP16 included: GCC 12 vectorises no _Float16
// conversion there either) takes vcvtph2ps, 16 or 8 at a time: one instruction where to_f32's branch-free form takes
// a dozen. Exact either way; a signalling NaN comes out quiet, as from_f32 makes every NaN.
template <typename T>
inline void to_f32_block(const T* x, float* f, int64_t n) {
  for (int64_t i = 0; i < n; ++i) f[i] = to_f32(x[i]);
}
#if defined(__F16C__)
inline void to_f32_block(const half* x, float* f, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(f + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
#endif
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) f[i] = to_f32(x[i]);
}
#endif
// bfloat16: the high half of a float32, widened and shifted (GCC leaves the plain loop over a
// fixed 16 elements as scalar moves: bfloat16 pooling ran 2.5x float32's time).
#if defined(__AVX2__)
inline void to_f32_block(const bf16* x, float* f, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    _mm512_storeu_ps(f + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(f + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) f[i] = to_f32(x[i]);
}
#endif

// And back: n float32 values to storage, rounded to nearest even as from_f32 rounds; a NaN stays a
// NaN (F16C keeps a float16 NaN's payload where from_f32 writes 0x7e00; bfloat16 bits are
// from_f32's).
template <typename T>
inline void from_f32_block(const float* f, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(f[i]);
}
#if defined(__F16C__)
inline void from_f32_block(const float* f, half* y, int64_t n) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(f + i), kRound));
#endif
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(f + i), kRound));
  for (; i < n; ++i) y[i] = from_f32<half>(f[i]);
}
#endif
#if defined(__AVX2__)
inline void from_f32_block(const float* f, bf16* y, int64_t n) {
  // from_f32<bf16>'s bits: u + 0x7fff + (bit 16 of u), the top half; a NaN's top half | 0x40.
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(f + i);
    const __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(round, _mm512_and_si512(hi, one))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i b = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(b));
  }
#endif
  const __m256i one8 = _mm256_set1_epi32(1), round8 = _mm256_set1_epi32(0x7fff), quiet8 = _mm256_set1_epi32(0x40);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(f + i);
    const __m256i u = _mm256_castps_si256(v), hi = _mm256_srli_epi32(u, 16);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(round8, _mm256_and_si256(hi, one8))), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i b = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet8), nan);
    // Each 32-bit lane holds a value below 2^16: packus keeps it; it packs within 128-bit halves,
    // so the permute brings the two halves' four words together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) y[i] = from_f32<bf16>(f[i]);
}
#endif

}  // namespace ait

#endif  // AITGEN_CPU_CONVERT_H_
