// The CUDA backend's side of the model container (aitgen/backend_hooks.h) and the run state every
// kernel reads (aitgen/cuda_kernel.cuh).
//
// Model memory is device memory (cudaMalloc): the constants once per model, one activation arena per
// runtime. Each runtime owns one non-blocking stream, a scratch workspace, and, when the option
// "cuda_graph" is on, the CUDA graphs of its run sequence, one per set of bound dims. A run returns
// when its stream is idle, so outputs are complete and any asynchronous fault surfaces as that run's
// error, not a later one's. Each runtime also owns a device record of the first bad input (an
// index out of range) a kernel met; a run that used a reporting kernel reads it back at its end and
// fails with AIT_BAD_INPUT.
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "aitgen/backend_hooks.h"
#include "aitgen/bad_input.hpp"
#include "aitgen/cuda_kernel.cuh"

namespace ait {
namespace hooks {

// A captured run sequence for one set of bound dims. A graph bakes in every pointer and dim of
// the run, so it is replayed only for the same input/output buffers and constants version;
// otherwise it is re-captured and the executable graph updated in place (cheap) or rebuilt.
struct CapturedRun {
  cudaGraphExec_t exec = nullptr;
  std::vector<const void*> buffers;
  int64_t constants_version = -1;
  std::vector<int64_t> output_shapes;  // the host side of the run, which a replay skips
};

struct Runtime {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
  cuda::RunState state;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool capturing = false;
  bool use_graphs = false;
  std::map<std::vector<int64_t>, CapturedRun> graphs;
  // The bad-input record (device, zeroed) and its pinned host copy. `reports` turns on when a
  // kernel of this runtime's runs asks for the record at launch and stays on: a graph replay
  // skips those host calls, but its dims' first run was eager and asked.
  cuda::BadInputRecord* record = nullptr;
  cuda::BadInputRecord* record_host = nullptr;
  bool reports = false;
};

namespace {

void drop_graphs(Runtime* r) noexcept {
  for (auto& kv : r->graphs)
    if (kv.second.exec) cudaGraphExecDestroy(kv.second.exec);
  r->graphs.clear();
}

}  // namespace
}  // namespace hooks

namespace cuda {
namespace {

thread_local RunState t_idle;                   // outside a run: the legacy default stream
thread_local hooks::Runtime* t_current = nullptr;

// The runtime whose run is in progress on this thread, for the scope of one run.
struct CurrentRun {
  hooks::Runtime* previous;
  explicit CurrentRun(hooks::Runtime* r) : previous(t_current) { t_current = r; }
  ~CurrentRun() { t_current = previous; }
};

}  // namespace

RunState& run_state() { return t_current ? t_current->state : t_idle; }

BadInputRecord* bad_input_record() {
  hooks::Runtime* r = t_current;
  if (!r) return nullptr;  // outside a run: nothing to report to (the kernel then only clamps)
  r->reports = true;
  return r->record;
}

[[noreturn]] void fail(cudaError_t err, const char* what) {
  cudaGetLastError();  // clear a non-sticky error, so the next run starts clean
  throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

void* workspace(size_t bytes, const char* who) {
  hooks::Runtime* r = t_current;
  if (!r) throw std::runtime_error(std::string(who) + ": workspace asked for outside a model run");
  if (bytes <= r->workspace_bytes) return r->workspace;
  if (r->capturing)
    throw std::runtime_error(std::string(who) + " needs " + std::to_string(bytes) + " bytes of workspace during "
                             "CUDA graph capture, where it cannot grow (" + std::to_string(r->workspace_bytes) +
                             " bytes exist)");
  // Kernels queued earlier in this run may still read the old buffer.
  check(cudaStreamSynchronize(r->stream), "synchronising before the workspace grows");
  cudaFree(r->workspace);
  r->workspace = nullptr;
  r->workspace_bytes = 0;
  const size_t n = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);  // whole MiB: fewer regrowths
  check(cudaMalloc(&r->workspace, n), who);
  r->workspace_bytes = n;
  hooks::drop_graphs(r);  // they hold the old address
  return r->workspace;
}

}  // namespace cuda

namespace hooks {

using cuda::check;

void init() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) cuda::fail(err, "no usable CUDA device (cudaGetDeviceCount)");
  if (n == 0) throw std::runtime_error("no CUDA device is present");
}

bool memory_is_host() { return false; }

void* alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const size_t n = bytes > 0 ? bytes : 256;  // cudaMalloc aligns to 256 bytes
  const cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) cuda::fail(err, (std::string("cudaMalloc of ") + std::to_string(n) + " bytes for " + what).c_str());
  return p;
}

void release(void* p) noexcept {
  if (p) cudaFree(p);  // at process exit the context may be gone already: nothing to report then
}

void upload(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "uploading constants");
}

Runtime* runtime_create() {
  auto r = std::unique_ptr<Runtime, void (*)(Runtime*)>(new Runtime, [](Runtime* p) { runtime_destroy(p); });
  check(cudaGetDevice(&r->device), "cudaGetDevice");
  // Non-blocking: the run orders itself after the legacy default stream explicitly (execute), and
  // other streams' work never waits behind it.
  check(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming), "cudaEventCreate");
  cuda::RunState& s = r->state;
  s.stream = r->stream;
  s.device = r->device;
  check(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, r->device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&s.cc_major, cudaDevAttrComputeCapabilityMajor, r->device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&s.cc_minor, cudaDevAttrComputeCapabilityMinor, r->device), "cudaDeviceGetAttribute");
  // Allocated with the runtime, never during a run (a graph capture cannot allocate).
  check(cudaMalloc(&r->record, sizeof(cuda::BadInputRecord)), "cudaMalloc of the bad-input record");
  check(cudaMemset(r->record, 0, sizeof(cuda::BadInputRecord)), "zeroing the bad-input record");
  check(cudaMallocHost(&r->record_host, sizeof(cuda::BadInputRecord)), "cudaMallocHost of the bad-input record");
  *r->record_host = cuda::BadInputRecord{};
  return r.release();
}

void runtime_destroy(Runtime* r) noexcept {
  if (!r) return;
  if (r->stream) cudaStreamSynchronize(r->stream);
  drop_graphs(r);
  if (r->workspace) cudaFree(r->workspace);
  if (r->record) cudaFree(r->record);
  if (r->record_host) cudaFreeHost(r->record_host);
  if (r->ready) cudaEventDestroy(r->ready);
  if (r->stream) cudaStreamDestroy(r->stream);
  delete r;
}

namespace {

void capture(Runtime* r, CapturedRun& g, const AitRunContext& ctx, std::vector<const void*>& buffers,
             int num_outputs) {
  check(cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  r->capturing = true;
  cudaGraph_t graph = nullptr;
  try {
    ait_generated_run(&ctx);
  } catch (...) {
    r->capturing = false;
    if (cudaStreamEndCapture(r->stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  r->capturing = false;
  check(cudaStreamEndCapture(r->stream, &graph), "capturing the run sequence as a CUDA graph");
  std::unique_ptr<CUgraph_st, cudaError_t (*)(cudaGraph_t)> owned(graph, cudaGraphDestroy);
  if (g.exec) {
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(g.exec, graph, &info) != cudaSuccess) {  // a different topology: rebuild
      cudaGetLastError();
      cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
    }
  }
  if (!g.exec) check(cudaGraphInstantiate(&g.exec, graph, 0), "cudaGraphInstantiate");
  g.buffers.swap(buffers);
  g.constants_version = ctx.constants_version;
  g.output_shapes.assign(ctx.output_shapes, ctx.output_shapes + num_outputs * AIT_MAX_RANK);
}

void run_graph(Runtime* r, const AitRunContext& ctx, int num_vars, int num_inputs, int num_outputs) {
  std::vector<int64_t> dims(ctx.vars, ctx.vars + num_vars);
  auto it = r->graphs.find(dims);
  if (it == r->graphs.end()) {
    // The first run with these dims runs eagerly: workspaces reach their size outside a capture.
    ait_generated_run(&ctx);
    r->graphs.emplace(std::move(dims), CapturedRun{});
    return;
  }
  CapturedRun& g = it->second;
  std::vector<const void*> buffers(ctx.inputs, ctx.inputs + num_inputs);
  buffers.insert(buffers.end(), ctx.outputs, ctx.outputs + num_outputs);
  if (!g.exec || buffers != g.buffers || ctx.constants_version != g.constants_version) {
    capture(r, g, ctx, buffers, num_outputs);
  } else if (num_outputs > 0) {
    std::memcpy(ctx.output_shapes, g.output_shapes.data(), g.output_shapes.size() * sizeof(int64_t));
  }
  check(cudaGraphLaunch(g.exec, r->stream), "cudaGraphLaunch");
}

// Zero the record after a run that reported or failed (a reporter may have written before the
// failure), so the next run starts clean. Best effort: a context that is gone fails every run anyway.
void clear_record(Runtime* r) noexcept {
  cudaMemsetAsync(r->record, 0, sizeof(cuda::BadInputRecord), r->stream);
  cudaStreamSynchronize(r->stream);
  cudaGetLastError();
  *r->record_host = cuda::BadInputRecord{};
}

}  // namespace

void execute(Runtime* r, const AitRunContext& ctx, int num_vars, int num_inputs, int num_outputs,
             void* caller_stream) {
  check(cudaSetDevice(r->device), "cudaSetDevice");
  cuda::CurrentRun current(r);
  try {
    // Inputs may be written by work queued on the legacy default stream (torch's default stream,
    // a plain cudaMemcpy): the run starts after it. And after the caller's stream (torch's current
    // one): its work may have produced the inputs, or still use the memory the caching allocator
    // handed out for the outputs.
    check(cudaEventRecord(r->ready, cudaStreamLegacy), "cudaEventRecord");
    check(cudaStreamWaitEvent(r->stream, r->ready, 0), "cudaStreamWaitEvent");
    if (caller_stream) {
      check(cudaEventRecord(r->ready, static_cast<cudaStream_t>(caller_stream)), "cudaEventRecord on the caller's stream");
      check(cudaStreamWaitEvent(r->stream, r->ready, 0), "cudaStreamWaitEvent");
    }
    if (r->use_graphs)
      run_graph(r, ctx, num_vars, num_inputs, num_outputs);
    else
      ait_generated_run(&ctx);
    // Queued after the kernels (after the graph launch on a replay, so every replay reads it);
    // complete with the synchronisation below. Zeroing is needed only after a report.
    if (r->reports)
      check(cudaMemcpyAsync(r->record_host, r->record, sizeof(cuda::BadInputRecord), cudaMemcpyDeviceToHost,
                            r->stream), "reading back the bad-input record");
    check(cudaStreamSynchronize(r->stream), "running the model");
  } catch (...) {
    cudaStreamSynchronize(r->stream);  // nothing of this run may still be running after it failed
    cudaGetLastError();
    if (r->reports) clear_record(r);
    throw;
  }
  if (r->reports && r->record_host->flag != 0) {
    const cuda::BadInputRecord e = *r->record_host;
    clear_record(r);
    throw bad_input(std::string(e.what ? e.what : "a kernel") + ": index " + std::to_string(e.value) +
                    " (at flat position " + std::to_string(e.position) + ") is out of range for size " +
                    std::to_string(e.bound));
  }
}

bool set_option(Runtime* r, const char* name, int64_t value) {
  if (std::strcmp(name, "cuda_graph") != 0) return false;
  r->use_graphs = value != 0;
  if (!r->use_graphs) drop_graphs(r);
  return true;
}

}  // namespace hooks
}  // namespace ait
