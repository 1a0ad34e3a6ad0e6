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
  // 64-byte alignment: the memory plan aligns every offset to 64, and vector loads want it.
  size_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  void* p = std::aligned_alloc(64, n);
  if (!p) throw std::runtime_error(std::string("out of memory allocating ") + std::to_string(n) + " bytes for " + what);
  return p;
}

void release(void* p) noexcept { std::free(p); }

void upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

Runtime* runtime_create() { return new Runtime; }

void runtime_destroy(Runtime* r) noexcept { delete r; }

void execute(Runtime*, const AitRunContext& ctx, int, int, int) { ait_generated_run(&ctx); }

bool set_option(Runtime*, const char*, int64_t) { return false; }

}  // namespace hooks
}  // namespace ait
