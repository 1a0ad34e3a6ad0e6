// gemm rcr: CUTLASS 2.x universal GEMM (sm_80 tensor cores, cp.async multistage) with the fused
// epilogue as an epilogue visitor tree. out = p[0], A = p[1] (RowMajor), B = p[2] (ColumnMajor),
// epilogue operands p[3..]. d: M, N, K, L (batch), lda, ldb, batch strides of A and B, ldd, batch
// stride of D, then the epilogue operands' strides. 1 tile configuration(s),
// picked by M at run time (aitgen.profiler chose them per M bucket).
#include "aitgen/cuda_kernel.cuh"
#include "aitgen/cuda_math.cuh"
// Order matters: visitors.hpp parses only after these two (CUTLASS 4.2).
#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/default_gemm_universal_with_visitor.h"
#include "cutlass/epilogue/threadblock/fusion/visitors.hpp"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle_streamk.h"

#include "aitgen/cutlass_evt.cuh"

#include <cstdio>
#include <exception>
#include <type_traits>

namespace {

using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using ElementD = cutlass::half_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
constexpr int kAlignA = 8;
constexpr int kAlignB = 8;
constexpr int kAlignC = 8;
using InstructionShape = cutlass::gemm::GemmShape<16, 8, 16>;

AIT_HD float ep2(float a0) { return ait::gelu_erf(a0); }
AIT_HD float ep3(float a0, float a1) { return a0 + a1; }
struct EpilogueFn {
  AIT_HD float operator()(float acc, float bias, float s1) const {
    const float s0 = acc + bias;
    const float s2 = ep2(s0);
    const float s3 = ep3(s2, s1);
    return s3;
  }
};

template <int TBM, int TBN, int TBK, int WM, int WN, int WK, int Stages, bool StreamK>
struct Gemm {
  using TB = cutlass::gemm::GemmShape<TBM, TBN, TBK>;
  using WS = cutlass::gemm::GemmShape<WM, WN, WK>;
  using ThreadMap = cutlass::epilogue::threadblock::OutputTileThreadLayout<TB, WS, ElementD, kAlignC, 1>;
  using Acc = cutlass::epilogue::threadblock::VisitorAccFetch;
  using Load0 = cutlass::epilogue::threadblock::VisitorRowBroadcast<ThreadMap, cutlass::half_t, cute::Stride<cute::_0, cute::_1, int64_t>>;
  using Load1 = cutlass::epilogue::threadblock::VisitorAuxLoad<ThreadMap, cutlass::half_t, cute::Stride<int64_t, cute::_1, int64_t>>;
  using Compute = cutlass::epilogue::threadblock::VisitorCompute<
      ait::cutlass_ext::FragmentMap<EpilogueFn>::template fn, float, float, cutlass::FloatRoundStyle::round_to_nearest>;
  using Tree = cutlass::epilogue::threadblock::Sm80EVT<Compute, Acc, Load0, Load1>;
  using Store = cutlass::epilogue::threadblock::VisitorAuxStore<ThreadMap, ElementD, cutlass::FloatRoundStyle::round_to_nearest,
                                                               cute::Stride<int64_t, cute::_1, int64_t>>;
  using Root = cutlass::epilogue::threadblock::Sm80EVT<Store, Tree>;

  // {tree {acc, loads..., compute}, store}; d_ld / d_l: the output's row and batch strides.
  static typename Root::Arguments evt_args(void* const* p, const int64_t* d, void* out, int64_t d_ld, int64_t d_l) {
    (void)p; (void)d;
    return typename Root::Arguments{
        {
            {},
            {static_cast<const cutlass::half_t*>(p[3]), cutlass::half_t(0), {cute::_0{}, cute::_1{}, int64_t(0)}},
            {static_cast<cutlass::half_t*>(p[4]), cutlass::half_t(0), {d[10], cute::_1{}, int64_t(0)}},
            {}},
        {static_cast<ElementD*>(out), {d_ld, cute::_1{}, d_l}}};
  }
  // Stream-K balances few tiles over all SMs (batch_split > 1: classic split-K); CUTLASS's Sm80 EVT
  // supports it, unlike serial/parallel split-K.
  using Swizzle = std::conditional_t<StreamK, cutlass::gemm::threadblock::ThreadblockSwizzleStreamK,
                                     cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>>;
  using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      ElementA, LayoutA, cutlass::ComplexTransform::kNone, kAlignA,
      ElementB, LayoutB, cutlass::ComplexTransform::kNone, kAlignB,
      ElementD, cutlass::layout::RowMajor, kAlignC,
      float, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      TB, WS, InstructionShape, Root, Swizzle, Stages, cutlass::arch::OpMultiplyAdd, 1>::GemmKernel;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static void run(void* const* p, const int64_t* d, int split, const char* name) {
    const bool batched = d[3] > 1;
    typename Device::Arguments args(
        batched ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(d[0]), static_cast<int>(d[1]), static_cast<int>(d[2])},
        batched ? static_cast<int>(d[3]) : split, evt_args(p, d, p[0], d[8], d[9]),
        p[1], p[2], nullptr, nullptr, d[6], d[7], 0, d[9], d[4], d[5], 0, d[8]);
    Device op;
    const cudaStream_t s = ait::cuda::stream();
    ait::cutlass_ext::check(op.can_implement(args), name, "can_implement");
    const size_t ws = Device::get_workspace_size(args);
    ait::cutlass_ext::check(op.initialize(args, ws ? ait::cuda::workspace(ws, name) : nullptr, s), name, "initialize");
    ait::cutlass_ext::check(op.run(s), name, "run");
    AIT_CHECK_LAUNCH(name);
  }
};

// sm80_64x64x32_w32x32x32_s5
using Config0 = Gemm<64, 64, 32, 32, 32, 32, 5, false>;

[[maybe_unused]] int64_t problem_m(const int64_t* d) { return d[0]; }
[[maybe_unused]] bool problem_empty(const int64_t* d) { return d[0] == 0 || d[1] == 0 || d[3] == 0; }

[[maybe_unused]] void check_pointers(void* const* p, const char* name) {
  ait::cutlass_ext::check_aligned(p[0], 16, name, "out");
  ait::cutlass_ext::check_aligned(p[1], 16, name, "a");
  ait::cutlass_ext::check_aligned(p[2], 16, name, "b");
  ait::cutlass_ext::check_aligned(p[3], 16, name, "epilogue operand 0");
  ait::cutlass_ext::check_aligned(p[4], 16, name, "epilogue operand 1");
  (void)p; (void)name;
}

}  // namespace

AIT_KERNEL k_18932b7438b13336(void* const* p, const int64_t* d) {
  if (problem_empty(d)) return;  // an empty result: nothing to launch
  const int64_t m = problem_m(d);
  check_pointers(p, "k_18932b7438b13336 (gemm rcr)");
  Config0::run(p, d, 1, "k_18932b7438b13336 (gemm rcr)");
}
