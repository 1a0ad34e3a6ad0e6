// Implicit-GEMM convolution fprop with an epilogue visitor tree (CUTLASS 2.x building blocks).
//
// CUTLASS 4.2 has visitor-tree epilogues for GEMMs (GemmWithEpilogueVisitor) but not for its 2.x
// convolutions, whose epilogues are fixed functors (bias + activation + one residual at most).
// This kernel joins the two: the implicit-GEMM mainloop of DefaultConv2dFprop (NHWC activations,
// KRSC = OHWI filters, [N*P*Q, K] result) and the visitor-tree epilogue of the GEMM kernels, so a
// conv takes the same general fused epilogue (bias, any activation DAG, residuals) as a GEMM.
// Its result is the row-major matrix out[N*P*Q, K]: the visitor tree sees (M, N, L) =
// (N*P*Q, K, 1), exactly as for a GEMM. Runs on sm_80 and up (also in sm_90a builds).
#ifndef AITGEN_CUTLASS_CONV_EVT_CUH_
#define AITGEN_CUTLASS_CONV_EVT_CUH_

#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/convolution.h"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/gemm/gemm.h"

#include "aitgen/cutlass_evt.cuh"

namespace ait {
namespace cutlass_ext {

// Mma: DefaultConv2dFprop<...>::Kernel::Mma; Epilogue: EpilogueWithVisitorCallbacks over that
// kernel's default epilogue and the visitor tree; Swizzle: a GEMM threadblock swizzle.
template <class Mma_, class Epilogue_, class Swizzle_>
struct Conv2dFpropEvt {
  using Mma = Mma_;
  using Epilogue = Epilogue_;
  using ThreadblockSwizzle = Swizzle_;
  using FusionCallbacks = typename Epilogue::FusionCallbacks;
  static constexpr int kThreadCount = 32 * Mma::WarpCount::kCount;
  static constexpr cutlass::conv::Operator kOperator = cutlass::conv::Operator::kFprop;

  struct Params {
    cutlass::conv::Conv2dProblemSize problem_size;
    cutlass::gemm::GemmCoord grid_tiled_shape;
    int swizzle_log_tile = 0;
    int gemm_k_iterations = 0;
    int gemm_k_iterations_per_channel = 0;
    typename Mma::IteratorA::Params iterator_A;
    typename Mma::IteratorA::Element const* ptr_A = nullptr;
    typename Mma::IteratorB::Params iterator_B;
    typename Mma::IteratorB::Element const* ptr_B = nullptr;
    typename FusionCallbacks::Params output_op;
    cute::Shape<int32_t, int32_t, int32_t> problem_shape;  // the epilogue's (M, N, L)
  };

  union SharedStorage {
    typename Mma::SharedStorage main_loop;
    typename Epilogue::SharedStorage epilogue;
  };

  static Params make_params(cutlass::conv::Conv2dProblemSize const& ps, void const* x, void const* w,
                            typename FusionCallbacks::Arguments const& evt) {
    using LayoutA = typename Mma::IteratorA::Layout;
    using LayoutB = typename Mma::IteratorB::Layout;
    Params p;
    p.problem_size = ps;
    const cutlass::gemm::GemmCoord gemm = cutlass::conv::implicit_gemm_problem_size(kOperator, ps);
    const auto extent_a = cutlass::conv::implicit_gemm_tensor_a_extent(kOperator, ps);
    const auto extent_b = cutlass::conv::implicit_gemm_tensor_b_extent(kOperator, ps);
    p.iterator_A = Mma::IteratorA::getParams(ps, LayoutA::packed(extent_a));
    p.iterator_B = typename Mma::IteratorB::Params(ps, LayoutB::packed(extent_b));
    p.ptr_A = static_cast<typename Mma::IteratorA::Element const*>(x);
    p.ptr_B = static_cast<typename Mma::IteratorB::Element const*>(w);
    p.gemm_k_iterations = cutlass::conv::implicit_gemm_k_iterations(
        kOperator, Mma::Shape::kK, ps, Mma::IteratorA::kIteratorAlgorithm, cutlass::conv::GroupMode::kNone,
        Mma::Shape::kN);
    p.gemm_k_iterations_per_channel =
        cutlass::conv::implicit_gemm_k_iterations_per_channel(kOperator, ps, Mma::IteratorA::kIteratorAlgorithm);
    ThreadblockSwizzle swizzle;
    p.grid_tiled_shape = swizzle.get_tiled_shape(gemm, {Mma::Shape::kM, Mma::Shape::kN, Mma::Shape::kK}, 1);
    p.swizzle_log_tile = swizzle.get_log_tile(p.grid_tiled_shape);
    p.output_op = FusionCallbacks::to_underlying_arguments(gemm, evt, nullptr);
    p.problem_shape = cute::make_shape(gemm.m(), gemm.n(), 1);
    return p;
  }

  CUTLASS_DEVICE void operator()(Params const& params, SharedStorage& shared_storage) {
    ThreadblockSwizzle swizzle;
    cutlass::gemm::GemmCoord tile = swizzle.get_tile_offset(params.swizzle_log_tile);
    if (params.grid_tiled_shape.m() <= tile.m() || params.grid_tiled_shape.n() <= tile.n()) return;
    const int thread_idx = threadIdx.x;
    typename Mma::IteratorA iterator_A(params.iterator_A, params.problem_size, params.ptr_A, thread_idx,
                                       cutlass::MatrixCoord(tile.m() * Mma::Shape::kM, tile.k() * Mma::Shape::kK));
    typename Mma::IteratorB iterator_B(params.iterator_B, params.problem_size, params.ptr_B, thread_idx,
                                       cutlass::MatrixCoord(tile.k() * Mma::Shape::kK, tile.n() * Mma::Shape::kN));
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int lane_idx = threadIdx.x % 32;
    Mma mma(shared_storage.main_loop, thread_idx, warp_idx, lane_idx);
    typename Mma::FragmentC accumulators;
    accumulators.clear();
    mma(params.gemm_k_iterations, accumulators, iterator_A, iterator_B, accumulators,
        params.gemm_k_iterations_per_channel);
    // The main loop's shared memory is reused by the epilogue (a union): Epilogue syncs first.
    Epilogue epilogue(params.output_op, shared_storage.epilogue, thread_idx, warp_idx, lane_idx);
    epilogue(accumulators, tile, params.problem_shape, thread_idx);
  }

  static void launch(Params const& params, cudaStream_t stream, const char* name) {
    ThreadblockSwizzle swizzle;
    const dim3 grid = swizzle.get_grid_shape(params.grid_tiled_shape);
    const int smem = static_cast<int>(sizeof(SharedStorage));
    if (smem >= (48 << 10)) {
      ait::cuda::check(cudaFuncSetAttribute(cutlass::Kernel<Conv2dFpropEvt>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                       name);
    }
    cutlass::Kernel<Conv2dFpropEvt><<<grid, kThreadCount, smem, stream>>>(params);
  }
};

}  // namespace cutlass_ext
}  // namespace ait

#endif  // AITGEN_CUTLASS_CONV_EVT_CUH_
