// Shared helpers of the oneDNN kernels (matmul, convolution, deconvolution): one engine per library,
// a stream and scratch buffers per thread, a primitive cache per kernel keyed by the run-time dims,
// and a store of constant weights prepacked into the layout oneDNN prefers. Only
// backends/cpu/src/onednn_kernels.cpp includes it (dnnl.hpp costs seconds per translation unit);
// kernels include the light aitgen/onednn_kernels.h.
//
// Thread safety: several runtimes execute the same kernel at once from different threads. The
// caches are guarded by mutexes and hand out shared_ptrs (a cleared or replaced entry stays alive
// while a thread still executes with it); primitives run with a user scratchpad taken from the
// calling thread's buffers, so concurrent executions of one primitive share no memory.
#ifndef AITGEN_ONEDNN_UTIL_H_
#define AITGEN_ONEDNN_UTIL_H_

#include <oneapi/dnnl/dnnl.hpp>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "aitgen/cpu_alloc.h"
#include "aitgen/cpu_convert.h"
#include "aitgen/cpu_kernel.h"
#include "aitgen/onednn_layout.h"
#include "aitgen/cpu_winograd.h"
#include "aitgen/onednn_sgemm.h"

namespace ait {
namespace onednn {

using dt = dnnl::memory::data_type;
using dims_t = dnnl::memory::dims;

// Inline functions with static locals are merged across the translation units of one library,
// so all kernels of a model share the engine.
inline dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// CPU streams are cheap but not free to create; one per calling thread.
inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// A growable 64-byte aligned buffer. Kernels run one at a time per thread, so each thread keeps a
// few (one per purpose) and reuses them across calls.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(ptr_); }
  void* get(size_t bytes) {
    if (bytes > cap_) {
      std::free(ptr_);
      cap_ = (bytes + 4095) / 4096 * 4096;
      ptr_ = cpu::alloc_host(cap_, 64);
      if (!ptr_) {
        cap_ = 0;
        throw std::runtime_error("oneDNN kernel: out of memory for a " + std::to_string(bytes) + "-byte scratch");
      }
    }
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  size_t cap_ = 0;
};

enum Slot { kScratchpad = 0, kSrc, kSrcDense, kWei, kWeiPacked, kBias, kDst, kNumSlots };

inline void* scratch(Slot slot, size_t bytes) {
  thread_local Buffer bufs[kNumSlots];
  return bufs[slot].get(bytes == 0 ? 64 : bytes);
}

// A cheap identity of a weight's contents: 16 words sampled evenly plus the size (at worst 16 cache
// misses per call). With the constants version it tells a prepacked copy from a stale one even when
// a later model of the same library gets its weight at a freed address (the version restarts at 0
// per model, and a rebuild with other weights into the same workdir reuses the loaded library).
inline uint64_t fingerprint(const void* p, size_t bytes) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull ^ bytes;
  if (bytes < 4) {
    for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
  }
  const size_t words = bytes / 4, samples = words < 16 ? words : 16;
  for (size_t i = 0; i < samples; ++i) {
    uint32_t w;
    std::memcpy(&w, b + 4 * (i * (words - 1) / (samples > 1 ? samples - 1 : 1)), 4);
    h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

// Primitives of one kernel, keyed by the run-time dims (its shapes) and the calling thread's
// OpenMP thread count (oneDNN splits the work for the count it was created under, and a runtime's
// num_threads option changes it): creating a primitive descriptor costs tens of microseconds to
// milliseconds, executing one a few.
template <typename Entry>
class PrimitiveCache {
 public:
  template <typename Make>
  std::shared_ptr<Entry> get(const int64_t* dims, int n_dims, Make&& make) {
    thread_local std::vector<int64_t> key_buf;  // no allocation once it has grown
    key_buf.assign(dims, dims + n_dims);
    key_buf.push_back(omp_get_max_threads());
    const int64_t* key = key_buf.data();
    const int n = n_dims + 1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The usual call repeats the last one's shape: compared in place, no key vector allocated.
      if (last_ && static_cast<int>(last_key_.size()) == n && std::equal(key, key + n, last_key_.begin())) return last_;
      auto it = map_.find(std::vector<int64_t>(key, key + n));
      if (it != map_.end()) {
        last_key_ = it->first;
        return last_ = it->second;
      }
    }
    std::vector<int64_t> k(key, key + n);
    // Created outside the lock: a slow creation must not stall other shapes. Two threads may both
    // create the same entry; the first stored wins.
    std::shared_ptr<Entry> e = make();
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxEntries) map_.clear();  // a bound for unbounded dynamic shapes
    auto it = map_.emplace(std::move(k), std::move(e)).first;
    last_key_ = it->first;
    return last_ = it->second;
  }

 private:
  static constexpr size_t kMaxEntries = 256;
  std::mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<Entry>> map_;
  std::vector<int64_t> last_key_;  // the shape the last get() returned, and its entry
  std::shared_ptr<Entry> last_;
};

// Constant weights reordered once into a primitive's preferred layout, keyed by the constant's
// address and that layout (different shapes may prefer different blockings; equal ones share a
// copy). A copy is valid for one constants version and content fingerprint: set_constants bumps the
// version, and the next run re-packs.
class PackStore {
 public:
  // The copy of the weight at `key` (laid out as `from`) in layout `want`; `fill(packed)` writes it
  // into fresh memory, called only to (re)pack.
  // `variant` tells apart copies of one layout made for different thread counts (a packed sgemm
  // weight holds its threads' split).
  template <typename Fill>
  std::shared_ptr<dnnl::memory> get(const void* key, size_t key_bytes, int64_t version,
                                    const dnnl::memory::desc& from, const dnnl::memory::desc& want, Fill&& fill,
                                    int64_t variant = 0) {
    const uint64_t fp = fingerprint(key, key_bytes);
    std::lock_guard<std::mutex> lock(mu_);  // packing under the lock: concurrent first runs pack once
    std::vector<Packed>& copies = map_[key];
    Packed* slot = nullptr;
    for (Packed& p : copies) {
      if (p.from == from && p.variant == variant && p.mem->get_desc() == want) {
        if (p.version == version && p.fp == fp) return p.mem;
        slot = &p;
        break;
      }
    }
    // The copy is read every run: its own buffer, on huge pages where it is large (cpu_alloc.h).
    const size_t bytes = want.get_size();
    void* buf = cpu::alloc_host(bytes, 64);
    if (!buf) throw std::runtime_error("oneDNN kernel: out of memory for a " + std::to_string(bytes) + "-byte packed weight");
    std::shared_ptr<dnnl::memory> mem;
    try {
      mem = std::shared_ptr<dnnl::memory>(new dnnl::memory(want, engine(), buf), [buf](dnnl::memory* m) {
        delete m;
        std::free(buf);
      });
    } catch (...) {
      std::free(buf);
      throw;
    }
    fill(*mem);
    if (slot) {
      slot->mem = mem;  // a thread still running with the old copy holds its own reference
      slot->version = version;
      slot->fp = fp;
    } else {
      copies.push_back(Packed{from, variant, version, fp, mem});
      // A bound for models loaded and dropped many times: their weights' copies go with the rest.
      if (++count_ > kMaxEntries) {
        std::vector<Packed> keep = std::move(copies);
        map_.clear();
        map_[key] = std::move(keep);
        count_ = map_[key].size();
      }
    }
    return mem;
  }

 private:
  struct Packed {
    dnnl::memory::desc from;
    int64_t variant;
    int64_t version;
    uint64_t fp;
    std::shared_ptr<dnnl::memory> mem;
  };
  static constexpr size_t kMaxEntries = 1024;
  std::mutex mu_;
  std::unordered_map<const void*, std::vector<Packed>> map_;
  size_t count_ = 0;
};

// Every kernel uses a user scratchpad (see run) and computes in the operands' type.
inline dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// A primitive with src, weights, optional bias and dst, created for one shape. The descs are in
// the compute type (float32 for float16 storage); `wei` is the weight's plain layout and
// `wei_packed` the one the primitive reads (equal unless the primitive was created with `any`).
// A binary post-op's operand: the execute argument, the kernel pointer it reads, its descriptor.
struct BinaryArg {
  int arg;
  int ptr;
  dnnl::memory::desc md;
};

inline uint64_t next_entry_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

struct Entry {
  const uint64_t id = next_entry_id();  // names this entry in the threads' CallArgs (never reused)
  dnnl::primitive prim;
  dnnl::memory::desc src, wei, bias, dst, wei_packed, scratchpad;
  // Set when the output is a strided slice of a larger tensor (a concat's part written in place):
  // oneDNN's fast kernels take no such destination (a strided one sends a convolution to its
  // reference kernel, a matmul off brgemm), so the primitive writes `dst`, dense, into scratch,
  // and the kernel copies it to where the output lies (dst_store's strides).
  bool staged = false;
  dnnl::memory::desc dst_store;
  // Set when the source lies at strides (one of Q, K, V sliced from a packed projection) and oneDNN
  // would leave its fast kernel for it (make_matmul's stage_src): the kernel gathers the source into
  // dense scratch (src_dense) for the primitive. `src` stays the operand's own layout (the guards
  // read the operand through it).
  bool src_staged = false;
  dnnl::memory::desc src_dense;
  bool has_bias = false;
  // An int8 source quantised here as s8 is stored as u8 = q + 128 and read with oneDNN's source
  // zero point 128 (make_matmul's shift_s8_src: CPUs without VNNI, where an s8 source costs oneDNN
  // a shifted copy and compensation of its own).
  bool src_shift = false;
  // The s8 result stored as u8 = q + 128 through oneDNN's dst zero point 128 (MatmulConfig::dst_shifted).
  bool dst_shift = false;
  bool post_ops = false;             // the primitive applies the epilogue (else its loop runs after)
  std::vector<BinaryArg> binaries;   // operands of its binary post-ops
  // Guarded post-ops (aitgen/onednn_guard.h): the same primitive without them, for a call whose
  // operands do not prove every value finite; the length of the reduction (K, or C/groups x kh x
  // kw) for the bound; and the bound of each constant weight, by address, with its constants
  // version (layers of one shape share a kernel, so its entry sees each of their weights in turn).
  std::shared_ptr<Entry> plain;
  int64_t reduce_len = 0;
  unsigned reduce_mask = 0;  // the weight's dims the reduction runs over (max_row_l1)
  std::mutex wei_bound_mu;
  std::unordered_map<const void*, std::pair<int64_t, double>> wei_bounds;
  // Set when the product runs as oneDNN's packed sgemm (aitgen/onednn_sgemm.h) instead of `prim`:
  // the weight from its packed copy, the bias as C's initial value, the epilogue in the loop.
  SgemmPlan sgemm;
  int64_t bias_stride = 1;
  // Set when a convolution runs as Winograd F(4x4, 3x3) (aitgen/cpu_winograd.h): `prim` is the
  // batched matmul of the transformed tiles wino_v [36, T, C] by the transformed weight (wino_u
  // [36, C, O], plain, packed into wei_packed) into wino_m [36, T, O]; src, wei, dst, bias stay the
  // convolution's. wino_pad: padding above and left. `direct`: the direct form's entry, for a call
  // whose input is not finite.
  bool wino = false;
  winograd::Tiles wino_tiles{};
  int64_t wino_pad[2] = {0, 0};
  dnnl::memory::desc wino_v, wino_u, wino_m;
  std::shared_ptr<Entry> direct;
  const char* name = "";                  // the kernel's, for listing `direct` when it first runs
  std::atomic<bool> direct_listed{false};
  dnnl::reorder wei_reorder;  // plain -> packed, for a weight packed on every call
  dnnl::memory::desc reorder_scratchpad;
  std::string impl;           // the implementation oneDNN picked ("brg:avx512_core", "ref:any", ...)
};

template <typename PD>
inline void finish(Entry& e, const PD& pd) {
  e.wei_packed = pd.weights_desc();
  e.scratchpad = pd.scratchpad_desc();
  e.impl = pd.impl_info_str();
  e.prim = dnnl::primitive(pd);
  if (e.wei_packed != e.wei) {
    dnnl::reorder::primitive_desc rpd(engine(), e.wei, engine(), e.wei_packed, default_attr());
    e.reorder_scratchpad = rpd.scratchpad_desc();
    e.wei_reorder = dnnl::reorder(rpd);
  }
}

// Elements spanned by a desc (its storage holds exactly these, in the storage type).
inline size_t span(const dnnl::memory::desc& md) {
  return md.get_size() / dnnl::memory::data_type_size(md.get_data_type());
}

// Operand in the compute type: the storage itself, or (kConvert) a float32 copy in `slot`.
template <bool kConvert, typename T>
inline void* operand(const T* p, const dnnl::memory::desc& md, Slot slot) {
  if (!kConvert) return const_cast<T*>(p);
  const size_t n = span(md);
  float* f = static_cast<float*>(scratch(slot, n * sizeof(float)));
  to_f32(p, f, static_cast<int64_t>(n));
  return f;
}

// The weight from its plain layout into the primitive's.
inline void pack(const Entry& e, const dnnl::memory& plain, const dnnl::memory& to) {
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, to}};
  const size_t pad = e.reorder_scratchpad.get_size();
  if (pad > 0) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.reorder_scratchpad, engine(), scratch(kScratchpad, pad)));
  e.wei_reorder.execute(stream(), args);
  stream().wait();
}

// The execute arguments of one entry on one thread, kept from call to call. Creating a
// dnnl::memory costs about a microsecond, and a call binds four to eight of them: on MobileNetV2
// (53 primitives of 5-100 us) that was a tenth of the run. A run binds the same pointers every time
// (the arena's offsets, the constants), so the memories are made once and re-pointed only when a
// pointer changes; the prepacked weight is looked up in the PackStore only when the weight's
// address, constants version or fingerprint differ from the last call's.
class CallArgs {
 public:
  // The memory for `arg` at `ptr`; `md()` gives its descriptor the first time.
  template <typename Md>
  void bind(int arg, void* ptr, Md&& md) {
    for (Bound& b : bound_) {
      if (b.arg != arg) continue;
      if (b.ptr != ptr) {
        args_.at(arg).set_data_handle(ptr);
        b.ptr = ptr;
      }
      return;
    }
    args_.emplace(arg, dnnl::memory(md(), engine(), ptr));
    bound_.push_back({arg, ptr});
  }
  void bind(int arg, void* ptr, const dnnl::memory::desc& md) {
    bind(arg, ptr, [&]() -> const dnnl::memory::desc& { return md; });
  }
  // The weight's prepacked copy (constants version `version`); `get()` fetches it from the store.
  template <typename Get>
  void packed(const void* wei, size_t bytes, int64_t version, Get&& get) {
    const uint64_t fp = fingerprint(wei, bytes);
    if (has_packed_ && wei == wei_ && version == version_ && fp == fp_) return;
    args_[DNNL_ARG_WEIGHTS] = *get();
    has_packed_ = true;
    wei_ = wei;
    version_ = version;
    fp_ = fp;
  }
  const std::unordered_map<int, dnnl::memory>& args() const { return args_; }

 private:
  struct Bound {
    int arg;
    void* ptr;
  };
  std::unordered_map<int, dnnl::memory> args_;
  std::vector<Bound> bound_;
  bool has_packed_ = false;
  const void* wei_ = nullptr;
  int64_t version_ = 0;
  uint64_t fp_ = 0;
};

// This thread's CallArgs for `e`. Keyed by the entry's id, never reused, so an entry dropped from
// its cache and another created at the same address cannot meet the first one's arguments; the
// table is cleared past a bound (models loaded and dropped many times, unbounded dynamic shapes).
inline CallArgs& call_args(const Entry& e) {
  thread_local std::unordered_map<uint64_t, CallArgs> table;
  if (table.size() >= 4096 && table.find(e.id) == table.end()) table.clear();
  return table[e.id];
}

// Run `e` with the arguments bound in `ca`, plus its scratchpad from this thread's buffer.
inline void execute(const Entry& e, CallArgs& ca) {
  const size_t pad = e.scratchpad.get_size();
  if (pad > 0) ca.bind(DNNL_ARG_SCRATCHPAD, scratch(kScratchpad, pad), e.scratchpad);
  e.prim.execute(stream(), ca.args());
  stream().wait();
}

// Execute `e` on storage pointers. With `packs` (the weight is a graph constant) the weight comes
// from its prepacked copy for `version`; else, when the primitive wants another layout than the
// plain one, it is reordered into scratch on every call.
// `p`: the kernel's pointers, which the binary post-ops' operands are read from.
// O: the result's storage, T's or float (a bf16 product kept in float32).
template <typename T, typename O, bool kConvert>
inline void run(const Entry& e, O* dst, const T* src, const T* wei, const T* bias, PackStore* packs,
                int64_t version, void* const* p = nullptr) {
  dnnl::engine& eng = engine();
  CallArgs& ca = call_args(e);
  if (e.src_staged) {
    T* dense = static_cast<T*>(scratch(kSrcDense, span(e.src_dense) * sizeof(T)));
    load_strided(src, dense, e.src, e.src_dense);
    ca.bind(DNNL_ARG_SRC, operand<kConvert>(dense, e.src_dense, kSrc), e.src_dense);
  } else {
    ca.bind(DNNL_ARG_SRC, operand<kConvert>(src, e.src, kSrc), e.src);
  }
  if (e.wei_packed == e.wei) {
    ca.bind(DNNL_ARG_WEIGHTS, operand<kConvert>(wei, e.wei, kWei), e.wei);
  } else if (packs) {
    ca.packed(wei, span(e.wei) * sizeof(T), version, [&] {
      return packs->get(wei, span(e.wei) * sizeof(T), version, e.wei, e.wei_packed, [&](dnnl::memory& to) {
        pack(e, dnnl::memory(e.wei, eng, operand<kConvert>(wei, e.wei, kWei)), to);
      });
    });
  } else {
    void* to = scratch(kWeiPacked, e.wei_packed.get_size());
    pack(e, dnnl::memory(e.wei, eng, operand<kConvert>(wei, e.wei, kWei)), dnnl::memory(e.wei_packed, eng, to));
    ca.bind(DNNL_ARG_WEIGHTS, to, e.wei_packed);
  }
  if (e.has_bias) ca.bind(DNNL_ARG_BIAS, operand<kConvert>(bias, e.bias, kBias), e.bias);
  for (const BinaryArg& b : e.binaries) ca.bind(b.arg, p[b.ptr], b.md);
  // Through scratch when converting (float32 results) or when the output lies at strides (staged).
  void* out = dst;
  if (kConvert || e.staged) out = scratch(kDst, e.dst.get_size());
  ca.bind(DNNL_ARG_DST, out, e.dst);
  execute(e, ca);
  using C = typename std::conditional<kConvert, float, O>::type;  // what the primitive wrote
  if (e.staged) {
    store_strided(static_cast<const C*>(out), dst, e.dst, e.dst_store);
  } else if (kConvert) {
    from_f32(static_cast<const float*>(out), dst, static_cast<int64_t>(span(e.dst)));
  }
}

}  // namespace onednn
}  // namespace ait

#endif  // AITGEN_ONEDNN_UTIL_H_
