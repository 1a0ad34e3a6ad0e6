// The CPU backend's hooks of the model container: model memory is 64-byte aligned host memory, and
// a run is a plain call of the run sequence on the calling thread (kernels use OpenMP inside).
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "aitgen/backend_hooks.h"
#include "aitgen/cpu_alloc.h"
#include "aitgen/bad_input.hpp"

namespace ait {
namespace hooks {

// num_threads: the OpenMP threads this runtime's runs use, 0 = OpenMP's default (OMP_NUM_THREADS, else
// every core). A busy neighbour on one core can make a full-width run many times slower (OpenMP's
// static split waits at each barrier for the thread that lost its core, benchmarks/cpu_contention.py);
// a user who knows cores are taken sets fewer.
struct Runtime {
  int num_threads = 0;
};

constexpr int64_t kMaxThreads = 4096;

void init() {}

bool memory_is_host() { return true; }

void* alloc(size_t bytes, const char* what) {
  // 256-byte alignment, as cudaMalloc gives: constants are placed at multiples of 256 in it, and the
  // memory plan aligns every arena offset to the target's alignment (64 here).
  // Large buffers (the constants, the arena) on huge pages where the kernel allows: cpu_alloc.h.
  size_t n = (bytes + 255) / 256 * 256;
  if (n < bytes) throw std::runtime_error(std::string("allocation size overflows for ") + what);
  void* p = ait::cpu::alloc_host(n, 256);
  if (!p) throw std::runtime_error(std::string("out of memory allocating ") + std::to_string(n) + " bytes for " + what);
  return p;
}

void release(void* p) noexcept { std::free(p); }

void upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

Runtime* runtime_create() { return new Runtime; }

void runtime_destroy(Runtime* r) noexcept { delete r; }

void execute(Runtime* r, const AitRunContext& ctx, int, int, int, void*) {
  if (r->num_threads <= 0) {
    ait_generated_run(&ctx);
    return;
  }
  // The thread count is an ICV of the calling thread: set for this run, then given back, so the
  // caller's own OpenMP code (torch shares the process's libgomp) keeps its setting. The oneDNN
  // kernels key their primitives by it (a primitive is made for a thread count).
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{omp_get_max_threads()};
  omp_set_num_threads(r->num_threads);
  ait_generated_run(&ctx);
}

bool set_option(Runtime* r, const char* name, int64_t value) {
  if (std::strcmp(name, "num_threads") != 0) return false;
  if (value < 0 || value > kMaxThreads) {
    throw ait::bad_input("num_threads must be 0 (OpenMP's default) to " + std::to_string(kMaxThreads) + ", got " +
                         std::to_string(value));
  }
  r->num_threads = static_cast<int>(value);
  return true;
}

}  // namespace hooks
}  // namespace ait
