// The CPU backend's hooks of the model container: model memory is 64-byte aligned host memory, and
// a run is a plain call of the run sequence on the calling thread (kernels use OpenMP inside).
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "aitgen/backend_hooks.h"

namespace ait {
namespace hooks {

struct Runtime {};

void init() {}

bool memory_is_host() { return true; }

void* alloc(size_t bytes, const char* what) {
  // 256-byte alignment, as cudaMalloc gives: constants are placed at multiples of 256 in it, and the
  // memory plan aligns every arena offset to the target's alignment (64 here).
  size_t n = (bytes + 255) / 256 * 256;
  if (n == 0) n = 256;
  void* p = std::aligned_alloc(256, n);
  if (!p) throw std::runtime_error(std::string("out of memory allocating ") + std::to_string(n) + " bytes for " + what);
  return p;
}

void release(void* p) noexcept { std::free(p); }

void upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

Runtime* runtime_create() { return new Runtime; }

void runtime_destroy(Runtime* r) noexcept { delete r; }

void execute(Runtime*, const AitRunContext& ctx, int, int, int, void*) { ait_generated_run(&ctx); }

bool set_option(Runtime*, const char*, int64_t) { return false; }

}  // namespace hooks
}  // namespace ait
