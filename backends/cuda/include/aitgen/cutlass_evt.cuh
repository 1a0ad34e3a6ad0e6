// Glue between aitgen's fused epilogue functor and CUTLASS epilogue visitor trees (EVT).
//
// A GEMM/conv epilogue renders ONCE as a scalar functor `F{}(acc, x1, x2, ...) -> float` (the same
// per-node functions the element-wise kernels call). CUTLASS's N-ary compute nodes
// (Sm80 VisitorCompute, Sm90Compute) take a one-parameter class template `ComputeFn<Frag>` that
// they apply to whole fragments (cutlass::Array<float, N>) of every child: FragmentMap<F>::fn is
// that template, mapping F over the fragment lane by lane. So one tree shape
//   Compute<FragmentMap<F>::fn>(AccFetch, loads...)
// serves every epilogue DAG, whatever its ops, and only the list of loads varies.
#ifndef AITGEN_CUTLASS_EVT_CUH_
#define AITGEN_CUTLASS_EVT_CUH_

#include <cstdint>
#include <stdexcept>
#include <string>

#include "aitgen/bad_input.hpp"
#include "aitgen/cuda_kernel.cuh"
#include "cutlass/array.h"
#include "cutlass/cutlass.h"

namespace ait {
namespace cutlass_ext {

template <class F>
struct FragmentMap {
  template <class T>
  struct fn {
    // Fragments: lane by lane. Also callable on scalars (Sm90Compute names fn<float> for its
    // argument type; a scalar call keeps that instantiation well-formed).
    template <class... Ts>
    CUTLASS_HOST_DEVICE T operator()(T const& a, Ts const&... rest) const {
      return apply(a, rest...);
    }

   private:
    template <class E, int N, class... Ts>
    CUTLASS_HOST_DEVICE static cutlass::Array<E, N> apply(cutlass::Array<E, N> const& a,
                                                          Ts const&... rest) {
      cutlass::Array<E, N> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) out[i] = F{}(a[i], rest[i]...);
      return out;
    }
    template <class... Ts>
    CUTLASS_HOST_DEVICE static float apply(float a, Ts... rest) {
      return F{}(a, rest...);
    }
  };
};

// A CUTLASS status that is not success becomes the runtime's typed error, naming the kernel and
// the step (can_implement / initialize / run), never a crash.
inline void check(cutlass::Status s, const char* kernel, const char* step) {
  if (s == cutlass::Status::kSuccess) return;
  throw std::runtime_error(std::string(kernel) + ": CUTLASS " + step + " failed: " +
                           cutlassGetStatusString(s));
}

// Vector widths are chosen at build time from the static sizes; a pointer that breaks them (a
// DLPack view at an odd offset) is bad input, reported instead of a misaligned access.
inline void check_aligned(const void* p, int bytes, const char* kernel, const char* what) {
  if (p != nullptr && bytes > 1 && (reinterpret_cast<std::uintptr_t>(p) % bytes) != 0) {
    throw ait::bad_input(std::string(kernel) + ": operand " + what + " is not " +
                             std::to_string(bytes) + "-byte aligned, as this kernel's vector "
                             "accesses need");
  }
}

}  // namespace cutlass_ext
}  // namespace ait

#endif  // AITGEN_CUTLASS_EVT_CUH_
