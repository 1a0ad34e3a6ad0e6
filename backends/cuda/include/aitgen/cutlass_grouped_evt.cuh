// Grouped GEMM with an epilogue visitor tree: several independent GEMMs (horizontal fusion) in one
// launch, each with its own operands, sizes and epilogue operands, all sharing one tile config,
// one dtype/layout and one epilogue functor.
//
// CUTLASS's GemmGrouped takes only a thread-level epilogue functor (acc and one source matrix),
// which cannot read a bias or any other broadcast operand; its visitor-tree GEMM handles one
// problem. This kernel combines the pieces: a 1-D grid over the tiles of every member, each CTA
// finds its member by the tile prefix sums, then runs the CUTLASS 2.x mainloop and visitor-tree
// epilogue (GemmWithEpilogueVisitor's Mma and Epilogue) on that member's parameters. The member
// table travels in the kernel parameters (CUDA 12.1+ allows 32 KB on sm_70+), so a launch needs no
// host-to-device copy and CUDA-graph capture sees it by value.
#ifndef AITGEN_CUTLASS_GROUPED_EVT_CUH_
#define AITGEN_CUTLASS_GROUPED_EVT_CUH_

#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/matrix_coord.h"

#include "aitgen/cutlass_evt.cuh"

namespace ait {
namespace cutlass_ext {

// GemmKernel: a DefaultGemmWithVisitor<...>::GemmKernel (for its Mma and Epilogue); kGroups: the
// number of members (static, from the graph).
template <class GemmKernel, int kGroups>
struct GemmGroupedEvt {
  using Mma = typename GemmKernel::Mma;
  using Epilogue = typename GemmKernel::Epilogue;
  using FusionCallbacks = typename Epilogue::FusionCallbacks;
  using LayoutA = typename Mma::IteratorA::Layout;
  using LayoutB = typename Mma::IteratorB::Layout;
  static constexpr int kThreadCount = GemmKernel::kThreadCount;

  struct Member {
    int m = 0, n = 0, k = 0;
    int tiles_n = 0;      // tiles along N
    int tile_start = 0;   // the member's first tile in the grid
    typename Mma::IteratorA::Params params_A;
    typename Mma::IteratorA::Element const* ptr_A = nullptr;
    typename Mma::IteratorB::Params params_B;
    typename Mma::IteratorB::Element const* ptr_B = nullptr;
    typename FusionCallbacks::Params output_op;
  };

  struct Params {
    Member members[kGroups];
    int total_tiles = 0;
  };

  union SharedStorage {
    typename Mma::SharedStorage main_loop;
    typename Epilogue::SharedStorage epilogue;
  };

  // One member's part of the table; call for i = 0..kGroups-1 in order, then launch.
  static void set_member(Params& p, int i, int m, int n, int k, int64_t lda, int64_t ldb, void const* a, void const* b,
                         typename FusionCallbacks::Arguments const& evt) {
    Member& g = p.members[i];
    g.m = m;
    g.n = n;
    g.k = k;
    g.tiles_n = (n + Mma::Shape::kN - 1) / Mma::Shape::kN;
    g.tile_start = p.total_tiles;
    g.params_A = typename Mma::IteratorA::Params(LayoutA(lda));
    g.params_B = typename Mma::IteratorB::Params(LayoutB(ldb));
    g.ptr_A = static_cast<typename Mma::IteratorA::Element const*>(a);
    g.ptr_B = static_cast<typename Mma::IteratorB::Element const*>(b);
    g.output_op = FusionCallbacks::to_underlying_arguments(cutlass::gemm::GemmCoord(m, n, k), evt, nullptr);
    p.total_tiles += ((m + Mma::Shape::kM - 1) / Mma::Shape::kM) * g.tiles_n;
  }

  CUTLASS_DEVICE void operator()(Params const& params, SharedStorage& shared_storage) {
    const int tile = blockIdx.x;
    int gi = 0;
    // kGroups is small (<= 64): a scan is cheaper than a search's divergence.
    CUTLASS_PRAGMA_NO_UNROLL
    for (int i = 1; i < kGroups; ++i) gi = tile >= params.members[i].tile_start ? i : gi;
    Member const& g = params.members[gi];
    const int local = tile - g.tile_start;
    const cutlass::gemm::GemmCoord tile_offset(local / g.tiles_n, local % g.tiles_n, 0);
    const int thread_idx = threadIdx.x;
    typename Mma::IteratorA iterator_A(g.params_A, const_cast<typename Mma::IteratorA::Element*>(g.ptr_A),
                                       {g.m, g.k}, thread_idx, {tile_offset.m() * Mma::Shape::kM, 0});
    typename Mma::IteratorB iterator_B(g.params_B, const_cast<typename Mma::IteratorB::Element*>(g.ptr_B),
                                       {g.k, g.n}, thread_idx, {0, tile_offset.n() * Mma::Shape::kN});
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int lane_idx = threadIdx.x % 32;
    Mma mma(shared_storage.main_loop, thread_idx, warp_idx, lane_idx);
    typename Mma::FragmentC accumulators;
    accumulators.clear();
    const int k_iterations = (g.k + Mma::Shape::kK - 1) / Mma::Shape::kK;
    mma(k_iterations, accumulators, iterator_A, iterator_B, accumulators);
    Epilogue epilogue(g.output_op, shared_storage.epilogue, thread_idx, warp_idx, lane_idx);
    epilogue(accumulators, tile_offset, cute::make_shape(g.m, g.n, 1), thread_idx);
  }

  static void launch(Params const& params, cudaStream_t stream, const char* name) {
    if (params.total_tiles == 0) return;
    const int smem = static_cast<int>(sizeof(SharedStorage));
    if (smem >= (48 << 10)) {
      ait::cuda::check(cudaFuncSetAttribute(cutlass::Kernel<GemmGroupedEvt>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                       name);
    }
    cutlass::Kernel<GemmGroupedEvt><<<params.total_tiles, kThreadCount, smem, stream>>>(params);
  }
};

}  // namespace cutlass_ext
}  // namespace ait

#endif  // AITGEN_CUTLASS_GROUPED_EVT_CUH_
