// gemm rcr: Composable Kernel DeviceGemmMultipleD_Xdl_CShuffle
// (64x64 va8 vb8 vc8) with the fused epilogue as its CDE operation over 2 D tensor(s).
// out = p[0], A = p[1] (Row), B = p[2] (Col), D tensors p[3..]. d: M, N, K, batch,
// lda, ldb, lde, batch strides of A, B and the result, then each D's row and batch stride.
#include "aitgen/ck_gemm.hpp"

namespace {

using namespace ait::ck_ext;

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

using DsData = ck::Tuple<ck::half_t, ck::half_t>;
using DsLayout = ck::Tuple<Row, Row>;
constexpr int kNumD = 2;

using Instance = ck::tensor_operation::device::DeviceGemmMultipleD_Xdl_CShuffle<
    Row, Col, DsLayout, Row, ck::half_t, ck::half_t, float, float, DsData, ck::half_t,
    PassThrough, PassThrough, CdeOp<EpilogueFn>, kPadAll,
    1, 64, 64, 64, 32, 8, 8,
    32, 32, 2, 2,
    S<4, 16, 1>, S<1, 0, 2>, S<1, 0, 2>,
    2, 8, 8, 1,
    S<4, 16, 1>, S<1, 0, 2>, S<1, 0, 2>,
    2, 8, 8, 1,
    1, 1, S<1, 16, 1, 4>, 8
>;

// CK's argument from the run's pointers and sizes (apart, so a host-only test can hand it to
// IsSupportedArgument without a device).
auto make_argument(void* const* p, const int64_t* d) {
  const auto i = [d](int j) { return static_cast<ck::index_t>(d[j]); };
  std::array<const void*, kNumD> ds_ptr{};
  std::array<ck::index_t, kNumD> ds_stride{};
  for (int j = 0; j < kNumD; ++j) {
    ds_ptr[j] = p[3 + j];
    ds_stride[j] = i(10 + 2 * j);
  }
  return Instance::MakeArgument(p[1], p[2], ds_ptr, p[0], i(0), i(1), i(2), i(4), i(5), ds_stride, i(6),
                                PassThrough{}, PassThrough{}, CdeOp<EpilogueFn>{});
}

}  // namespace

AIT_KERNEL k_77247690ac7cdef1(void* const* p, const int64_t* d) {
  if (d[0] == 0 || d[1] == 0 || d[3] == 0) return;  // an empty result: nothing to launch
  auto arg = make_argument(p, d);
  run<Instance>(arg, "k_77247690ac7cdef1 (gemm rcr)", d, 14);
}
