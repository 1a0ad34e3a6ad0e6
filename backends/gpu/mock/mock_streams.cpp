// The mock runtime's streams, events, graph capture, the driver entry point CUTLASS asks for
// (cuTensorMapEncodeTiled, whose arguments are checked as the driver documents them), and the
// aitmock_* control API that aitgen/runtime/mock.py calls.
#include "mock_api.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "mock_device.hpp"

using namespace aitmock;

namespace {
using Lock = std::lock_guard<std::mutex>;
}  // namespace

// ---- streams and events ----

AITMOCK_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
  ENTER(d);
  auto* s = new Stream;
  s->agent = (int)d.streams.size();
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  s->clock = d.streams[0]->clock;
  d.streams.push_back(s);
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaStreamCreate(cudaStream_t* out) { return cudaStreamCreateWithFlags(out, 0); }
AITMOCK_API cudaError_t cudaStreamDestroy(cudaStream_t st) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s || s->agent < 2) return ret(cudaErrorInvalidResourceHandle);
  d.host_sync(s->clock);  // destruction waits for its work, as the real one completes it
  d.streams[s->agent] = nullptr;
  delete s;
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (s->capture >= 0) {
    d.fail("cudaStreamSynchronize on a stream being captured into a CUDA graph");
    d.graphs[s->capture].invalid = true;
    return ret(cudaErrorStreamCaptureUnsupported);
  }
  d.host_sync(s->clock);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int) {
  ENTER(d);
  *out = reinterpret_cast<cudaEvent_t>(new Event);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaEventCreate(cudaEvent_t* out) { return cudaEventCreateWithFlags(out, 0); }
AITMOCK_API cudaError_t cudaEventDestroy(cudaEvent_t e) {
  ENTER(d);
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s || !e) return ret(cudaErrorInvalidResourceHandle);
  auto* ev = reinterpret_cast<Event*>(e);
  ev->clock = s->clock;  // everything submitted to s so far
  ev->recorded = true;
  ev->capture = s->capture;
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned int) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s || !e) return ret(cudaErrorInvalidResourceHandle);
  const Event* ev = reinterpret_cast<Event*>(e);
  merge(s->clock, ev->clock);
  if (ev->capture >= 0 && s->capture < 0) s->capture = ev->capture;  // forked into the capture
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  ENTER(d);
  if (!e) return ret(cudaErrorInvalidResourceHandle);
  d.host_sync(reinterpret_cast<Event*>(e)->clock);
  return cudaSuccess;
}

// ---- graphs: a capture records a stream's operations; a launch replays them through the checks ----

AITMOCK_API cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (s->agent == 1) return ret(cudaErrorStreamCaptureImplicit);  // the legacy stream cannot be captured
  if (s->capture >= 0) return ret(cudaErrorIllegalState);
  s->capture = (int)d.graphs.size();
  d.graphs.emplace_back();
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t* out) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s || s->capture < 0) return ret(cudaErrorIllegalState);
  const int g = s->capture;
  for (Stream* t : d.streams)  // the streams forked into the capture leave it with its origin
    if (t && t->capture == g) t->capture = -1;
  if (d.graphs[g].invalid) {
    *out = nullptr;
    return ret(cudaErrorStreamCaptureInvalidated);
  }
  *out = reinterpret_cast<cudaGraph_t>(static_cast<intptr_t>(g + 1));
  return cudaSuccess;
}
namespace {
int graph_index(const void* h) { return (int)reinterpret_cast<intptr_t>(h) - 1; }
}  // namespace
AITMOCK_API cudaError_t cudaGraphDestroy(cudaGraph_t) {
  ENTER(d);
  return cudaSuccess;  // graphs are small bookkeeping, kept until the process ends
}
// HIP: hipGraphInstantiateWithFlags, the same form (gpu_runtime_api.h maps the name)
AITMOCK_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* out, cudaGraph_t g, unsigned long long) {
  ENTER(d);
  const int i = graph_index(g);
  if (i < 0 || i >= (int)d.graphs.size()) return ret(cudaErrorInvalidValue);
  d.graphs.push_back(d.graphs[i]);  // an executable graph: a copy, updated in place later
  *out = reinterpret_cast<cudaGraphExec_t>(static_cast<intptr_t>(d.graphs.size()));
  return cudaSuccess;
}
#ifdef AITMOCK_HIP  // HIP keeps CUDA 11's form: an error node and a result
AITMOCK_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, hipGraphNode_t*,
                                            hipGraphExecUpdateResult*) {
#else
AITMOCK_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo*) {
#endif
  ENTER(d);
  const int i = graph_index(e), j = graph_index(g);
  if (i < 0 || j < 0 || i >= (int)d.graphs.size() || j >= (int)d.graphs.size()) return ret(cudaErrorInvalidValue);
  if (d.graphs[i].ops.size() != d.graphs[j].ops.size()) return ret(cudaErrorGraphExecUpdateFailure);
  d.graphs[i] = d.graphs[j];
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) {
  ENTER(d);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t st) {
  ENTER(d);
  Stream* s = d.stream(st);
  const int i = graph_index(e);
  if (!s || i < 0 || i >= (int)d.graphs.size()) return ret(cudaErrorInvalidResourceHandle);
  cudaError_t first = cudaSuccess;
  // Replayed with the pointers baked in at capture: a buffer freed since then is caught here.
  for (Op op : d.graphs[i].ops) {
    d.submit(s);
    if (op.kind == "kernel") {
      const cudaError_t err = launch(d, op, s, true);
      if (first == cudaSuccess) first = err;
    } else {
      const std::string race = d.check_accesses(op.accesses, s);
      if (!race.empty()) d.fail("a copy in a graph: " + race);
    }
  }
  return ret(first);
}

// ---- the driver entry point of TMA descriptors ----

#ifndef AITMOCK_HIP  // TMA descriptors are Hopper's; HIP has no driver entry points
namespace {
CUresult mock_encode_tiled(CUtensorMap* map, CUtensorMapDataType dt, cuuint32_t rank, void* addr,
                           const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                           const cuuint32_t* estrides, CUtensorMapInterleave inter, CUtensorMapSwizzle swz,
                           CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  Device& d = dev();
  Lock lock(d.mu);
  // CUtensorMapDataType: u8, u16, u32, s32, u64, s64, f16, f32, f64, bf16, f32 ftz, tf32, tf32 ftz.
  static const int bytes_of[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  const int esize = (int)dt < 13 ? bytes_of[dt] : 1;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  std::string why;
  if (rank < 1 || rank > 5) why = "rank " + std::to_string(rank) + " outside 1..5";
  else if (a % (inter == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16)) why = "global address " + d.describe(a) + " is not 16-byte aligned";
  for (cuuint32_t i = 0; why.empty() && i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32)) why = "dim " + std::to_string(i) + " is " + std::to_string(dims[i]);
    else if (box[i] == 0 || box[i] > 256) why = "box dim " + std::to_string(i) + " is " + std::to_string(box[i]);
    else if (estrides[i] == 0 || estrides[i] > 8) why = "element stride " + std::to_string(i) + " is " + std::to_string(estrides[i]);
    else if (i + 1 < rank && (strides[i] % 16 || strides[i] >= (1ull << 40)))
      why = "global stride " + std::to_string(i) + " is " + std::to_string(strides[i]) + " bytes (a multiple of 16 below 2^40)";
  }
  if (why.empty() && swz != CU_TENSOR_MAP_SWIZZLE_NONE) {
    const cuuint64_t span = swz == CU_TENSOR_MAP_SWIZZLE_32B ? 32 : swz == CU_TENSOR_MAP_SWIZZLE_64B ? 64 : 128;
    if ((cuuint64_t)box[0] * esize > span) why = "the inner box of " + std::to_string(box[0] * esize) + " bytes exceeds the swizzle span";
  }
  if (why.empty()) {  // the last element it may address lies in one live allocation
    uint64_t last = (dims[0] - 1) * esize + esize;
    for (cuuint32_t i = 1; i < rank; ++i) last += (dims[i] - 1) * strides[i - 1];
    const Allocation* al = d.find(a);
    if (d.is_device_address(a) && (!al || !al->live || a + last > al->base + al->bytes))
      why = "the tensor it describes (" + std::to_string(last) + " bytes from " + d.describe(a) + ") is not inside a live allocation";
  }
  if (!why.empty()) {
    d.fail("cuTensorMapEncodeTiled: " + why);
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memset(map, 0, sizeof(CUtensorMap));
  std::memcpy(map, &a, sizeof a);  // the address, where the launch's argument scan finds it
  return CUDA_SUCCESS;
}
}  // namespace

AITMOCK_API cudaError_t cudaGetDriverEntryPointByVersion(const char* sym, void** fn, unsigned int, unsigned long long,
                                                         cudaDriverEntryPointQueryResult* status) {
  ENTER(d);
  if (std::strcmp(sym, "cuTensorMapEncodeTiled") == 0) {
    *fn = reinterpret_cast<void*>(&mock_encode_tiled);
    if (status) *status = cudaDriverEntryPointSuccess;
    return cudaSuccess;
  }
  d.fail(std::string("cudaGetDriverEntryPoint(") + sym + "): a driver function the mock does not model");
  *fn = nullptr;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaGetDriverEntryPoint(const char* sym, void** fn, unsigned long long flags,
                                                cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(sym, fn, 12000, flags, status);
}
#endif  // AITMOCK_HIP

// ---- control, for aitgen/runtime/mock.py ----

AITMOCK_API void aitmock_configure(int cc_major, int cc_minor, int sm_count, long long smem_optin, long long smem_per_sm) {
  Device& d = dev();
  Lock lock(d.mu);
  d.cc_major = cc_major, d.cc_minor = cc_minor, d.sm_count = sm_count;
  d.smem_optin = smem_optin, d.smem_per_sm = smem_per_sm;
}
AITMOCK_API void aitmock_set_arch_name(const char* name) {
  Device& d = dev();
  Lock lock(d.mu);
  d.arch_name = name ? name : "";
}
AITMOCK_API void aitmock_add_kernel(const char* name, int nparams, const long long* sizes, int max_threads,
                                    long long static_smem) {
  Device& d = dev();
  Lock lock(d.mu);
  KernelInfo& k = d.kernels[name];
  k.name = name, k.known = true, k.max_threads = max_threads, k.static_smem = static_smem;
  k.param_sizes.assign(sizes, sizes + nparams);
}
// Nodes of the model about to run: for node i, table holds n_i, then (extent, align, write) per pointer.
AITMOCK_API void aitmock_set_nodes(int count, const long long* table) {
  Device& d = dev();
  Lock lock(d.mu);
  d.nodes.assign(count, {});
  for (int i = 0; i < count; ++i) {
    const long long n = *table++;
    for (long long j = 0; j < n; ++j, table += 3) d.nodes[i].push_back({table[0], table[1], table[2] != 0});
  }
  d.current_node = -1;
  d.node_access.clear();
}
// Called by the model before each node's kernel function (model.cu.j2): its operands, checked
// here, and remembered as what the launches that follow read and write.
AITMOCK_API void aitmock_node(int index, int nptrs, void* const* p, const int64_t*) {
  Device& d = dev();
  Lock lock(d.mu);
  d.current_node = index;
  d.node_access.clear();
  if (index < 0 || index >= (int)d.nodes.size() || (int)d.nodes[index].size() != nptrs) return;
  for (int j = 0; j < nptrs; ++j) {
    const Operand& o = d.nodes[index][j];
    const uintptr_t a = reinterpret_cast<uintptr_t>(p[j]);
    const std::string who = "node " + std::to_string(index) + ", operand " + std::to_string(j);
    ++d.operands_checked;
    if (o.align > 1 && a % o.align)  // a requirement: the kernel refuses it at run time
      d.fail(who + ": " + d.describe(a) + " is not " + std::to_string(o.align) + "-byte aligned, as its kernel requires");
    if (o.align < -1 && a % -o.align) ++d.operands_unpacked;  // a preference: it falls to a slower path
    if (!d.is_device_address(a)) continue;
    const Allocation* al = d.find(a);
    if (!al || !al->live || a + o.extent > al->base + al->bytes)
      d.fail(who + ": " + std::to_string(o.extent) + " bytes from " + d.describe(a) + " are not inside a live allocation");
    if (o.extent > 0) d.node_access.push_back({a, a + (uintptr_t)o.extent, o.write, 0, 0, -1, who});
  }
}
// Before a model's library creates its runtimes: allocations made from now on are that model's.
AITMOCK_API void aitmock_model_loading(void) {
  Device& d = dev();
  Lock lock(d.mu);
  d.load_serial = d.allocation_serial;
}
AITMOCK_API void aitmock_begin(void) {
  Device& d = dev();
  Lock lock(d.mu);
  d.log.clear();
  d.failures.clear();
  d.api_calls = 0;
  d.operands_checked = d.operands_unpacked = d.stale_words = 0;
  d.current_node = -1;
  d.node_access.clear();
}
AITMOCK_API void aitmock_fail_at(long long n) {
  Device& d = dev();
  Lock lock(d.mu);
  d.fail_at = n;
  d.api_calls = 0;
}
// The alignment census of the nodes seen since aitmock_begin: operands checked, and those that
// missed the alignment their kernel prefers (and so took its element-at-a-time path).
AITMOCK_API long long aitmock_operands(int which) {
  Device& d = dev();
  return which == 0 ? d.operands_checked : which == 1 ? d.operands_unpacked : d.stale_words;
}
AITMOCK_API long long aitmock_api_calls(void) { return dev().api_calls; }
AITMOCK_API long long aitmock_launch_count(void) { return (long long)dev().log.size(); }
AITMOCK_API long long aitmock_live_bytes(void) { return (long long)dev().live_bytes; }
AITMOCK_API int aitmock_failure_count(void) { return (int)dev().failures.size(); }
AITMOCK_API const char* aitmock_failure(int i) {
  Device& d = dev();
  return i >= 0 && i < (int)d.failures.size() ? d.failures[i].c_str() : nullptr;
}
// One launch record as tab-separated fields (index, kernel, node, grid, block, cluster, smem,
// stream, from_graph, pointers, failure); nullptr past the end.
AITMOCK_API const char* aitmock_launch(long long i) {
  Device& d = dev();
  Lock lock(d.mu);
  if (i < 0 || i >= (long long)d.log.size()) return nullptr;
  const LaunchRecord& r = d.log[i];
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld\t%d\t%u,%u,%u\t%u,%u,%u\t%u,%u,%u\t%zu\t%d\t%d\t", (long long)r.index, r.node,
                r.grid.x, r.grid.y, r.grid.z, r.block.x, r.block.y, r.block.z, r.cluster.x, r.cluster.y, r.cluster.z,
                r.smem, r.stream, r.from_graph ? 1 : 0);
  std::string s = buf;
  for (size_t j = 0; j < r.pointers.size(); ++j) {
    std::snprintf(buf, sizeof buf, "%s0x%llx", j ? "," : "", (unsigned long long)r.pointers[j]);
    s += buf;
  }
  s += "\t" + r.kernel + "\t" + r.failure;
  for (char& c : s)
    if (c == '\n') c = ' ';
  d.scratch = s;
  return d.scratch.c_str();
}
