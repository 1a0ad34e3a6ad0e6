// The CK device op of the epilogue pass (gemm_ck_apply.hip.j2): a fused epilogue whose operands
// no D tensor can read, applied in place over a GEMM's or conv's stored result.
#ifndef AITGEN_CK_ELEMENTWISE_HPP_
#define AITGEN_CK_ELEMENTWISE_HPP_

#include <array>

#include "aitgen/ck_epilogue.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_elementwise_impl.hpp"

#endif  // AITGEN_CK_ELEMENTWISE_HPP_
