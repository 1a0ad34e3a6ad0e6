// Guarded post-ops (kernels/cpu/epilogue.py GUARDED): relu, erf GELU and clip (relu6) as oneDNN
// post-ops on float32 / bfloat16 / float16 kernels. oneDNN's relu and clip are a max and a min that
// turn NaN into a number, and its gelu_erf gives NaN for +inf, where the op (the oracle, torch) keeps
// NaN and +inf. They agree with the op wherever the value they read is finite. So a kernel with such
// post-ops first bounds that value from its operands' largest magnitudes: |acc| <= K max|x| max|w| +
// max|bias|, then each post-op of the chain in turn (an add or sub adds its operand's bound, a mul
// multiplies, a linear scales, a clip's bounds join). A bound under kFiniteBound (a NaN or an
// infinity in any operand makes it infinite) proves every value finite, and the fused primitive
// runs; else the call runs the plain primitive and the loop, as without post-ops. The scans read
// each operand once (each constant weight's bound is kept per constants version); they cost a
// fraction of the pass over the output that the loop makes.
#ifndef AITGEN_ONEDNN_GUARD_H_
#define AITGEN_ONEDNN_GUARD_H_

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "aitgen/onednn_kernels.h"

namespace ait {
namespace onednn {

// Below FLT_MAX (3.4e38) with room for float32's rounding of the sum and bfloat16's of the result.
constexpr double kFiniteBound = 1e38;

// The largest |value| of n contiguous elements as raw magnitude bits (sign cleared): integer max
// vectorises, and NaN and infinity have the largest bit patterns of all.
template <typename U>
inline U max_bits(const U* x, int64_t n, U mask) {
  U m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max<U>(m, x[i] & mask);
  return m;
}

// max |v| over the tensor md describes at ptr (dense or strided; a stride-0 dim is read once);
// +inf when it holds a NaN or an infinity. float32, bfloat16, float16 only.
inline double absmax(const void* ptr, const dnnl::memory::desc& md) {
  using dt = dnnl::memory::data_type;
  const auto dims = md.get_dims();
  const auto strides = md.get_strides();
  int r = static_cast<int>(dims.size());
  if (r == 0 || strides.size() != dims.size()) return INFINITY;  // not a plain strided layout
  // Dims by decreasing stride (a stride-0 or size-1 dim dropped), so that the innermost is the one
  // of unit stride where there is one (an NHWC tensor's C in oneDNN's NCHW order); dims that
  // tile each other densely merge, so a dense tensor is one contiguous run.
  int64_t n[DNNL_MAX_NDIMS], s[DNNL_MAX_NDIMS];
  int k = 0;
  for (int j = 0; j < r; ++j) {
    if (dims[j] == 0) return 0.0;
    if (strides[j] == 0 || dims[j] == 1) continue;
    int at = k++;
    while (at > 0 && s[at - 1] < strides[j]) {
      n[at] = n[at - 1];
      s[at] = s[at - 1];
      --at;
    }
    n[at] = dims[j];
    s[at] = strides[j];
  }
  if (k == 0) {
    n[0] = 1;
    s[0] = 1;
    k = 1;
  }
  int m2 = 0;
  for (int j = 1; j < k; ++j) {
    if (s[m2] == n[j] * s[j]) {  // dim m2 steps over whole runs of dim j: one dim
      n[m2] *= n[j];
      s[m2] = s[j];
    } else {
      ++m2;
      n[m2] = n[j];
      s[m2] = s[j];
    }
  }
  r = m2 + 1;
  int64_t rows = 1;
  for (int j = 0; j < r - 1; ++j) rows *= n[j];
  const int64_t inner = n[r - 1], step = s[r - 1];
  const dt t = md.get_data_type();
  const int sz = t == dt::f32 ? 4 : 2;
  if (t != dt::f32 && t != dt::bf16 && t != dt::f16) return INFINITY;
  // Work items are (row, chunk of a contiguous row): a dense tensor is one row, and its chunks let
  // every thread scan the part it wrote (its own L2) rather than one thread pulling all of it.
  const int64_t chunk = step == 1 ? (int64_t{1} << 14) : inner;
  const int64_t per_row = (inner + chunk - 1) / chunk, items = rows * per_row;
  uint32_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static) if (rows * inner > (1 << 16))
  for (int64_t it = 0; it < items; ++it) {
    const int64_t o = it / per_row, c0 = (it % per_row) * chunk, len = std::min(chunk, inner - c0);
    int64_t off = c0 * step, rem = o;
    for (int j = r - 2; j >= 0; --j) {
      off += (rem % n[j]) * s[j];
      rem /= n[j];
    }
    const char* row = static_cast<const char*>(ptr) + off * sz;
    uint32_t mr = 0;
    if (step == 1 && sz == 4) {
      mr = max_bits(reinterpret_cast<const uint32_t*>(row), len, 0x7fffffffu);
    } else if (step == 1) {
      mr = max_bits(reinterpret_cast<const uint16_t*>(row), len, static_cast<uint16_t>(0x7fff));
    } else {
      for (int64_t i = 0; i < len; ++i) {
        uint32_t b = 0;
        std::memcpy(&b, row + i * step * sz, sz);
        mr = std::max(mr, b & (sz == 4 ? 0x7fffffffu : 0x7fffu));
      }
    }
    m = std::max(m, mr);
  }
  float v;
  if (t == dt::f32) {
    if (m >= 0x7f800000u) return INFINITY;
    std::memcpy(&v, &m, 4);
  } else if (t == dt::bf16) {
    if (m >= 0x7f80u) return INFINITY;
    const uint32_t b = m << 16;
    std::memcpy(&v, &b, 4);
  } else {
    if (m >= 0x7c00u) return INFINITY;
    const int e = static_cast<int>(m >> 10), f = static_cast<int>(m & 0x3ff);
    v = e == 0 ? std::ldexp(static_cast<float>(f), -24) : std::ldexp(static_cast<float>(1024 + f), e - 25);
  }
  return v;
}

// |v| of one element of type t at p as a double; +inf for a NaN or an infinity.
inline double abs_at(const char* p, dnnl::memory::data_type t) {
  using dt = dnnl::memory::data_type;
  uint32_t b = 0;
  float v;
  if (t == dt::f32) {
    std::memcpy(&b, p, 4);
    b &= 0x7fffffffu;
    if (b >= 0x7f800000u) return INFINITY;
    std::memcpy(&v, &b, 4);
    return v;
  }
  std::memcpy(&b, p, 2);
  b &= 0x7fffu;
  if (t == dt::bf16) {
    if (b >= 0x7f80u) return INFINITY;
    b <<= 16;
    std::memcpy(&v, &b, 4);
    return v;
  }
  if (b >= 0x7c00u) return INFINITY;  // float16
  const int e = static_cast<int>(b >> 10), f = static_cast<int>(b & 0x3ff);
  return e == 0 ? std::ldexp(static_cast<double>(f), -24) : std::ldexp(static_cast<double>(1024 + f), e - 25);
}

// The largest L1 norm of one output's weights: max over the kept dims of the sum over the dims in
// reduce_mask (bit j: dim j; a conv's I, KH, KW, a matmul's K) of |w|. |acc| <= max|x| * this +
// max|bias|, tighter than K max|w| by the ratio of the largest weight to the mean one, so a bound
// carried from kernel to kernel (Slots) stays finite for more of them. +inf on NaN or infinity.
// Run once per constant weight and constants version (Entry::wei_bounds).
inline double max_row_l1(const void* ptr, const dnnl::memory::desc& md, unsigned reduce_mask) {
  const auto dims = md.get_dims();
  const auto strides = md.get_strides();
  const int r = static_cast<int>(dims.size());
  if (r == 0 || strides.size() != dims.size()) return INFINITY;
  const auto t = md.get_data_type();
  using dt = dnnl::memory::data_type;
  if (t != dt::f32 && t != dt::bf16 && t != dt::f16) return INFINITY;
  const int64_t sz = t == dt::f32 ? 4 : 2;
  int64_t kn[DNNL_MAX_NDIMS], ks[DNNL_MAX_NDIMS], rn[DNNL_MAX_NDIMS], rs[DNNL_MAX_NDIMS];
  int nk = 0, nr = 0;
  int64_t outer = 1, inner = 1;
  for (int j = 0; j < r; ++j) {
    if (dims[j] == 0) return 0.0;
    if ((reduce_mask >> j) & 1u) {
      rn[nr] = dims[j];
      rs[nr++] = strides[j] * sz;
      inner *= dims[j];
    } else {
      kn[nk] = dims[j];
      ks[nk++] = strides[j] * sz;
      outer *= dims[j];
    }
  }
  double best = 0.0;
#pragma omp parallel for reduction(max : best) schedule(static) if (outer * inner > (1 << 16))
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0, rem = o;
    for (int j = nk - 1; j >= 0; --j) {
      off += (rem % kn[j]) * ks[j];
      rem /= kn[j];
    }
    const char* base = static_cast<const char*>(ptr) + off;
    int64_t idx[DNNL_MAX_NDIMS] = {0}, roff = 0;
    double sum = 0.0;
    for (int64_t i = 0; i < inner; ++i) {
      sum += abs_at(base + roff, t);
      for (int j = nr - 1; j >= 0; --j) {  // the next reduced index, the last dim fastest
        if (++idx[j] < rn[j]) {
          roff += rs[j];
          break;
        }
        roff -= (rn[j] - 1) * rs[j];
        idx[j] = 0;
      }
    }
    best = std::max(best, sum);
  }
  return best;
}

// Bounds carried between the kernels of one run (aitgen/codegen/bounds.py). A kernel built with
// slots gets, after its own pointers p[0..n), n more: s[0] its output's, s[j] pointer j's (nullptr
// where no kernel of the run bounds that tensor). The producer writes its output's slot on every
// call (+inf where it proves nothing), before any reader runs; a reader takes a finite slot instead
// of scanning the operand. Slots live in the run's arena, so concurrent runtimes have their own.
struct Slots {
  void* const* s = nullptr;
  double* out() const { return s != nullptr ? static_cast<double*>(s[0]) : nullptr; }
  double in(int j) const {  // +inf: not known
    return s != nullptr && s[j] != nullptr ? *static_cast<const double*>(s[j]) : static_cast<double>(INFINITY);
  }
};

// What a bound carried into a slot allows for rounding: float32 accumulation of `k` products and
// the post-ops and store in the result's type (bfloat16: 2^-9), with room to spare.
inline double slot_margin(int64_t k) { return 1.0 + 0x1p-6 + static_cast<double>(k) * 0x1p-22; }

// The bound through the post-op chain from the accumulator's bound `acc`; `operand(i)` is the
// bound of post-op i's binary operand. Infinite (not finite) for a chain it cannot bound.
template <typename Operand>
inline double chain_bound(const Epilogue& ep, double acc, Operand&& operand) {
  double b = acc;
  for (int i = 0; i < ep.num_post_ops && b < kFiniteBound; ++i) {
    const PostOp& op = ep.post_ops[i];
    switch (op.alg) {
      case PostAlg::relu:
      case PostAlg::gelu_erf: break;  // |f(x)| <= |x|
      case PostAlg::linear: b = std::fabs(op.alpha) * b + std::fabs(op.beta); break;
      case PostAlg::clip:  // |clip(x)| <= max(|x|, |lo|, |hi|); an open side (FLT_MAX) bounds nothing
        if (std::fabs(op.alpha) < kFiniteBound && std::fabs(op.beta) < kFiniteBound) {
          // Both sides closed: the result lies in [lo, hi] whatever x was (x is finite: the loop
          // stops at the first step whose bound is not, so no earlier overflow hides behind this).
          b = std::max(std::fabs(op.alpha), std::fabs(op.beta));
          break;
        }
        for (const float e : {op.alpha, op.beta})
          if (std::fabs(e) < kFiniteBound) b = std::max(b, static_cast<double>(std::fabs(e)));
        break;
      case PostAlg::add:
      case PostAlg::sub: b += operand(i); break;
      case PostAlg::mul: b *= operand(i); break;
      default: return INFINITY;  // epilogue.py puts nothing else in a guarded chain
    }
  }
  return b;
}

}  // namespace onednn
}  // namespace ait

#endif  // AITGEN_ONEDNN_GUARD_H_
