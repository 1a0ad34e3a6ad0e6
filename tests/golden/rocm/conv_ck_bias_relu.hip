// conv2d (NHWC x OHWI, groups at run time): Composable Kernel DeviceGroupedConvFwdMultipleD_Xdl_CShuffle
// (64x64 va8 vb8 vc8, Default) with the fused epilogue as its CDE operation over 1 D tensor(s).
// out = p[0], x = p[1], w = p[2], D tensors p[3..]. d: N, H, W, C, K, R, S, P, Q, groups, stride h/w,
// dilation h/w, pad top, left, bottom, right.
#include "aitgen/ck_conv.hpp"

namespace {

using namespace ait::ck_ext;

AIT_HD float ep1(float a0) { using T = float; return (a0 > T(0) || a0 != a0 ? a0 : T(0)); }
struct EpilogueFn {
  AIT_HD float operator()(float acc, float bias) const {
    const float s0 = acc + bias;
    const float s1 = ep1(s0);
    return s1;
  }
};

using DsData = ck::Tuple<ck::half_t>;
using DsLayout = ck::Tuple<conv_layout::G_K>;
constexpr int kNumD = 1;
constexpr bool kRow[kNumD + 1] = { true, false };

using Instance = ck::tensor_operation::device::DeviceGroupedConvFwdMultipleD_Xdl_CShuffle<
    2, conv_layout::NHWGC, conv_layout::GKYXC, DsLayout, conv_layout::NHWGK, ck::half_t, ck::half_t, float, float,
    DsData, ck::half_t, PassThrough, PassThrough, CdeOp<EpilogueFn>, ConvSpec::Default, kConvPadAll,
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
  const ck::index_t n = i(0), h = i(1), w = i(2), c = i(3), k = i(4), r = i(5), s = i(6), pp = i(7), q = i(8);
  const ck::index_t g = i(9), cg = c / g, kg = k / g;
  const Dims5 a_len{g, n, cg, h, w}, a_str{cg, h * w * c, 1, w * c, c};
  const Dims5 b_len{g, kg, cg, r, s}, b_str{kg * r * s * cg, r * s * cg, 1, s * cg, cg};
  const Dims5 e_len{g, n, kg, pp, q}, e_str{kg, pp * q * k, 1, q * k, k};
  const Dims5 row_str{kg, 0, 1, 0, 0};  // a bias: one value per output channel
  std::array<const void*, kNumD> ds_ptr{};
  std::array<Dims5, kNumD> ds_len{}, ds_str{};
  for (int j = 0; j < kNumD; ++j) {
    ds_ptr[j] = p[3 + j];
    ds_len[j] = e_len;
    ds_str[j] = kRow[j] ? row_str : e_str;
  }
  return Instance::MakeArgument(p[1], p[2], ds_ptr, p[0], a_len, a_str, b_len, b_str, ds_len, ds_str, e_len, e_str,
                                {i(10), i(11)}, {i(12), i(13)}, {i(14), i(15)}, {i(16), i(17)},
                                PassThrough{}, PassThrough{}, CdeOp<EpilogueFn>{});
}

}  // namespace

AIT_KERNEL k_80fb079dde0de4b5(void* const* p, const int64_t* d) {
  if (d[0] == 0 || d[4] == 0 || d[7] == 0 || d[8] == 0) return;  // an empty result: nothing to launch
  auto arg = make_argument(p, d);
  run<Instance>(arg, "k_80fb079dde0de4b5 (conv2d)", d, 18);
}
