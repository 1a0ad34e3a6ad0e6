// A mock CUDA runtime: the entry points a model library built by aitgen calls (and the compiler's
// kernel registration and launch stubs), over host memory, with no GPU. Linked in place of
// libcudart into the mock variant of a CUDA build (aitgen/runtime/mock.py), so the library's own
// host code -- container, constant upload, arena, dim binding, dispatch, CUTLASS's argument
// checks and workspace sizing, graph capture -- runs here unchanged; kernels are recorded and
// checked (mock_device.cpp), never executed. API entry points count toward fault injection.
#include "mock_api.h"
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mock_device.hpp"

using namespace aitmock;

namespace {

using Lock = std::lock_guard<std::mutex>;

bool capturing(Device& d, const char* what) {
  for (size_t i = 1; i < d.streams.size(); ++i) {
    Stream* s = d.streams[i];
    if (s && s->capture >= 0) {
      d.fail(std::string(what) + " while stream " + std::to_string(s->agent) + " is being captured into a CUDA graph");
      d.graphs[s->capture].invalid = true;
      return true;
    }
  }
  return false;
}

// A copy's byte range, checked against the allocations when it is device memory.
bool range_ok(Device& d, const void* p, size_t n, const char* what) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (!d.is_device_address(a)) return true;  // host memory: not ours to check
  const Allocation* al = d.find(a);
  if (!al || !al->live || a + n > al->base + al->bytes) {
    d.fail(std::string(what) + " of " + std::to_string(n) + " bytes at " + d.describe(a) + " runs outside a live allocation");
    return false;
  }
  return true;
}

cudaError_t copy_op(Device& d, void* dst, const void* src, size_t n, Stream* s, bool sync, const char* what) {
  if (!range_ok(d, dst, n, what) || !range_ok(d, src, n, what)) return ret(cudaErrorInvalidValue);
  std::vector<Access> acc;
  const uintptr_t sd = reinterpret_cast<uintptr_t>(src), dd = reinterpret_cast<uintptr_t>(dst);
  if (n && d.is_device_address(sd)) acc.push_back({sd, sd + n, false, 0, 0, -1, what});
  if (n && d.is_device_address(dd)) acc.push_back({dd, dd + n, true, 0, 0, -1, what});
  copy_access(d, s, std::move(acc), "memcpy", what);
  if (n) std::memmove(dst, src, n);  // host memory both sides: the copy is real
  if (sync) d.host_sync(s->clock);
  return cudaSuccess;
}

}  // namespace

// ---- registration and launch (what the compiler's host stubs call) ----

namespace {
// The launch configuration between the compiler's push (at the <<<...>>>) and its stub's pop.
thread_local dim3 t_grid, t_block;
thread_local size_t t_smem = 0;
thread_local cudaStream_t t_stream = nullptr;

void register_function(const void* host_stub, const char* device_name) {
  Device& d = dev();
  Lock lock(d.mu);
  d.functions[host_stub] = device_name;
}
void push_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
  t_grid = grid, t_block = block, t_smem = smem, t_stream = stream;
}
void pop_config(dim3* grid, dim3* block, size_t* smem, cudaStream_t* stream) {
  *grid = t_grid, *block = t_block, *smem = t_smem, *stream = t_stream;
}
}  // namespace

#ifdef AITMOCK_HIP  // hipcc's stubs
AITMOCK_API void** __hipRegisterFatBinary(const void* data) { return static_cast<void**>(const_cast<void*>(data)); }
AITMOCK_API void __hipUnregisterFatBinary(void**) {}
AITMOCK_API void __hipRegisterVar(void**, void*, char*, char*, int, size_t, int, int) {}
AITMOCK_API void __hipRegisterFunction(void**, const void* hostFun, char*, const char* deviceName, unsigned int,
                                       uint3*, uint3*, dim3*, dim3*, int*) {
  register_function(hostFun, deviceName);
}
AITMOCK_API hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block, size_t smem, hipStream_t stream) {
  push_config(grid, block, smem, stream);
  return hipSuccess;
}
AITMOCK_API hipError_t __hipPopCallConfiguration(dim3* grid, dim3* block, size_t* smem, hipStream_t* stream) {
  pop_config(grid, block, smem, stream);
  return hipSuccess;
}

#else  // nvcc's stubs
AITMOCK_API void** __cudaRegisterFatBinary(void* fatCubin) { return static_cast<void**>(fatCubin); }
AITMOCK_API void __cudaRegisterFatBinaryEnd(void**) {}
AITMOCK_API void __cudaUnregisterFatBinary(void**) {}
AITMOCK_API char __cudaInitModule(void**) { return 1; }
AITMOCK_API void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
AITMOCK_API void __cudaRegisterFunction(void**, const char* hostFun, char*, const char* deviceName, int, uint3*,
                                        uint3*, dim3*, dim3*, int*) {
  register_function(hostFun, deviceName);
}
AITMOCK_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, struct CUstream_st* stream) {
  push_config(grid, block, smem, stream);
  return 0;
}
AITMOCK_API cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* smem, void* stream) {
  pop_config(grid, block, smem, static_cast<cudaStream_t*>(stream));
  return cudaSuccess;
}
AITMOCK_API cudaError_t __cudaGetKernel(cudaKernel_t* out, const void* fun) {
  *out = reinterpret_cast<cudaKernel_t>(const_cast<void*>(fun));
  return cudaSuccess;
}

#endif  // AITMOCK_HIP

namespace {
cudaError_t launch_entry(const void* func, dim3 grid, dim3 block, dim3 cluster, void** args, size_t smem,
                         cudaStream_t stream) {
  ENTER(d);
  Stream* s = d.stream(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  Op op;
  op.kind = "kernel";
  op.func = func, op.grid = grid, op.block = block, op.cluster = cluster, op.smem = smem;
  op.node = d.current_node;
  op.accesses = d.node_access;
  auto fit = d.functions.find(func);
  if (fit != d.functions.end()) {
    auto kit = d.kernels.find(fit->second);
    if (kit != d.kernels.end())
      for (size_t i = 0; i < kit->second.param_sizes.size(); ++i) {
        const auto* b = static_cast<const unsigned char*>(args[i]);
        op.args.emplace_back(b, b + kit->second.param_sizes[i]);
      }
  }
  if (s->capture >= 0) {
    d.graphs[s->capture].ops.push_back(op);
    return cudaSuccess;
  }
  d.submit(s);
  return ret(launch(d, op, s, false));
}
}  // namespace

#ifndef AITMOCK_HIP
AITMOCK_API cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t smem,
                                           cudaStream_t stream) {
  return launch_entry(reinterpret_cast<const void*>(k), grid, block, dim3(1, 1, 1), args, smem, stream);
}
AITMOCK_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t smem,
                                                cudaStream_t stream) {
  return __cudaLaunchKernel(k, grid, block, args, smem, stream);
}
#endif  // AITMOCK_HIP
AITMOCK_API cudaError_t cudaLaunchKernel(const void* f, dim3 grid, dim3 block, void** args, size_t smem,
                                         cudaStream_t stream) {
  return launch_entry(f, grid, block, dim3(1, 1, 1), args, smem, stream);
}
#ifndef AITMOCK_HIP  // thread block clusters: sm_90
AITMOCK_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* c, const void* f, void** args) {
  dim3 cluster(1, 1, 1);
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == cudaLaunchAttributeClusterDimension)
      cluster = dim3(c->attrs[i].val.clusterDim.x, c->attrs[i].val.clusterDim.y, c->attrs[i].val.clusterDim.z);
  return launch_entry(f, c->gridDim, c->blockDim, cluster, args, c->dynamicSmemBytes, c->stream);
}
#endif  // AITMOCK_HIP

AITMOCK_API cudaError_t cudaFuncSetAttribute(const void* f, cudaFuncAttribute attr, int value) {
  ENTER(d);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > d.smem_optin) return ret(cudaErrorInvalidValue);
    d.max_dynamic_smem[f] = value;
  }
  return cudaSuccess;
}

AITMOCK_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* f, int block,
                                                                               size_t smem, unsigned int) {
  ENTER(d);
  if (block <= 0 || block > 1024) return ret(cudaErrorInvalidValue);
  int64_t stat = 0;
  auto fit = d.functions.find(f);
  if (fit != d.functions.end() && d.kernels.count(fit->second)) stat = d.kernels[fit->second].static_smem;
  int64_t by_smem = 32;
  if (stat + (int64_t)smem > 0) by_smem = d.smem_per_sm / (stat + (int64_t)smem);
  *n = (int)std::min<int64_t>({32, d.max_threads_per_sm / block, by_smem});
  return cudaSuccess;
}

// ---- errors and device ----

AITMOCK_API cudaError_t cudaGetLastError(void) {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
AITMOCK_API cudaError_t cudaPeekAtLastError(void) { return t_last_error; }
AITMOCK_API const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    default: return "cudaErrorUnknown";
  }
}
AITMOCK_API const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorUnknown ? "mock device: an injected or unmodelled failure" : cudaGetErrorName(e);
}
AITMOCK_API cudaError_t cudaGetDeviceCount(int* n) {
  ENTER(d);
  *n = 1;
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaGetDevice(int* dv) {
  ENTER(d);
  *dv = 0;
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaSetDevice(int dv) {
  ENTER(d);
  return dv == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice);
}
AITMOCK_API cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int dv) {
  ENTER(d);
  if (dv != 0) return ret(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = d.sm_count; break;
    case cudaDevAttrComputeCapabilityMajor: *v = d.cc_major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = d.cc_minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)d.smem_optin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)d.smem_per_sm; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = d.max_threads_per_sm; break;
    case cudaDevAttrWarpSize: *v = AITMOCK_WARP_SIZE; break;
    case cudaDevAttrL2CacheSize: *v = d.cc_major >= 9 ? 50 << 20 : 40 << 20; break;
    default:
      d.fail("cudaDeviceGetAttribute(" + std::to_string((int)attr) + "): an attribute the mock does not model");
      return ret(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
#ifdef AITMOCK_HIP
// What HIP code asks of a device beyond attributes: Composable Kernel checks its instances against
// gcnArchName (ck::get_device_name) before accepting an argument.
AITMOCK_API hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int dv) {
  ENTER(d);
  if (dv != 0) return ret(hipErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "aitgen mock device");
  std::snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", d.arch_name.c_str());
  p->totalGlobalMem = d.range_hi - d.range_lo;
  p->sharedMemPerBlock = static_cast<size_t>(d.smem_optin);
  p->maxSharedMemoryPerMultiProcessor = static_cast<size_t>(d.smem_per_sm);
  p->warpSize = AITMOCK_WARP_SIZE;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = d.max_threads_per_sm;
  p->multiProcessorCount = d.sm_count;
  p->major = d.cc_major, p->minor = d.cc_minor;
  return hipSuccess;
}
// Kernel timing (Composable Kernel's invoker links it; aitgen's runs never time): no clock here.
AITMOCK_API hipError_t hipEventElapsedTime(float* ms, hipEvent_t, hipEvent_t) {
  ENTER(d);
  d.fail("hipEventElapsedTime: kernel timing, which the mock device does not model");
  if (ms) *ms = 0.f;
  return ret(hipErrorNotReady);
}
#endif  // AITMOCK_HIP
AITMOCK_API cudaError_t cudaDeviceSynchronize(void) {
  ENTER(d);
  if (capturing(d, "cudaDeviceSynchronize")) return ret(cudaErrorStreamCaptureUnsupported);
  for (Stream* s : d.streams)
    if (s) d.host_sync(s->clock);
  return cudaSuccess;
}

// ---- memory ----

AITMOCK_API cudaError_t cudaMalloc(void** p, size_t n) {
  ENTER(d);
  if (capturing(d, "cudaMalloc")) return ret(cudaErrorStreamCaptureUnsupported);
  const size_t bytes = std::max<size_t>(n, 1);
  // 256-byte aligned as cudaMalloc's, and a guard page after each, so an out-of-range pointer
  // lands in no allocation; addresses are never reused.
  // No base is a multiple of 64 KiB, and no allocation holds an address whose low 32 bits are below
  // 64 Ki: the argument scan takes words of those shapes for fields, not pointers (mock_device.cpp).
  const size_t page = 4096, span = (bytes + 2 * page - 1) / page * page;
  const uintptr_t next4g = (d.next | 0xFFFFFFFFull) + 1;   // the next 4 GiB boundary
  if (d.next + span > next4g) d.next = next4g + 0x10000;
  if ((d.next & 0xFFFF) == 0) d.next += page;
  if (d.next + span > d.range_hi) return ret(cudaErrorMemoryAllocation);
  const uintptr_t base = d.next;
  if (mprotect(reinterpret_cast<void*>(base), span - page, PROT_READ | PROT_WRITE) != 0)
    return ret(cudaErrorMemoryAllocation);
  d.next += span;
  d.allocations[base] = Allocation{base, n, true, false, ++d.allocation_serial};
  d.live_bytes += n;
  *p = reinterpret_cast<void*>(base);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaFree(void* p) {
  ENTER(d);
  if (!p) return cudaSuccess;
  auto it = d.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == d.allocations.end() || !it->second.live || it->second.host) {
    d.fail("cudaFree of " + d.describe(reinterpret_cast<uintptr_t>(p)) + ", not the start of a live device allocation");
    return ret(cudaErrorInvalidValue);
  }
  it->second.live = false;
  d.live_bytes -= it->second.bytes;
  madvise(p, it->second.bytes, MADV_DONTNEED);
  mprotect(p, std::max<size_t>(it->second.bytes, 1), PROT_NONE);  // a host read after free faults
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) {
  ENTER(d);
  if (capturing(d, "cudaHostAlloc")) return ret(cudaErrorStreamCaptureUnsupported);
  *p = std::aligned_alloc(256, (std::max<size_t>(n, 1) + 255) / 256 * 256);
  return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}
#ifndef AITMOCK_HIP  // HIP has one pinned allocation, hipHostMalloc (cudaHostAlloc's form)
AITMOCK_API cudaError_t cudaMallocHost(void** p, size_t n) { return cudaHostAlloc(p, n, 0); }
#endif
AITMOCK_API cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  ENTER(d);
  if (capturing(d, "cudaMemcpy (synchronous)")) return ret(cudaErrorStreamCaptureUnsupported);
  return copy_op(d, dst, src, n, d.streams[1], true, "cudaMemcpy");
}
AITMOCK_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t st) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  return copy_op(d, dst, src, n, s, false, "cudaMemcpyAsync");
}
AITMOCK_API cudaError_t cudaMemset(void* p, int v, size_t n) {
  ENTER(d);
  if (capturing(d, "cudaMemset (synchronous)")) return ret(cudaErrorStreamCaptureUnsupported);
  if (!range_ok(d, p, n, "cudaMemset")) return ret(cudaErrorInvalidValue);
  std::memset(p, v, n);
  return cudaSuccess;
}
AITMOCK_API cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st) {
  ENTER(d);
  Stream* s = d.stream(st);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (!range_ok(d, p, n, "cudaMemsetAsync")) return ret(cudaErrorInvalidValue);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::vector<Access> acc;
  if (n && d.is_device_address(a)) acc.push_back({a, a + n, true, 0, 0, -1, "cudaMemsetAsync"});
  copy_access(d, s, std::move(acc), "memset", "cudaMemsetAsync");
  if (n) std::memset(p, v, n);
  return cudaSuccess;
}
