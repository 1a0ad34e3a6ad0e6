// The ROCm grouped GEMM (gemm_ck_grouped.hip.j2): CK's grouped XDL machinery, launched our way.
//
// CK's DeviceGroupedGemm_Xdl builds one descriptor per member on the host (GemmBiasTransKernelArg:
// pointers, padded tensor descriptors, the block -> tile map and the member's block range) and
// its Invoker copies them into a device workspace with a synchronous hipMemcpy before the launch:
// that copy is not ordered on the run's stream and cannot be captured in a HIP graph. Here the
// descriptors travel BY VALUE in the kernel's arguments (GroupedArgs, at most 4 KB: the size the
// HIP runtime guarantees for a kernel's arguments), so a launch is one hipLaunchKernelGGL on the
// runtime's stream with nothing before it: ordered, capturable, and no workspace.
//
// CK's Argument still computes the descriptors (its constructor drops a member GridwiseGemm's
// CheckValidity refuses, which IsSupportedArgument then reports), and the kernel body is
// kernel_grouped_gemm_xdl's: find the member owning this block, run GridwiseGemm::Run on it.
// HasMainKBlockLoop is a template argument of Run, one per launch: Python puts in one launch only
// members whose K agrees on it (K > KPerBlock), and the host checks it again before launching.
#ifndef AITGEN_CK_GROUPED_HPP_
#define AITGEN_CK_GROUPED_HPP_

#include <array>
#include <string>
#include <vector>

#include "aitgen/ck_gemm.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_grouped_gemm_xdl.hpp"

namespace ait {
namespace ck_ext {

// Kernel arguments of HIP (clang's amdgpu kernarg segment as the ROCm runtime sizes it): 4 KB.
constexpr size_t kMaxKernelArgBytes = 4096;

template <typename DeviceOp, int N>
struct GroupedArgs {
  typename DeviceOp::GemmBiasTransKernelArg desc[N];
  ck::index_t count;  // members that launch (N unless every member is empty)
};

template <typename DeviceOp, int N, bool HasMainKBlockLoop, typename CDEOp>
__global__ void
#if CK_USE_LAUNCH_BOUNDS
    __launch_bounds__(CK_MAX_THREAD_PER_BLOCK, CK_MIN_BLOCK_PER_CU)
#endif
        kernel_grouped_gemm_by_value(const GroupedArgs<DeviceOp, N> args, const CDEOp cde_op) {
#if (!defined(__HIP_DEVICE_COMPILE__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__))
  using GridwiseGemm = typename DeviceOp::GridwiseGemm;
  __shared__ char p_shared[GridwiseGemm::GetSharedMemoryNumberOfByte()];
  const ck::index_t block = ck::get_block_1d_id();
  // Members own consecutive block ranges in order; N is small (a few), so a linear walk.
  int g = 0;
  while (g + 1 < args.count && block >= args.desc[g].BlockEnd_) ++g;
  const auto& d = args.desc[g];
  GridwiseGemm::template Run<HasMainKBlockLoop>(
      d.a_ptr_, d.b_ptr_, d.ds_ptr_, d.e_ptr_, p_shared, PassThrough{}, PassThrough{}, cde_op,
      d.a_grid_desc_ak0_m_ak1_, d.b_grid_desc_bk0_n_bk1_, d.ds_grid_desc_mblock_mperblock_nblock_nperblock_,
      d.e_grid_desc_mblock_mperblock_nblock_nperblock_, d.block_2_etile_map_);
#else
  (void)args;
  (void)cde_op;
#endif
}

// Runs one grouped launch of N members on the runtime's stream. As run() (ck_epilogue.hpp):
// CK's IsSupportedArgument first (remembered per (device, dims)), refusals and launch errors as
// std::runtime_error naming the kernel.
template <typename DeviceOp, int N, int BlockSize, bool HasMainKBlockLoop, typename CDEOp>
void run_grouped(typename DeviceOp::Argument& arg, const CDEOp& cde_op, const char* name, const int64_t* d,
                 int n_dims) {
  using Args = GroupedArgs<DeviceOp, N>;
  static_assert(sizeof(Args) <= kMaxKernelArgBytes,
                "grouped GEMM descriptors exceed the kernel-argument limit: lower MAX members per launch");
  check_supported<DeviceOp>(arg, name, d, n_dims);
  const auto& descs = arg.gemm_desc_kernel_arg_;
  if (descs.empty()) return;  // every member empty (they share M): nothing to launch
  if (descs.size() != static_cast<size_t>(N))
    throw std::runtime_error(std::string(name) + ": " + std::to_string(descs.size()) + " of " + std::to_string(N) +
                             " grouped GEMM members are non-empty; the members share M");
  Args args{};
  for (int i = 0; i < N; ++i) {
    const auto& a = descs[i].a_grid_desc_ak0_m_ak1_;
    const ck::index_t k = a.GetLength(ck::Number<0>{}) * a.GetLength(ck::Number<2>{});
    if (DeviceOp::GridwiseGemm::CalculateHasMainKBlockLoop(k) != HasMainKBlockLoop)
      throw std::runtime_error(std::string(name) + ": member " + std::to_string(i) + " (K " + std::to_string(k) +
                               ") disagrees with the launch's K-loop kind; the build grouped it wrongly");
    args.desc[i] = descs[i];
  }
  args.count = N;
  hipLaunchKernelGGL((kernel_grouped_gemm_by_value<DeviceOp, N, HasMainKBlockLoop, CDEOp>), dim3(arg.grid_size_),
                     dim3(BlockSize), 0, ::ait::gpu::stream(), args, cde_op);
  const hipError_t err = hipGetLastError();
  if (err != hipSuccess) throw std::runtime_error(std::string(name) + ": " + hipGetErrorString(err));
}

}  // namespace ck_ext
}  // namespace ait

#endif  // AITGEN_CK_GROUPED_HPP_
