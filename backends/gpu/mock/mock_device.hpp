// The mock device's state: device memory (host pages in a reserved address range), streams and
// events as vector clocks, captured graphs as lists of operations, registered kernels and what
// Python told us about them, and the log of launches with the checks each one failed.
//
// Everything is behind one mutex: the mock serves correctness checks, not speed.
#ifndef AITGEN_MOCK_DEVICE_HPP_
#define AITGEN_MOCK_DEVICE_HPP_

#include "mock_api.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace aitmock {

// One vector clock entry per agent: agent 0 is the host, agent 1 the legacy default stream, then
// one per created stream. Entry a of a clock: how many operations of agent a are known complete
// (or ordered before) from where the clock stands.
using Clock = std::vector<uint64_t>;
void merge(Clock& into, const Clock& from);

struct Allocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  bool live = true;
  bool host = false;   // cudaHostAlloc/cudaMallocHost: pinned host memory, readable by kernels too
  int64_t serial = 0;  // the n-th allocation, for messages
};

struct Stream {
  int agent = 0;
  bool blocking = true;  // orders itself with the legacy stream (not cudaStreamNonBlocking)
  Clock clock;
  int capture = -1;      // the graph being captured on it, or -1
};

struct Event {
  Clock clock;
  bool recorded = false;
  int capture = -1;  // recorded on a stream being captured: a stream that waits on it joins the capture
};

// A pointer operand of a node, as the model's lowering declared it (Python: aitgen.runtime.mock).
struct Operand {
  int64_t extent = 0;  // bytes it spans at the upper bounds of its dims
  int64_t align = 1;   // the alignment its kernel requires; negative: prefers (-align), else a slower path
  bool write = false;
};

struct KernelInfo {
  std::string name;                  // mangled device name
  std::vector<int64_t> param_sizes;  // bytes of each parameter, by ordinal
  int max_threads = 0;               // __launch_bounds__, 0: none
  int64_t static_smem = 0;
  bool known = false;                // Python gave its parameters
};

// A byte range an operation read or wrote, at a point of its agent's clock.
struct Access {
  uintptr_t lo = 0, hi = 0;
  bool write = false;
  int agent = 0;
  uint64_t tick = 0;
  int64_t launch = -1;  // index in the log, or -1 for a copy
  std::string what;
};

// A recorded operation: a launch (or an async copy/memset) as submitted, kept for graphs.
struct Op {
  std::string kind;  // "kernel", "memcpy", "memset"
  const void* func = nullptr;
  dim3 grid, block, cluster;
  size_t smem = 0;
  std::vector<std::vector<unsigned char>> args;
  int node = -1;
  std::vector<Access> accesses;  // copies: their ranges
};

struct Graph {
  std::vector<Op> ops;
  bool invalid = false;
};

struct LaunchRecord {
  int64_t index = 0;
  std::string kernel;
  int node = -1;
  dim3 grid, block, cluster;
  size_t smem = 0;
  int stream = 0;
  bool from_graph = false;
  std::vector<uintptr_t> pointers;
  std::string failure;  // empty: every check passed
};

struct Device {
  std::mutex mu;
  // Properties of the simulated GPU (aitmock_configure): an A100 unless told otherwise.
  int cc_major = 8, cc_minor = 0, sm_count = 108;
  int64_t smem_optin = 166912, smem_per_sm = 167936;
  int max_threads_per_sm = 2048;
  std::string arch_name = "sm_80";  // the build's arch, as the device would name it (HIP: gcnArchName)

  uintptr_t range_lo = 0, range_hi = 0, next = 0;  // the reserved device address range
  std::map<uintptr_t, Allocation> allocations;      // by base; freed ones stay, marked dead
  int64_t allocation_serial = 0;
  size_t live_bytes = 0;

  std::vector<Stream*> streams;                     // by agent; [0] host, [1] legacy
  std::vector<Graph> graphs;
  std::map<const void*, std::string> functions;     // host stub -> device name
  std::map<std::string, KernelInfo> kernels;        // device name -> info
  std::map<const void*, int64_t> max_dynamic_smem;  // cudaFuncSetAttribute
  std::vector<std::vector<Operand>> nodes;          // the model's nodes (aitmock_set_nodes)
  int current_node = -1;
  std::vector<Access> node_access;                  // the current node's operands, as ranges

  std::vector<LaunchRecord> log;
  std::vector<std::string> failures;                // every failed check, in order
  std::vector<Access> history;                      // accesses not yet ordered before the host
  int64_t api_calls = 0, fail_at = -1;
  int64_t operands_checked = 0, operands_unpacked = 0;
  int64_t load_serial = 0;   // allocation_serial when the latest model was loaded (aitmock_model_loading)
  int64_t stale_words = 0;   // argument words into memory freed before that (unwritten fields)
  std::string scratch;                              // the last string handed to Python

  Device();
  bool is_device_address(uintptr_t p) const { return p >= range_lo && p < range_hi; }
  const Allocation* find(uintptr_t p) const;        // the allocation holding p (live or not)
  std::string describe(uintptr_t p) const;
  Stream* stream(cudaStream_t s);                   // nullptr for an unknown handle
  void fail(const std::string& what);
  void host_sync(const Clock& c);
  void submit(Stream* s);                           // order s after what the host has seen
  // A race of these accesses by an operation on s with earlier ones, described; else empty. Records them.
  std::string check_accesses(const std::vector<Access>& now, Stream* s);
};

Device& dev();
thread_local extern cudaError_t t_last_error;

std::string demangle(const std::string& name);
cudaError_t launch(Device& d, Op& op, Stream* s, bool from_graph);

// A counted API entry point: true when this call must fail (fault injection, aitmock_fail_at).
bool inject(Device& d);

// A copy or memset on stream s touching `acc`: recorded into the graph s is capturing (checked at
// each replay), else submitted and checked for races now.
void copy_access(Device& d, Stream* s, std::vector<Access> acc, const char* kind, const char* what);

// A failed call also sets the thread's last error, as the real runtime's do.
inline cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

}  // namespace aitmock

#define AITMOCK_API extern "C" __attribute__((visibility("default")))
// Every counted entry point starts so: the device, its lock, and the injected failure if due.
#define ENTER(d)                                           \
  ::aitmock::Device& d = ::aitmock::dev();                 \
  std::lock_guard<std::mutex> lock_(d.mu);                 \
  if (::aitmock::inject(d)) return ::aitmock::ret(cudaErrorUnknown)

namespace aitmock {

}  // namespace aitmock

#endif  // AITGEN_MOCK_DEVICE_HPP_
