// Host memory for the CPU backend's large, long-lived buffers: the constants, the activation arena
// and the weights prepacked for oneDNN. A model streams tens to hundreds of MB of weights through
// its GEMMs and convolutions every run; with 4 KB pages each 4 KB of a weight is its own TLB entry
// (a 100 MB model: 25,000 pages against a second-level TLB of 1,000-2,000), so the walks add to
// every weight read that misses the cache. Buffers of 2 MB and more start on a 2 MB boundary and are
// advised to the kernel as transparent huge pages (MADV_HUGEPAGE, which the usual "madvise" THP
// setting honours and "never" ignores). The advice changes no value; where it is refused the
// buffer keeps 4 KB pages.
#ifndef AITGEN_CPU_ALLOC_H_
#define AITGEN_CPU_ALLOC_H_

#include <cstddef>
#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ait {
namespace cpu {

constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` (0 allowed) aligned to at least `align` (a power of two, >= sizeof(void*)); nullptr when
// memory is short. Free with std::free.
inline void* alloc_host(size_t bytes, size_t align) {
  if (bytes == 0) bytes = align;
  void* p = nullptr;
  const bool huge = bytes >= kHugePage;
  if (posix_memalign(&p, huge ? kHugePage : align, bytes) != 0) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Only whole 2 MB extents inside the buffer can become huge pages; the advice covers them.
  if (huge) (void)madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace cpu
}  // namespace ait

#endif  // AITGEN_CPU_ALLOC_H_
