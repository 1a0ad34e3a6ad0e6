// The CK device ops of the ROCm GEMM kernels (gemm_ck.hip.j2) and the names their instances use.
#ifndef AITGEN_CK_GEMM_HPP_
#define AITGEN_CK_GEMM_HPP_

#include <array>

#include "aitgen/ck_epilogue.hpp"
#include "ck/host_utility/device_prop.hpp"
#include "ck/tensor_operation/gpu/device/gemm_specialization.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_batched_gemm_multi_d_xdl.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle.hpp"
#include "ck/tensor_operation/gpu/device/tensor_layout.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"

namespace ait {
namespace ck_ext {
using Row = ck::tensor_layout::gemm::RowMajor;
using Col = ck::tensor_layout::gemm::ColumnMajor;
// Every size is a run-time argument: padding to the tile keeps one object per instance.
constexpr auto kPadAll = ck::tensor_operation::device::GemmSpecialization::MNKPadding;
}  // namespace ck_ext
}  // namespace ait

#endif  // AITGEN_CK_GEMM_HPP_
