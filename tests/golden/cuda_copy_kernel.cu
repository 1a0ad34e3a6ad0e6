// A dense byte copy on the run's stream: p[0] <- p[1], d[0] bytes (both device memory).
#include "aitgen/gpu_kernel.h"
#include "aitgen/gpu_runtime_api.h"

AIT_KERNEL k_FUNC(void* const* p, const int64_t* d) {
  if (p[0] == p[1] || d[0] <= 0) return;
  ::ait::gpu::check(cudaMemcpyAsync(p[0], p[1], static_cast<size_t>(d[0]), cudaMemcpyDeviceToDevice,
                                    ::ait::gpu::stream()),
                    "k_FUNC (copy)");
}
