// The int8 (QGEMM / QCONV2D) helpers of backends/cpu/src/onednn_kernels.cpp: the quantised
// source's descriptor, the scale attributes, the quantisation of a float32 source into scratch and
// the int8 primitive's run. Only onednn_kernels.cpp includes it (after aitgen/onednn_util.h).
#ifndef AITGEN_ONEDNN_QUANT_H_
#define AITGEN_ONEDNN_QUANT_H_

#include "aitgen/onednn_util.h"

namespace ait {
namespace onednn {

// The int8 copy of the float32 source: dense, its axes in the order of the source's strides (a
// GEMM's rows then columns; a conv's NHWC), u8 or s8 as cfg.quant says.
inline dnnl::memory::desc quant_src_md(int rank, const int64_t* sizes, const int64_t* strides, int quant) {
  int order[8];
  for (int i = 0; i < rank; ++i) order[i] = i;
  // outermost first; ties (size-1 dims) keep the logical order
  std::stable_sort(order, order + rank, [&](int a, int b) { return strides[a] > strides[b]; });
  dims_t dense(rank);
  int64_t acc = 1;
  for (int j = rank - 1; j >= 0; --j) {
    dense[order[j]] = acc;
    acc *= sizes[order[j]];
  }
  return dnnl::memory::desc(dims_t(sizes, sizes + rank), quant == 2 ? dt::u8 : dt::s8, dense);
}

inline dt quant_dt(int code) { return code == 2 ? dt::u8 : dt::s8; }

// src scale per tensor (mask 0), weight scales along `wei_mask`; oneDNN computes
// dst = post_ops(src_scale * wei_scale[n] * acc + bias[n]) in float32, and with a dst scale
// (a requantised result) stores saturate(round_half_even(dst / dst_scale)).
inline void set_scales(dnnl::primitive_attr& attr, int wei_mask, bool dst) {
  attr.set_scales_mask(DNNL_ARG_SRC, 0);
  attr.set_scales_mask(DNNL_ARG_WEIGHTS, wei_mask);
  if (dst) attr.set_scales_mask(DNNL_ARG_DST, 0);
}

// What run_quant needs of a configuration besides the entry.
struct QuantRun {
  int quant, scales_ptr, out_quant;
  bool src_int8;
  int64_t n;  // weight scales (output channels)
};

// q = clamp(rint(x / scale)) exactly as the oracle (ops/qlinear.py): float32 division (not a
// multiplication by 1/scale, which rounds differently), round-half-even (the default rounding mode).
// Shift: stored as q + Shift (an s8 value as u8 with zero point 128, Entry::src_shift).
template <typename Q, int Shift = 0>
inline void quantize_src(const float* x, const int64_t* sizes, const int64_t* xs, const dnnl::memory::desc& qmd, float scale,
                  Q* q) {
  const int rank = qmd.get_ndims();
  const dims_t qs = qmd.get_strides();
  int order[8];
  for (int i = 0; i < rank; ++i) order[i] = i;
  std::stable_sort(order, order + rank, [&](int a, int b) { return qs[a] > qs[b]; });
  const int inner = order[rank - 1];
  const int64_t n_in = sizes[inner], x_in = xs[inner];
  const int64_t outer = n_in ? numel(rank, sizes) / n_in : 0;
  constexpr bool kU8 = std::is_same<Q, uint8_t>::value && Shift == 0;
  const float lo = kU8 ? 0.f : -127.f;
  const float hi = kU8 ? 255.f : 127.f;
  const float shift = static_cast<float>(Shift);
  // A dense source (the usual case) is laid out as its copy: one flat loop. Row by row, an NHWC
  // image's rows are its 3 channels, and the index arithmetic per row cost more than the rows.
  bool same = true;
  for (int j = 0; j < rank; ++j) same = same && (sizes[j] == 1 || xs[j] == qs[j]);
  if (same) {
    const int64_t n = numel(rank, sizes);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      q[i] = static_cast<Q>(std::min(hi, std::max(lo, std::nearbyint(x[i] / scale))) + shift);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (outer * n_in > 65536)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, xo = 0, qo = 0;
    for (int j = rank - 2; j >= 0; --j) {
      const int ax = order[j];
      const int64_t i = rem % sizes[ax];
      rem /= sizes[ax];
      xo += i * xs[ax];
      qo += i * qs[ax];
    }
    Q* row = q + qo;
    const float* xr = x + xo;
    if (x_in == 1) {  // the usual case, a loop the compiler vectorises (vdivps, vrndscaleps)
      for (int64_t i = 0; i < n_in; ++i) {
        row[i] = static_cast<Q>(std::min(hi, std::max(lo, std::nearbyint(xr[i] / scale))) + shift);
      }
    } else {
      for (int64_t i = 0; i < n_in; ++i) {
        row[i] = static_cast<Q>(std::min(hi, std::max(lo, std::nearbyint(xr[i * x_in] / scale))) + shift);
      }
    }
  }
}

// The int8 primitive on float32 storage: quantise the source into scratch, weights (int8) from
// their prepacked copy, scales from p[scales_ptr] (src, [1]) and p[scales_ptr + 1] (weights, [n]).
inline void run_quant(const Entry& e, const QuantRun& qr, void* dst, const void* src, const int64_t* src_sizes,
               const int64_t* src_strides, const int8_t* wei, const float* bias, PackStore* packs, int64_t version,
               void* const* p) {
  dnnl::engine& eng = engine();
  CallArgs& ca = call_args(e);
  const int scales_ptr = qr.scales_ptr;
  void* q = const_cast<void*>(src);  // src_int8: quantised by its producer, read where it lies
  if (!qr.src_int8) {
    const float x_scale = *static_cast<const float*>(p[scales_ptr]);
    const float* x = static_cast<const float*>(src);
    q = scratch(kSrc, e.src.get_size());
    if (qr.quant == 2) {
      quantize_src(x, src_sizes, src_strides, e.src, x_scale, static_cast<uint8_t*>(q));
    } else if (e.src_shift) {
      quantize_src<uint8_t, 128>(x, src_sizes, src_strides, e.src, x_scale, static_cast<uint8_t*>(q));
    } else {
      quantize_src(x, src_sizes, src_strides, e.src, x_scale, static_cast<int8_t*>(q));
    }
  }
  ca.bind(DNNL_ARG_SRC, q, e.src);
  void* w = const_cast<int8_t*>(wei);
  if (e.wei_packed == e.wei) {
    ca.bind(DNNL_ARG_WEIGHTS, w, e.wei);
  } else if (packs) {
    ca.packed(wei, span(e.wei), version, [&] {
      return packs->get(wei, span(e.wei), version, e.wei, e.wei_packed,
                        [&](dnnl::memory& to) { pack(e, dnnl::memory(e.wei, eng, w), to); });
    });
  } else {
    void* to = scratch(kWeiPacked, e.wei_packed.get_size());
    pack(e, dnnl::memory(e.wei, eng, w), dnnl::memory(e.wei_packed, eng, to));
    ca.bind(DNNL_ARG_WEIGHTS, to, e.wei_packed);
  }
  if (e.has_bias) ca.bind(DNNL_ARG_BIAS, const_cast<float*>(bias), e.bias);
  for (const BinaryArg& b : e.binaries) ca.bind(b.arg, p[b.ptr], b.md);
  using tag = dnnl::memory::format_tag;
  const auto scalar = [] { return dnnl::memory::desc({1}, dt::f32, tag::x); };
  ca.bind(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, p[scales_ptr], scalar);
  ca.bind(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, p[scales_ptr + 1],
          [&] { return dnnl::memory::desc({qr.n}, dt::f32, tag::x); });
  if (qr.out_quant) ca.bind(DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, p[scales_ptr + 2], scalar);
  static int32_t shift_zero_point = 128;  // Entry::src_shift / dst_shift; oneDNN only reads it
  const auto zp_md = [] { return dnnl::memory::desc({1}, dt::s32, tag::x); };
  if (e.src_shift) ca.bind(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, &shift_zero_point, zp_md);
  if (e.dst_shift) ca.bind(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, &shift_zero_point, zp_md);
  void* out = e.staged ? scratch(kDst, e.dst.get_size()) : dst;
  ca.bind(DNNL_ARG_DST, out, e.dst);
  execute(e, ca);
  if (!e.staged) return;
  // QGEMM / QCONV2D do not declare strided_output (kernels/cpu/gemm.py): never reached today
  if (qr.out_quant) throw std::runtime_error("oneDNN kernel: a requantised result at strides");
  store_strided(static_cast<const float*>(out), static_cast<float*>(dst), e.dst, e.dst_store);
}

}  // namespace onednn
}  // namespace ait

#endif  // AITGEN_ONEDNN_QUANT_H_
