// The GPU backends' side of the model container (aitgen/backend_hooks.h) and the run state every
// kernel reads (aitgen/cuda_kernel.cuh), for CUDA and ROCm alike: written in the CUDA runtime's
// names, which aitgen/gpu_runtime_api.h maps to HIP on ROCm (each backend's include dirs pick its
// twin of that header). Where HIP's API differs in more than a name, an `#if AITGEN_GPU_HIP` says so.
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
#include <type_traits>
#include <vector>

#include "aitgen/backend_hooks.h"
#include "aitgen/bad_input.hpp"
#include "aitgen/gpu_kernel.h"
#include "aitgen/gpu_runtime_api.h"

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
  gpu::RunState state;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Multi-stream runs: streams 1.. (index 0 is `stream`), the events that order their calls, and
  // each extra stream's workspace. Created at the first run that asks, outside any capture.
  std::vector<cudaStream_t> side;
  std::vector<cudaEvent_t> events;
  std::vector<void*> side_workspace;
  std::vector<size_t> side_workspace_bytes;
  bool capturing = false;
  bool use_graphs = false;
  std::map<std::vector<int64_t>, CapturedRun> graphs;
  // The bad-input record (device, zeroed) and its pinned host copy. `reports` turns on when a
  // kernel of this runtime's runs asks for the record at launch and stays on: a graph replay
  // skips those host calls, but its dims' first run was eager and asked.
  gpu::BadInputRecord* record = nullptr;
  gpu::BadInputRecord* record_host = nullptr;
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

namespace AIT_GPU_RUNTIME_NS {  // ait::cuda, ait::rocm: gpu_kernel.h declares the contract there
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
  const int k = r->state.stream_index;  // each stream of a multi-stream run has its own
  void*& buf = k == 0 ? r->workspace : r->side_workspace[k - 1];
  size_t& have = k == 0 ? r->workspace_bytes : r->side_workspace_bytes[k - 1];
  if (bytes <= have) return buf;
  if (r->capturing)
    throw std::runtime_error(std::string(who) + " needs " + std::to_string(bytes) + " bytes of workspace during "
                             "CUDA graph capture, where it cannot grow (" + std::to_string(have) + " bytes exist)");
  // Kernels queued earlier in this run may still read the old buffer (on this run's other streams too).
  check(cudaStreamSynchronize(r->stream), "synchronising before the workspace grows");
  for (cudaStream_t side : r->side) check(cudaStreamSynchronize(side), "synchronising before the workspace grows");
  cudaFree(buf);
  buf = nullptr;
  have = 0;
  const size_t n = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);  // whole MiB: fewer regrowths
  check(cudaMalloc(&buf, n), who);
  have = n;
  hooks::drop_graphs(r);  // they hold the old address
  return buf;
}

void streams_begin(int count, int events) {
  hooks::Runtime* r = t_current;
  if (!r) throw std::runtime_error("a multi-stream run sequence ran outside a model run");
  if (static_cast<int>(r->side.size()) + 1 < count || static_cast<int>(r->events.size()) < events + 1) {
    if (r->capturing) throw std::runtime_error("the run's streams must exist before a CUDA graph capture");
    while (static_cast<int>(r->side.size()) + 1 < count) {
      cudaStream_t s = nullptr;
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (a run's extra stream)");
      r->side.push_back(s);
      r->side_workspace.push_back(nullptr);
      r->side_workspace_bytes.push_back(0);
    }
    while (static_cast<int>(r->events.size()) < events + 1) {  // the last one forks the run
      cudaEvent_t e = nullptr;
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate (a run's event)");
      r->events.push_back(e);
    }
  }
  // Fork: every stream starts after what stream 0 holds (the wait for the caller's work).
  cudaEvent_t fork = r->events.back();
  check(cudaEventRecord(fork, r->stream), "cudaEventRecord (fork)");
  for (int i = 1; i < count; ++i) check(cudaStreamWaitEvent(r->side[i - 1], fork, 0), "cudaStreamWaitEvent (fork)");
  r->state.stream_index = 0;
  r->state.stream = r->stream;
}

void on_stream(int index) {
  hooks::Runtime* r = t_current;
  r->state.stream_index = index;
  r->state.stream = index == 0 ? r->stream : r->side[index - 1];
}

void wait_event(int event) {  // after on_stream: the call's stream waits
  hooks::Runtime* r = t_current;
  check(cudaStreamWaitEvent(r->state.stream, r->events[event], 0), "cudaStreamWaitEvent");
}

void record_event(int event) {
  hooks::Runtime* r = t_current;
  check(cudaEventRecord(r->events[event], r->state.stream), "cudaEventRecord");
}

void streams_end() {
  hooks::Runtime* r = t_current;
  // Join: stream 0 waits for each other stream's last call.
  cudaEvent_t join = r->events.back();
  for (cudaStream_t s : r->side) {
    check(cudaEventRecord(join, s), "cudaEventRecord (join)");
    check(cudaStreamWaitEvent(r->stream, join, 0), "cudaStreamWaitEvent (join)");
  }
  r->state.stream_index = 0;
  r->state.stream = r->stream;
}

}  // namespace AIT_GPU_RUNTIME_NS

namespace hooks {

using gpu::check;

void init() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) gpu::fail(err, "no usable CUDA device (cudaGetDeviceCount)");
  if (n == 0) throw std::runtime_error("no CUDA device is present");
}

bool memory_is_host() { return false; }

void* alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const size_t n = bytes > 0 ? bytes : 256;  // cudaMalloc aligns to 256 bytes
  const cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) gpu::fail(err, (std::string("cudaMalloc of ") + std::to_string(n) + " bytes for " + what).c_str());
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
  gpu::RunState& s = r->state;
  s.stream = r->stream;
  s.device = r->device;
  check(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, r->device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&s.cc_major, cudaDevAttrComputeCapabilityMajor, r->device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&s.cc_minor, cudaDevAttrComputeCapabilityMinor, r->device), "cudaDeviceGetAttribute");
  // Allocated with the runtime, never during a run (a graph capture cannot allocate).
  check(cudaMalloc(&r->record, sizeof(gpu::BadInputRecord)), "cudaMalloc of the bad-input record");
  check(cudaMemset(r->record, 0, sizeof(gpu::BadInputRecord)), "zeroing the bad-input record");
  check(cudaMallocHost(&r->record_host, sizeof(gpu::BadInputRecord)), "cudaMallocHost of the bad-input record");
  *r->record_host = gpu::BadInputRecord{};
  return r.release();
}

void runtime_destroy(Runtime* r) noexcept {
  if (!r) return;
  if (r->stream) cudaStreamSynchronize(r->stream);
  drop_graphs(r);
  if (r->workspace) cudaFree(r->workspace);
  for (cudaStream_t side : r->side) cudaStreamSynchronize(side);
  for (void* w : r->side_workspace)
    if (w) cudaFree(w);
  for (cudaEvent_t e : r->events) cudaEventDestroy(e);
  for (cudaStream_t side : r->side) cudaStreamDestroy(side);
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
  std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, cudaError_t (*)(cudaGraph_t)> owned(graph, cudaGraphDestroy);
  if (g.exec) {
#if AITGEN_GPU_HIP
    // HIP 5.2 keeps CUDA 11's form: the failing node and the result as two out-parameters.
    hipGraphNode_t failed_node = nullptr;
    hipGraphExecUpdateResult info;
    const cudaError_t updated = hipGraphExecUpdate(g.exec, graph, &failed_node, &info);
#else
    cudaGraphExecUpdateResultInfo info;
    const cudaError_t updated = cudaGraphExecUpdate(g.exec, graph, &info);
#endif
    if (updated != cudaSuccess) {  // a different topology: rebuild
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
  cudaMemsetAsync(r->record, 0, sizeof(gpu::BadInputRecord), r->stream);
  cudaStreamSynchronize(r->stream);
  cudaGetLastError();
  *r->record_host = gpu::BadInputRecord{};
}

}  // namespace

void execute(Runtime* r, const AitRunContext& ctx, int num_vars, int num_inputs, int num_outputs,
             void* caller_stream) {
  check(cudaSetDevice(r->device), "cudaSetDevice");
  gpu::CurrentRun current(r);
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
      check(cudaMemcpyAsync(r->record_host, r->record, sizeof(gpu::BadInputRecord), cudaMemcpyDeviceToHost,
                            r->stream), "reading back the bad-input record");
    check(cudaStreamSynchronize(r->stream), "running the model");
  } catch (...) {
    cudaStreamSynchronize(r->stream);  // nothing of this run may still be running after it failed
    for (cudaStream_t side : r->side) cudaStreamSynchronize(side);
    cudaGetLastError();
    if (r->reports) clear_record(r);
    throw;
  }
  if (r->reports && r->record_host->flag != 0) {
    const gpu::BadInputRecord e = *r->record_host;
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
