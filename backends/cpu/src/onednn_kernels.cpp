// The oneDNN kernels behind aitgen/onednn_kernels.h: matmul (gemm, bmm), convolution and transposed
// convolution. Compiled once into every CPU model (a static source); each generated kernel passes its
// configuration, its own state, and the run's pointers and dims.
#include "aitgen/onednn_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>

#include "aitgen/onednn_guard.h"
#include "aitgen/onednn_util.h"
#include "aitgen/onednn_quant.h"

namespace ait {
namespace onednn {

struct KernelState {
  PrimitiveCache<Entry> primitives;
  PackStore packs;
};

KernelState* new_state() { return new KernelState(); }

namespace {

// What ait_onednn_impls lists: one record per (kernel, primitive kind, implementation), so a
// kernel run at ever new dynamic shapes adds no records unless oneDNN picks another implementation.
struct ImplSeen {
  std::string first_shape;
  int64_t shapes = 0;
};
using ImplKey = std::tuple<std::string, std::string, std::string>;

struct ImplRegistry {
  std::mutex mu;
  std::map<ImplKey, ImplSeen> seen;
  std::atomic<int64_t> generation{0};
};

// Never freed, as the kernels' states: a run on another thread may still record at exit.
ImplRegistry& registry() {
  static ImplRegistry* const r = new ImplRegistry();
  return *r;
}

std::string dims_text(const dnnl::memory::desc& md) {
  std::string s;
  for (int64_t v : md.get_dims()) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

void record(const char* kernel, const char* primitive, const Entry& e) {
  ImplRegistry& r = registry();
  const std::string shape = dims_text(e.src) + ":" + dims_text(e.wei) + ":" + dims_text(e.dst);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    ImplSeen& s = r.seen[ImplKey(kernel, primitive, e.impl)];
    if (s.shapes++ == 0) s.first_shape = shape;
  }
  r.generation.fetch_add(1, std::memory_order_release);
}

dt compute_type(Storage s, bool convert) {
  if (convert || s == Storage::f32) return dt::f32;
  if (s == Storage::bf16) return dt::bf16;
  return dt::f16;
}

dnnl::algorithm algorithm_of(PostAlg a) {
  using A = dnnl::algorithm;
  switch (a) {
    case PostAlg::gelu_tanh: return A::eltwise_gelu_tanh;
    case PostAlg::gelu_erf: return A::eltwise_gelu_erf;
    case PostAlg::tanh: return A::eltwise_tanh;
    case PostAlg::logistic: return A::eltwise_logistic;
    case PostAlg::swish: return A::eltwise_swish;
    case PostAlg::hardswish: return A::eltwise_hardswish;
    case PostAlg::linear: return A::eltwise_linear;
    case PostAlg::abs: return A::eltwise_abs;
    case PostAlg::sqrt: return A::eltwise_sqrt;
    case PostAlg::pow: return A::eltwise_pow;
    case PostAlg::add: return A::binary_add;
    case PostAlg::sub: return A::binary_sub;
    case PostAlg::mul: return A::binary_mul;
    case PostAlg::div: return A::binary_div;
    case PostAlg::relu: return A::eltwise_relu;
    case PostAlg::clip: return A::eltwise_clip;
  }
  throw std::runtime_error("oneDNN kernel: unknown post-op");
}

// The epilogue's post-ops as a primitive attribute; `binaries` receives their operands.
dnnl::primitive_attr post_attr(const Epilogue& ep, const int64_t* d, dt t, std::vector<BinaryArg>& binaries) {
  dnnl::primitive_attr attr = default_attr();
  dnnl::post_ops po;
  for (int i = 0; i < ep.num_post_ops; ++i) {
    const PostOp& op = ep.post_ops[i];
    if (op.src1 < 0) {
      po.append_eltwise(algorithm_of(op.alg), op.alpha, op.beta);
      continue;
    }
    const dt t1 = op.src1_dt < 0 ? t : op.src1_dt == 1 ? dt::s8 : op.src1_dt == 2 ? dt::u8 : dt::f32;
    const dnnl::memory::desc md = strided_md(ep.post_rank, d + op.md, d + op.md + ep.post_rank, t1);
    po.append_binary(algorithm_of(op.alg), md);
    binaries.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, op.src1, md});
  }
  attr.set_post_ops(po);
  return attr;
}

// The primitive `make(attr)` creates, with the epilogue's post-ops when oneDNN runs them in the same
// implementation as the plain primitive. Otherwise (a broadcast its fast kernels lack sends it to
// its reference kernel; or none takes them) the plain one, and the kernel's loop does the epilogue.
template <typename Make>
void finish_epilogue(Entry& e, const Epilogue& ep, const int64_t* d, dt t, Make&& make) {
  auto plain = make(default_attr());
  if (ep.num_post_ops > 0) {
    std::vector<BinaryArg> binaries;
    try {
      auto fused = make(post_attr(ep, d, t, binaries));
      if (std::strcmp(fused.impl_info_str(), plain.impl_info_str()) == 0) {
        e.post_ops = true;
        e.binaries = std::move(binaries);
        if (ep.guarded) {  // for calls whose operands do not prove the values finite
          auto pe = std::make_shared<Entry>();
          pe->src = e.src;
          pe->wei = e.wei;
          pe->bias = e.bias;
          pe->has_bias = e.has_bias;
          pe->staged = e.staged;
          pe->src_staged = e.src_staged;
          pe->src_dense = e.src_dense;
          pe->dst = e.dst;
          pe->dst_store = e.dst_store;
          finish(*pe, plain);
          e.plain = std::move(pe);
        }
        finish(e, fused);
        return;
      }
    } catch (const dnnl::error&) {  // unimplemented with these post-ops: the loop does them
    }
  }
  finish(e, plain);
}

// The primitive's destination: the output's own descriptor, or, where the output is a strided slice
// of a larger tensor, a dense one that the kernel then copies there (Entry::staged).
void stage_dst(Entry& e, const dnnl::memory::desc& md) {
  e.dst = md;
  if (!fills(md)) {
    e.staged = true;
    e.dst_store = md;
    e.dst = dense_like(md);
  }
}

// -- int8 (QGEMM / QCONV2D): quant_src_md, set_scales, quantize_src, run_quant in aitgen/onednn_quant.h

// dispatch's int8 form (float32 storage only).
template <typename Make>
void dispatch_quant(KernelState* st, const QuantRun& qr, bool prepack, int nkey, const Epilogue& ep, void* const* p,
                    const int64_t* d, const int64_t* src_sizes, const int64_t* src_strides, const int64_t* out_sizes,
                    int out_rank, int channel_axis, bool has_bias, bool empty, int src_offset, Make&& make) {
  const float* bias = has_bias ? static_cast<const float*>(p[3]) : nullptr;
  if (numel(out_rank, out_sizes) == 0) return;
  if (empty) {  // quantize_int8 requantises only results of a static K > 0
    if (qr.out_quant) throw std::runtime_error("oneDNN kernel: an empty reduction with a requantised result");
    fill_bias(static_cast<float*>(p[0]), bias, out_rank, out_sizes, out_sizes + out_rank, channel_axis);
    if (ep.loop) ep.loop(p, d);
    return;
  }
  std::shared_ptr<Entry> e = st->primitives.get(d, nkey, make);
  const int64_t offset = (src_offset >= 0 ? d[src_offset] : 0) * (qr.src_int8 ? 1 : sizeof(float));
  const void* src = static_cast<const char*>(p[1]) + offset;
  if (ep.num_post_ops > 0 && !ep.loop && !e->post_ops) {
    // a requantised (int8) result: its epilogue can only be post-ops (kernels/cpu/epilogue.py)
    throw std::runtime_error("oneDNN kernel: this CPU's int8 implementation does not take the epilogue as "
                             "post-ops, and a requantised result leaves no pass after it");
  }
  run_quant(*e, qr, p[0], src, src_sizes, src_strides, static_cast<const int8_t*>(p[2]), bias,
            prepack ? &st->packs : nullptr, prepack ? d[nkey] : 0, p);
  if (ep.loop && !e->post_ops) ep.loop(p, d);
}

// Where the matmul has no brgemm kernel for this CPU (oneDNN 3.2 without AVX-512), it runs its
// sgemm-based `gemm:` implementation, and `any` then gives the weight a layout that sgemm repacks on
// every call: [K, N] x N = 3072 ran at half the speed of K-contiguous weights on an AVX2 EPYC
// (benchmarks/results/cpu_vs_peers_avx2.json). There a constant weight is stored K-contiguous
// ([.., N, K] in memory, sgemm's transposed B), which its kernels read without that cost.
// `probe`: the implementation with `any`. A weight that packed_sgemm takes never gets here.
dnnl::memory::desc gemm_weight_layout(const Entry& e, const dnnl::memory::desc& any, const char* probe) {
  if (std::strncmp(probe, "gemm:", 5) != 0) return any;
  const dims_t dims = e.wei.get_dims();
  const int r = static_cast<int>(dims.size());
  dims_t strides(r);
  strides[r - 2] = 1;           // K innermost
  strides[r - 1] = dims[r - 2]; // then N
  int64_t acc = dims[r - 2] * dims[r - 1];
  for (int i = r - 3; i >= 0; --i) {
    strides[i] = acc;
    acc *= dims[i];
  }
  const dnnl::memory::desc kmajor(dims, e.wei.get_data_type(), strides);
  try {
    const auto pd = dnnl::matmul::primitive_desc(engine(), e.src, kmajor, e.dst, default_attr());
    if (std::strncmp(pd.impl_info_str(), "gemm:", 5) == 0) return kmajor;
  } catch (const dnnl::error&) {
  }
  return any;
}

// Whether an int8 matmul stores a source it quantises as s8 as u8 = q + 128 with a source zero
// point of 128 (Entry::src_shift): on CPUs without VNNI, where oneDNN's int8 matmul is its gemm-based
// `gemm:jit`, an s8 source ran 1.3-1.5x slower than a u8 one in a bare matmul and 2.2-2.8x in
// aitgen's int8 linear layer (benchmarks/results/cpu_gemm_shapes*.json; u8 x s8 is vpmaddubsw's
// form, and for s8 oneDNN makes a shifted copy itself). Same integers, same results. An s8 tensor
// passed between int8 matmuls lies the same way (MatmulConfig::src_shifted / dst_shifted): BERT-base's
// second FFN GEMM took 49 ms of 116 reading its s8 source, 26 reading it as u8.
bool shift_s8_src() {
  static const bool shift = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::sse41 || isa == dnnl::cpu_isa::avx || isa == dnnl::cpu_isa::avx2;
  }();
  return shift;
}

// Whether a float32 product with a constant weight runs as oneDNN's packed sgemm (Entry::sgemm,
// aitgen/onednn_sgemm.h): only where the matmul would be the sgemm-based `gemm:` implementation
// (`probe`), for one product (every dim before M, K, N of size 1) whose operands have an sgemm form.
// float16/bfloat16 storage computed in float32 (cfg.convert) goes through float32 scratch as the
// primitive's operands do, when the result is dense (its float32 copy is converted whole).
bool plan_sgemm(const MatmulConfig& cfg, Entry& e, const int64_t* d, const char* probe) {
  const int r = cfg.rank;
  if (cfg.quant || !cfg.prepack || (cfg.storage != Storage::f32 && !cfg.convert)) return false;
  if (cfg.convert && !cfg.f32_dst && e.staged) return false;
  if (std::strncmp(probe, "gemm:", 5) != 0 || !packed_sgemm_available()) return false;
  const int64_t *a = d, *b = d + 2 * r, *c = d + 4 * r;  // sizes; strides follow each at + r
  for (int i = 0; i + 2 < r; ++i)
    if (a[i] != 1 || b[i] != 1 || c[i] != 1) return false;
  const int64_t m = a[r - 2], k = a[r - 1], n = b[r - 1];
  e.sgemm = plan_packed_sgemm(m, n, k, a[r + r - 2], a[r + r - 1], b[r + r - 2], b[r + r - 1], c[r + r - 2],
                              c[r + r - 1]);
  if (!e.sgemm.on) return false;
  if (cfg.has_bias) e.bias_stride = d[7 * r + r - 1];
  e.staged = false;  // sgemm writes at the output's row stride itself
  e.dst = strided_md(r, c, c + r, dt::f32);
  e.wei_packed = e.wei;
  e.impl = std::string(probe) + ":packed_sgemm";
  return true;
}

// A source at strides (a slice of a wider tensor: Q, K or V of a packed projection) can cost oneDNN
// its brgemm kernel: 3.2 gives such a bfloat16 128x768x768 product gemm:jit:bf16 on AMX, 0.34 ms
// against brgemm's 0.08 on the dense source. Where the dense source gets another implementation than
// the strided one's gemm-based kernel, the kernel gathers it into dense scratch first
// (Entry::src_staged). Elsewhere (AVX2, where every float32 matmul is gemm-based) nothing changes.
void stage_src(Entry& e, const dnnl::memory::desc& wei) {
  if (fills(e.src)) return;
  const dnnl::memory::desc dense = dense_like(e.src);
  try {
    const auto strided = dnnl::matmul::primitive_desc(engine(), e.src, wei, e.dst, default_attr());
    if (std::strncmp(strided.impl_info_str(), "gemm:", 5) != 0) return;
    const auto gathered = dnnl::matmul::primitive_desc(engine(), dense, wei, e.dst, default_attr());
    if (std::strncmp(gathered.impl_info_str(), "gemm:", 5) == 0) return;
  } catch (const dnnl::error&) {  // no implementation for one of them: leave the source as it is
    return;
  }
  e.src_staged = true;
  e.src_dense = dense;
}

std::shared_ptr<Entry> make_matmul(const MatmulConfig& cfg, const int64_t* d) {
  const int r = cfg.rank;
  const dt t = compute_type(cfg.storage, cfg.convert);
  auto e = std::make_shared<Entry>();
  e->src_shift = cfg.quant == 1 && (!cfg.src_int8 || cfg.src_shifted) && shift_s8_src();
  e->dst_shift = cfg.out_quant == 1 && cfg.dst_shifted && shift_s8_src();
  const dt t_dst = e->dst_shift ? dt::u8 : cfg.out_quant ? quant_dt(cfg.out_quant) : cfg.f32_dst ? dt::f32 : t;
  e->src = !cfg.quant      ? strided_md(r, d, d + r, t)
           : cfg.src_int8 ? strided_md(r, d, d + r, e->src_shift ? dt::u8 : quant_dt(cfg.quant))
                          : quant_src_md(r, d, d + r, e->src_shift ? 2 : cfg.quant);
  e->wei = strided_md(r, d + 2 * r, d + 3 * r, cfg.quant ? dt::s8 : t);
  stage_dst(*e, strided_md(r, d + 4 * r, d + 5 * r, t_dst));
  e->reduce_len = d[r - 1];  // K
  e->reduce_mask = 1u << (r - 2);  // b [.., K, N]: K
  if (cfg.has_bias) {
    e->has_bias = true;
    e->bias = strided_md(r, d + 6 * r, d + 7 * r, t);
  }
  // A constant weight goes into the layout the primitive picks; one computed at run time is read
  // where it lies (the brgemm matmul copies its panels as it goes).
  dnnl::memory::desc wei =
      cfg.prepack ? dnnl::memory::desc(e->wei.get_dims(), e->wei.get_data_type(), dnnl::memory::format_tag::any)
                  : e->wei;
  if (!cfg.quant) stage_src(*e, wei);
  const dnnl::memory::desc& src = e->src_staged ? e->src_dense : e->src;  // what the primitive reads
  if (cfg.prepack && !cfg.quant) {
    const auto probe = dnnl::matmul::primitive_desc(engine(), src, wei, e->dst, default_attr());
    if (plan_sgemm(cfg, *e, d, probe.impl_info_str())) {
      record(cfg.name, "matmul", *e);
      return e;
    }
    wei = gemm_weight_layout(*e, wei, probe.impl_info_str());
  }
  finish_epilogue(*e, cfg.epilogue, d, t_dst, [&](dnnl::primitive_attr attr) {
    if (cfg.quant) set_scales(attr, 1 << (r - 1), cfg.out_quant != 0);  // weights [.., K, N]: per N
    if (e->src_shift) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    if (e->dst_shift) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
    return cfg.has_bias ? dnnl::matmul::primitive_desc(engine(), src, wei, e->bias, e->dst, attr)
                        : dnnl::matmul::primitive_desc(engine(), src, wei, e->dst, attr);
  });
  record(cfg.name, cfg.quant ? "matmul_int8" : "matmul", *e);  // the int8 path shows in onednn_impls
  return e;
}

// Winograd F(4x4, 3x3) where the configuration allows it and the shape makes it pay (measured in
// aitgen/cpu_winograd.h: fewer than 16 tiles or 32 channels lose to the direct form); else nullptr.
// x and out must have their channels innermost (NHWC, maybe strided otherwise), the bias dense.
std::shared_ptr<Entry> make_winograd(const ConvConfig& cfg, const int64_t* d) {
  const int64_t* w = d + 8;
  const int64_t* o = w + 8;
  if (!cfg.winograd || cfg.wei_rank != 4 || cfg.storage != Storage::f32 || cfg.convert || cfg.f32_dst || cfg.quant ||
      cfg.transposed || !cfg.prepack)
    return nullptr;
  if (w[2] != 3 || w[3] != 3 || cfg.strides[0] != 1 || cfg.strides[1] != 1 || cfg.dilates[0] != 0 ||
      cfg.dilates[1] != 0 || cfg.pad_l[0] < 0 || cfg.pad_l[1] < 0)
    return nullptr;
  if (d[5] != 1 || o[5] != 1 || (cfg.has_bias && o[9] != 1)) return nullptr;
  const winograd::Tiles tl = winograd::tiles_for(winograd::F43::kTile, d[0], o[2], o[3]);
  const int64_t c = d[1], oc = o[1], t = tl.count();
  if (c < 32 || oc < 32 || t < 16) return nullptr;
  auto e = std::make_shared<Entry>();
  e->src = strided_md(4, d, d + 4, dt::f32);
  e->wei = strided_md(4, w, w + 4, dt::f32);
  e->dst = strided_md(4, o, o + 4, dt::f32);
  if (cfg.has_bias) {
    e->has_bias = true;
    e->bias = strided_md(1, o + 8, o + 9, dt::f32);
  }
  using tag = dnnl::memory::format_tag;
  const int64_t pts = winograd::F43::kPatch * winograd::F43::kPatch;
  e->wino_v = dnnl::memory::desc({pts, t, c}, dt::f32, tag::abc);
  e->wino_u = dnnl::memory::desc({pts, c, oc}, dt::f32, tag::abc);
  e->wino_m = dnnl::memory::desc({pts, t, oc}, dt::f32, tag::abc);
  const dnnl::memory::desc any({pts, c, oc}, dt::f32, tag::any);
  dnnl::matmul::primitive_desc pd(engine(), e->wino_v, any, e->wino_m, default_attr());
  const std::string impl = pd.impl_info_str();
  if (impl.rfind("ref", 0) == 0) return nullptr;  // never a reference kernel: the direct form then
  e->wino = true;
  e->wino_tiles = tl;
  e->wino_pad[0] = cfg.pad_l[0];
  e->wino_pad[1] = cfg.pad_l[1];
  e->impl = "winograd_4x3+" + impl;
  e->wei_packed = pd.weights_desc();
  e->scratchpad = pd.scratchpad_desc();
  e->prim = dnnl::primitive(pd);
  dnnl::reorder::primitive_desc rpd(engine(), e->wino_u, engine(), e->wei_packed, default_attr());
  e->reorder_scratchpad = rpd.scratchpad_desc();
  e->wei_reorder = dnnl::reorder(rpd);
  record(cfg.name, "convolution", *e);
  return e;
}

// out = conv(x, wei) + bias through the Winograd entry `e`: the input transform into scratch, the
// matmul (its weight transformed and packed once per constants version), the output transform.
// False when the result holds a NaN or an infinity (a non-finite input or weight, or an overflow):
// the caller computes it again with e.direct, which keeps them where the direct sum puts them.
bool run_winograd(const Entry& e, float* out, const float* x, const float* wei, const float* bias, PackStore& packs,
                  int64_t version) {
  const dims_t xd = e.src.get_dims(), xs = e.src.get_strides(), wd = e.wei.get_dims(), ws = e.wei.get_strides();
  const dims_t od = e.dst.get_dims(), os = e.dst.get_strides();
  const winograd::Tiles& tl = e.wino_tiles;
  float* v = static_cast<float*>(scratch(kSrc, e.wino_v.get_size()));
  float* m = static_cast<float*>(scratch(kDst, e.wino_m.get_size()));
  const int64_t x_nhw[3] = {xs[0], xs[2], xs[3]}, o_nhw[3] = {os[0], os[2], os[3]};
  winograd::input_transform<winograd::F43>(x, x_nhw, xd[2], xd[3], xd[1], e.wino_pad[0], e.wino_pad[1], tl, v);
  CallArgs& ca = call_args(e);
  const size_t wei_bytes = span(e.wei) * sizeof(float);
  ca.packed(wei, wei_bytes, version, [&] {
    return packs.get(wei, wei_bytes, version, e.wei, e.wei_packed, [&](dnnl::memory& to) {
      // Once per constants version, and up to 36 MB (512 x 512 channels): freed after packing,
      // not kept in a thread's scratch.
      std::vector<float> u(span(e.wino_u));
      const int64_t w_strides[4] = {ws[0], ws[1], ws[2], ws[3]};
      winograd::weight_transform<winograd::F43>(wei, w_strides, wd[0], wd[1], u.data());
      pack(e, dnnl::memory(e.wino_u, engine(), u.data()), to);
    });
  });
  ca.bind(DNNL_ARG_SRC, v, e.wino_v);
  ca.bind(DNNL_ARG_DST, m, e.wino_m);
  execute(e, ca);
  winograd::output_transform<winograd::F43>(m, bias, od[2], od[3], od[1], tl, out, o_nhw);
  return winograd::all_finite(out, o_nhw, od[0], od[2], od[3], od[1]);
}

std::shared_ptr<Entry> make_direct_conv(const ConvConfig& cfg, const int64_t* d, bool listed = true) {
  const int wr = cfg.wei_rank;
  const dt t = compute_type(cfg.storage, cfg.convert);
  const dt t_dst = cfg.out_quant ? quant_dt(cfg.out_quant) : cfg.f32_dst ? dt::f32 : t;
  const int64_t* w = d + 8;
  const int64_t* o = w + 2 * wr;
  auto e = std::make_shared<Entry>();
  e->src = !cfg.quant      ? strided_md(4, d, d + 4, t)
           : cfg.src_int8 ? strided_md(4, d, d + 4, quant_dt(cfg.quant))
                          : quant_src_md(4, d, d + 4, cfg.quant);
  e->wei = strided_md(wr, w, w + wr, cfg.quant ? dt::s8 : t);
  stage_dst(*e, strided_md(4, o, o + 4, t_dst));
  e->reduce_len = w[wr - 3] * w[wr - 2] * w[wr - 1];  // input channels (of a group) x kh x kw
  e->reduce_mask = 7u << (wr - 3);
  // Always `any`: with plain OHWI weights oneDNN falls back to its reference convolution. A
  // constant weight is packed once, one computed at run time is reordered on every call.
  const dnnl::memory::desc wei(e->wei.get_dims(), e->wei.get_data_type(), dnnl::memory::format_tag::any);
  const dims_t strides(cfg.strides, cfg.strides + 2), dilates(cfg.dilates, cfg.dilates + 2);
  const dims_t pad_l(cfg.pad_l, cfg.pad_l + 2), pad_r(cfg.pad_r, cfg.pad_r + 2);
  const auto prop = dnnl::prop_kind::forward_inference;
  if (cfg.has_bias) {
    e->has_bias = true;
    e->bias = strided_md(1, o + 8, o + 9, t);
  }
  if (cfg.transposed) {
    using P = dnnl::deconvolution_forward::primitive_desc;
    const auto alg = dnnl::algorithm::deconvolution_direct;
    finish_epilogue(*e, cfg.epilogue, d, t_dst, [&](const dnnl::primitive_attr& attr) {
      return cfg.has_bias ? P(engine(), prop, alg, e->src, wei, e->bias, e->dst, strides, dilates, pad_l, pad_r, attr)
                          : P(engine(), prop, alg, e->src, wei, e->dst, strides, dilates, pad_l, pad_r, attr);
    });
  } else {
    using P = dnnl::convolution_forward::primitive_desc;
    const auto alg = dnnl::algorithm::convolution_direct;
    finish_epilogue(*e, cfg.epilogue, d, t_dst, [&](dnnl::primitive_attr attr) {
      if (cfg.quant) set_scales(attr, wr == 5 ? 3 : 1, cfg.out_quant != 0);  // per output channel: O, or (G, O/G)
      return cfg.has_bias ? P(engine(), prop, alg, e->src, wei, e->bias, e->dst, strides, dilates, pad_l, pad_r, attr)
                          : P(engine(), prop, alg, e->src, wei, e->dst, strides, dilates, pad_l, pad_r, attr);
    });
  }
  if (listed) record(cfg.name, cfg.transposed ? "deconvolution" : cfg.quant ? "convolution_int8" : "convolution", *e);
  return e;
}

std::shared_ptr<Entry> make_conv(const ConvConfig& cfg, const int64_t* d) {
  std::shared_ptr<Entry> e = make_winograd(cfg, d);
  if (!e) return make_direct_conv(cfg, d);
  // For results with NaN or infinities; listed in ait_onednn_impls when it first runs.
  e->direct = make_direct_conv(cfg, d, false);
  e->name = cfg.name;
  return e;
}

// The product of a packed-sgemm entry, its weight packed once per constants version and thread
// count (the pack holds oneDNN's split of the work among the threads).
// float16/bfloat16 storage (kConvert): operands converted into float32 scratch, the weight once
// (before packing), and a float32 result into scratch, then converted into the (dense) output.
template <typename T, typename O, bool kConvert>
void run_sgemm(const Entry& e, O* out, const T* src, const T* wei, const T* bias, PackStore& packs, int64_t version) {
  constexpr bool kFloat = std::is_same<T, float>::value && std::is_same<O, float>::value;
  if constexpr (kFloat || kConvert) {
    const SgemmPlan& plan = e.sgemm;
    const dnnl::memory::desc want({static_cast<int64_t>(plan.pack_bytes)}, dt::u8, dnnl::memory::format_tag::a);
    const auto packed = packs.get(
        wei, span(e.wei) * sizeof(T), version, e.wei, want,
        [&](dnnl::memory& to) {
          pack_sgemm_weight(plan, static_cast<const float*>(operand<kConvert>(wei, e.wei, kWei)),
                            to.get_data_handle());
        },
        omp_get_max_threads());
    const float* src32 = static_cast<const float*>(operand<kConvert>(src, e.src, kSrc));
    const float* bias32 = e.has_bias ? static_cast<const float*>(operand<kConvert>(bias, e.bias, kBias)) : nullptr;
    constexpr bool kDirect = std::is_same<O, float>::value;  // a float32 result (f32_dst) is written in place
    float* out32 = kDirect ? reinterpret_cast<float*>(out) : static_cast<float*>(scratch(kDst, e.dst.get_size()));
    run_packed_sgemm(plan, packed->get_data_handle(), src32, bias32, e.bias_stride, out32, e.impl.c_str());
    if constexpr (!kDirect) from_f32(out32, out, static_cast<int64_t>(span(e.dst)));
  } else {
    throw std::runtime_error("oneDNN kernel: packed sgemm on " + e.impl + " without float32 compute");
  }
}

std::atomic<int64_t> g_operand_scans{0};  // ait_onednn_operand_scans: what the slots save

// An operand's bound: its slot's where finite, else a scan of it (counted), or +inf without `scan`.
double operand_bound(const Slots& sl, int j, const void* ptr, const dnnl::memory::desc& md, bool scan) {
  const double b = sl.in(j);
  if (b < kFiniteBound) return b;
  if (!scan) return INFINITY;
  g_operand_scans.fetch_add(1, std::memory_order_relaxed);
  return absmax(ptr, md);
}

// A bound on every value of `e`'s result through its post-op chain (aitgen/onednn_guard.h), +inf
// where the operands prove nothing: under kFiniteBound, the guarded post-ops of `e` may run. Operands
// are bounded by their slots, else scanned (`scan`; without it, +inf where a slot is missing).
// `version` >= 0: the weight is a constant of that version, and its row bound (max_row_l1) is kept
// until the address or version changes; a weight computed at run time gives K max|w|.
double guard_bound(Entry& e, const Epilogue& ep, void* const* p, const void* src, const void* wei, const void* bias,
                   int64_t version, const Slots& sl, bool scan) {
  double w = -1.0;
  if (version >= 0) {
    std::lock_guard<std::mutex> lock(e.wei_bound_mu);
    auto it = e.wei_bounds.find(wei);
    if (it != e.wei_bounds.end() && it->second.first == version) w = it->second.second;
  }
  if (w < 0.0) {
    if (version >= 0) {  // a constant seen first (or changed): its rows' L1 norms, once
      w = max_row_l1(wei, e.wei, e.reduce_mask);
      std::lock_guard<std::mutex> lock(e.wei_bound_mu);
      if (e.wei_bounds.size() >= 4096) e.wei_bounds.clear();  // a bound on what a long run can leave
      e.wei_bounds[wei] = {version, w};
    } else {
      w = static_cast<double>(e.reduce_len) * operand_bound(sl, 2, wei, e.wei, scan);
    }
  }
  if (!(w < kFiniteBound)) return INFINITY;
  double acc = operand_bound(sl, 1, src, e.src, scan) * w;
  if (e.has_bias) acc += absmax(bias, e.bias);  // [N]: small, not counted
  if (!(acc < kFiniteBound)) return INFINITY;
  const double b = chain_bound(ep, acc, [&](int i) {
    for (const BinaryArg& a : e.binaries) {
      if (a.arg == (DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1)) return operand_bound(sl, a.ptr, p[a.ptr], a.md, scan);
    }
    return static_cast<double>(INFINITY);
  });
  return b < kFiniteBound ? b : INFINITY;
}

// out = epilogue(src * wei (+ bias)) for one storage type T of the operands and O of the result (T,
// or float for a bf16 product kept in float32); `empty` when the reduction is empty (K or C = 0),
// where the accumulator is the bias (or zeros) and oneDNN is not called.
template <typename T, typename O, bool kConvert, typename Make>
void dispatch(KernelState* st, bool prepack, int nkey, const Epilogue& ep, void* const* p, const int64_t* d,
              const int64_t* out_sizes, int out_rank, int channel_axis, bool has_bias, bool empty, int src_offset,
              int bound_at, Make&& make) {
  const Slots sl{bound_at >= 0 ? p + bound_at : nullptr};
  if (double* o = sl.out()) *o = INFINITY;  // until this call proves better: every path writes its slot
  O* out = static_cast<O*>(p[0]);
  const T* bias = has_bias ? static_cast<const T*>(p[3]) : nullptr;
  const int64_t out_elems = numel(out_rank, out_sizes);
  if (out_elems == 0) return;
  if (empty) {  // out_sizes is followed by the output's strides (a descriptor's dims)
    fill_bias(out, bias, out_rank, out_sizes, out_sizes + out_rank, channel_axis);
    if (ep.loop) ep.loop(p, d);
    return;
  }
  std::shared_ptr<Entry> e = st->primitives.get(d, nkey, make);
  const T* src = static_cast<const T*>(p[1]) + (src_offset >= 0 ? d[src_offset] : 0);
  if (e->wino) {  // float32 only (make_winograd)
    if constexpr (std::is_same<T, float>::value && std::is_same<O, float>::value && !kConvert) {
      if (run_winograd(*e, out, src, static_cast<const float*>(p[2]), bias, st->packs, d[nkey])) {
        if (ep.loop) ep.loop(p, d);
        double* o = sl.out();
        if (o != nullptr && (ep.post_ops != nullptr || !ep.loop)) {  // the loop ran the post-op chain
          // The direct form's bound (its entry holds the weight's and the operands' descriptors);
          // Winograd's result (finite: run_winograd checked) differs from the exact sum by about
          // 1e-5 of its magnitude, so twice the bound holds it with room to spare.
          const double b = guard_bound(*e->direct, ep, p, src, p[2], bias, d[nkey], sl, true);
          if (b < kFiniteBound) *o = 2.0 * b * slot_margin(e->direct->reduce_len);
        }
        return;
      }
      if (!e->direct_listed.exchange(true)) record(e->name, "convolution", *e->direct);
      e = e->direct;
    } else {
      throw std::runtime_error("oneDNN kernel: Winograd convolution without float32 storage");
    }
  }
  if (e->sgemm.on) {  // float32 compute only (plan_sgemm)
    run_sgemm<T, O, kConvert>(*e, out, src, static_cast<const T*>(p[2]), bias, st->packs, d[nkey]);
    if (ep.loop) ep.loop(p, d);
    return;
  }
  const T* wei = static_cast<const T*>(p[2]);
  const int64_t version = prepack ? d[nkey] : -1;
  double bound = INFINITY;  // on every value of the result, for its slot
  if (e->plain) {
    bound = guard_bound(*e, ep, p, src, wei, bias, version, sl, true);
    if (!(bound < kFiniteBound)) e = e->plain;  // guarded post-ops on values not proved finite: the plain primitive, then the loop
  } else if (sl.out() != nullptr && (e->post_ops || !ep.loop)) {
    // No guard needs it, but a reader does: scan here what no slot bounds (this input, rather
    // than the reader the output, often the larger).
    bound = guard_bound(*e, ep, p, src, wei, bias, version, sl, true);
  }
  run<T, O, kConvert>(*e, out, src, wei, bias, prepack ? &st->packs : nullptr, prepack ? d[nkey] : 0, p);
  if (ep.loop && !e->post_ops) {
    ep.loop(p, d);
  } else if (double* o = sl.out(); o != nullptr && bound < kFiniteBound) {
    *o = bound * slot_margin(e->reduce_len);
  }
}

template <typename... Args>
void by_storage(Storage s, bool convert, bool f32_dst, Args&&... args) {
  switch (s) {
    case Storage::f32:
      return dispatch<float, float, false>(std::forward<Args>(args)...);
    case Storage::bf16:
      if (f32_dst) {  // through float32 scratch, the primitive's float32 result is the output's type
        return convert ? dispatch<ait::bf16, float, true>(std::forward<Args>(args)...)
                       : dispatch<ait::bf16, float, false>(std::forward<Args>(args)...);
      }
      return convert ? dispatch<ait::bf16, ait::bf16, true>(std::forward<Args>(args)...)
                     : dispatch<ait::bf16, ait::bf16, false>(std::forward<Args>(args)...);
    case Storage::f16:
      if (f32_dst) break;
      return convert ? dispatch<ait::half, ait::half, true>(std::forward<Args>(args)...)
                     : dispatch<ait::half, ait::half, false>(std::forward<Args>(args)...);
  }
  throw std::runtime_error("oneDNN kernel: unsupported storage type");
}

}  // namespace

void matmul(const MatmulConfig& cfg, KernelState* st, void* const* p, const int64_t* d, int bound_at) {
  const int r = cfg.rank;
  if (cfg.quant) {  // N: the output's last size
    const QuantRun qr{cfg.quant, cfg.scales_ptr, cfg.out_quant, cfg.src_int8, d[4 * r + r - 1]};
    return dispatch_quant(st, qr, cfg.prepack, cfg.nkey, cfg.epilogue, p, d, d, d + r, d + 4 * r, r, r - 1,
                          cfg.has_bias, d[r - 1] == 0, cfg.src_offset, [&] { return make_matmul(cfg, d); });
  }
  // Channels of the bias (N) are the output's last axis; K is a's last size.
  by_storage(cfg.storage, cfg.convert, cfg.f32_dst, st, cfg.prepack, cfg.nkey, cfg.epilogue, p, d, d + 4 * r, r, r - 1,
             cfg.has_bias, d[r - 1] == 0, cfg.src_offset, bound_at, [&] { return make_matmul(cfg, d); });
}

void conv(const ConvConfig& cfg, KernelState* st, void* const* p, const int64_t* d, int bound_at) {
  if (cfg.quant) {  // O: the output's axis 1
    const int64_t* o = d + 8 + 2 * cfg.wei_rank;
    const QuantRun qr{cfg.quant, cfg.scales_ptr, cfg.out_quant, cfg.src_int8, o[1]};
    return dispatch_quant(st, qr, cfg.prepack, cfg.nkey, cfg.epilogue, p, d, d, d + 4, o, 4, 1, cfg.has_bias,
                          d[1] == 0, -1, [&] { return make_conv(cfg, d); });
  }
  // out [N, O, HO, WO] sits after x's 8 dims and the weight's; channels are its axis 1; C is x's.
  by_storage(cfg.storage, cfg.convert, cfg.f32_dst, st, cfg.prepack, cfg.nkey, cfg.epilogue, p, d, d + 8 + 2 * cfg.wei_rank, 4, 1,
             cfg.has_bias, d[1] == 0, -1, bound_at, [&] { return make_conv(cfg, d); });
}

}  // namespace onednn
}  // namespace ait

extern "C" int64_t ait_onednn_impls(char* buf, int64_t cap) {
  using ait::onednn::registry;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    for (const auto& kv : registry().seen) {
      const auto& k = kv.first;
      text += std::get<0>(k) + "\t" + std::get<1>(k) + "\t" + std::get<2>(k) + "\t" + kv.second.first_shape + "\t" +
              std::to_string(kv.second.shapes) + "\n";
    }
  }
  if (buf != nullptr && cap > 0) {
    const size_t n = std::min(text.size(), static_cast<size_t>(cap - 1));
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int64_t>(text.size());
}

// Operand scans the guards made (process-wide, since load): tests compare builds with and without slots.
extern "C" int64_t ait_onednn_operand_scans(void) {
  return ait::onednn::g_operand_scans.load(std::memory_order_relaxed);
}

extern "C" int64_t ait_onednn_generation(void) {
  return ait::onednn::registry().generation.load(std::memory_order_acquire);
}
