// The CK device op of the ROCm conv kernels (conv_ck.hip.j2) and the names its instances use.
#ifndef AITGEN_CK_CONV_HPP_
#define AITGEN_CK_CONV_HPP_

#include <array>

#include "aitgen/ck_epilogue.hpp"
#include "ck/host_utility/device_prop.hpp"
#include "ck/tensor_operation/gpu/device/convolution_forward_specialization.hpp"
#include "ck/tensor_operation/gpu/device/gemm_specialization.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_grouped_conv_fwd_multiple_d_xdl_cshuffle.hpp"
#include "ck/tensor_operation/gpu/device/tensor_layout.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"

namespace ait {
namespace ck_ext {
namespace conv_layout = ck::tensor_layout::convolution;
using ConvSpec = ck::tensor_operation::device::ConvolutionForwardSpecialization;
constexpr auto kConvPadAll = ck::tensor_operation::device::GemmSpecialization::MNKPadding;
// (G, N, C|K, H, W) lengths and strides of one operand, CK's order for every layout.
using Dims5 = std::array<ck::index_t, 5>;
}  // namespace ck_ext
}  // namespace ait

#endif  // AITGEN_CK_CONV_HPP_
