// The CK device op of the ROCm fused attention (attention_ck.hip.j2): batched GEMM-softmax-GEMM
// with per-dim lengths and strides for every operand, and the names its instances use.
#ifndef AITGEN_CK_ATTENTION_HPP_
#define AITGEN_CK_ATTENTION_HPP_

#include <cstring>
#include <vector>

#include "aitgen/ck_epilogue.hpp"
#include "ck/tensor_operation/gpu/device/gemm_specialization.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_batched_gemm_softmax_gemm_permute_xdl_cshuffle.hpp"
#include "ck/tensor_operation/gpu/device/masking_specialization.hpp"
#include "ck/tensor_operation/gpu/device/tensor_specialization.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"

namespace ait {
namespace ck_ext {
using Scale = ck::tensor_operation::element_wise::Scale;
using MaskingSpec = ck::tensor_operation::device::MaskingSpecialization;
constexpr auto kTensorDefault = ck::tensor_operation::device::TensorSpecialization::Default;
// Sq, Sk, the head dims: all run-time; padding each to the tile keeps one object per instance.
constexpr auto kPadMNKO = ck::tensor_operation::device::GemmSpecialization::MNKOPadding;

// The scale travels in the dims as its float32 bits (one translation unit serves every scale).
inline float float_from_bits(int64_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace ck_ext
}  // namespace ait

#endif  // AITGEN_CK_ATTENTION_HPP_
