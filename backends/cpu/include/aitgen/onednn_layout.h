// Layout helpers of the oneDNN kernels: descriptors from aitgen's sizes and strides, element
// counts, float16/bfloat16 conversions to and from float32 scratch, walks over strided tensors,
// and the copies between a strided operand and its dense stand-in (a staged destination or source:
// oneDNN's fast kernels take neither). Included by aitgen/onednn_util.h.
#ifndef AITGEN_ONEDNN_LAYOUT_H_
#define AITGEN_ONEDNN_LAYOUT_H_

#include <oneapi/dnnl/dnnl.hpp>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "aitgen/cpu_convert.h"
#include "aitgen/cpu_kernel.h"

namespace ait {
namespace onednn {

using dt = dnnl::memory::data_type;
using dims_t = dnnl::memory::dims;

// A memory descriptor from a rank and two arrays of the dims vector (sizes, then strides).
inline dnnl::memory::desc strided_md(int rank, const int64_t* sizes, const int64_t* strides, dt type) {
  return dnnl::memory::desc(dims_t(sizes, sizes + rank), type, dims_t(strides, strides + rank));
}

inline int64_t numel(int rank, const int64_t* sizes) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= sizes[i];
  return n;
}

// Storage conversions for 16-bit floats (which oneDNN cannot compute on CPUs without avx512_fp16
// or bf16 support): the kernel converts operands to float32 scratch, runs the float32 primitive
// and converts back. Threads take 4096-element chunks, each converted by cpu_convert.h's vector
// block forms (F16C for float16, widen-and-shift for bfloat16).
constexpr int64_t kConvertChunk = 4096;
template <typename A, typename B, typename Block>
inline void convert_chunks(const A* src, B* dst, int64_t n, Block&& block) {
  const int64_t chunks = (n + kConvertChunk - 1) / kConvertChunk;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kConvertChunk;
    block(src + b, dst + b, std::min(kConvertChunk, n - b));
  }
}
template <typename T>
inline void to_f32(const T* src, float* dst, int64_t n) {
  convert_chunks(src, dst, n, [](const T* a, float* b, int64_t m) { ait::to_f32_block(a, b, m); });
}
template <typename T>
inline void from_f32(const float* src, T* dst, int64_t n) {
  convert_chunks(src, dst, n, [](const float* a, T* b, int64_t m) { ait::from_f32_block(a, b, m); });
}

// f(offset, index) for every element of a tensor of `rank` sizes laid out at `strides` (elements),
// in logical order (an odometer: no division per element).
template <typename F>
inline void for_each_offset(int rank, const int64_t* sizes, const int64_t* strides, F&& f) {
  int64_t n = 1;
  for (int j = 0; j < rank; ++j) n *= sizes[j];
  int64_t idx[8] = {0};
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(off, static_cast<const int64_t*>(idx));
    for (int j = rank - 1; j >= 0; --j) {
      off += strides[j];
      if (++idx[j] < sizes[j]) break;
      off -= strides[j] * sizes[j];
      idx[j] = 0;
    }
  }
}

// The output of a product with an empty reduction (K = 0, or C_in = 0): the bias along the channel
// axis, else zeros, at the output's sizes and strides (it may be a strided slice of a larger
// tensor: a concat's part written in place).
template <typename O, typename T>
inline void fill_bias(O* out, const T* bias, int rank, const int64_t* sizes, const int64_t* strides, int channel_axis) {
  for_each_offset(rank, sizes, strides, [&](int64_t off, const int64_t* idx) {
    out[off] = ait::from_f32<O>(bias ? ait::to_f32(bias[idx[channel_axis]]) : 0.0f);
  });
}

// A dense descriptor of md's dims, its dims laid out in the same order as md's (by stride).
inline dnnl::memory::desc dense_like(const dnnl::memory::desc& md) {
  const dims_t dims = md.get_dims(), strides = md.get_strides();
  const int r = static_cast<int>(dims.size());
  std::vector<int> order(r);
  for (int j = 0; j < r; ++j) order[j] = j;
  // Innermost last: a stable sort by descending stride keeps size-1 dims where they were.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return strides[a] > strides[b]; });
  dims_t dense(r);
  int64_t acc = 1;
  for (int k = r - 1; k >= 0; --k) {
    dense[order[k]] = acc;
    acc *= dims[order[k]];
  }
  return dnnl::memory::desc(dims, md.get_data_type(), dense);
}

// f(dense offset, strided offset) of the first element of every row of `dense`'s dims, rows taken
// along the dim both layouts step over with stride 1 in `dense` (its innermost non-unit dim), in
// parallel; `inner` and `step` give the row's length and its stride in `strided`.
template <typename F>
inline void for_each_row(const dnnl::memory::desc& dense, const dnnl::memory::desc& strided, int64_t& inner,
                         int64_t& step, F&& f) {
  const dims_t dims = dense.get_dims(), ds = dense.get_strides(), ss = strided.get_strides();
  const int r = static_cast<int>(dims.size());
  int in = r - 1;
  for (int j = 0; j < r; ++j)
    if (ds[j] == 1 && dims[j] > 1) in = j;
  const int64_t total = numel(r, dims.data());
  inner = dims[in];
  step = ss[in];
  if (total == 0) return;
  const int64_t rows = total / inner;
#pragma omp parallel for schedule(static) if (total > 65536)
  for (int64_t o = 0; o < rows; ++o) {
    int64_t rem = o, so = 0, dof = 0;
    for (int j = r - 1; j >= 0; --j) {
      if (j == in) continue;
      const int64_t idx = rem % dims[j];
      rem /= dims[j];
      so += idx * ss[j];
      dof += idx * ds[j];
    }
    f(dof, so);
  }
}

// Copy a dense result (laid out as `dense`, in the compute type S) to storage T at `store`'s
// strides: whole rows, rows in parallel.
template <typename S, typename T>
inline void store_strided(const S* src, T* dst, const dnnl::memory::desc& dense, const dnnl::memory::desc& store) {
  int64_t inner = 0, step = 0;
  for_each_row(dense, store, inner, step, [&](int64_t d, int64_t s) {
    const S* a = src + d;
    T* b = dst + s;
    for (int64_t i = 0; i < inner; ++i) b[i * step] = ait::from_f32<T>(ait::to_f32(a[i]));
  });
}

// Gather an operand lying at `store`'s strides into `dense` (same dims, same type): the inverse of
// store_strided (Entry::src_staged).
template <typename T>
inline void load_strided(const T* src, T* dst, const dnnl::memory::desc& store, const dnnl::memory::desc& dense) {
  int64_t inner = 0, step = 0;
  for_each_row(dense, store, inner, step, [&](int64_t d, int64_t s) {
    const T* a = src + s;
    T* b = dst + d;
    if (step == 1) {
      std::memcpy(b, a, static_cast<size_t>(inner) * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i) b[i] = a[i * step];
    }
  });
}

// Whether a descriptor's elements fill its extent (dense, in any order of dims).
inline bool fills(const dnnl::memory::desc& md) {
  int64_t n = 1;
  for (int64_t d : md.get_dims()) n *= d;
  return static_cast<size_t>(n) * dnnl::memory::data_type_size(md.get_data_type()) == md.get_size();
}

}  // namespace onednn
}  // namespace ait

#endif  // AITGEN_ONEDNN_LAYOUT_H_
