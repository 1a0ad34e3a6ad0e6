// The oneDNN kernels as seen from a generated kernel: a static configuration (every number chosen by
// Python and rendered into the kernel's translation unit) and two entry points implemented once in
// backends/cpu/src/onednn_kernels.cpp. Keeping dnnl.hpp out of the kernels makes each of them
// compile in a fraction of a second; the implementation is compiled once and cached.
#ifndef AITGEN_ONEDNN_KERNELS_H_
#define AITGEN_ONEDNN_KERNELS_H_

#include <cstdint>

namespace ait {
namespace onednn {

// The tensors' storage type, as the C API codes it (cexpr.CODE).
enum class Storage : int { f32 = 0, f16 = 1, bf16 = 2 };

// A fused epilogue (aitgen/codegen/kernels/cpu/epilogue.py). Post-ops, when the expression has their
// form: eltwise ones (src1 < 0) with oneDNN's alpha and beta, binary ones reading p[src1] through the
// (sizes, strides) at d[md] (post_rank of each) in the coordinates of the dst descriptor. The loop
// computes the whole expression over the stored output; it runs instead of the post-ops when oneDNN
// would take them only in a slower implementation than the plain primitive, and after an empty
// reduction. Only the post-ops that keep NaN and +-inf as the op defines them: oneDNN's relu, clip,
// max and min drop NaN, gelu_erf, exp and pow(x, -0.5) get +-inf or NaN wrong, so the loop does those,
// except relu and gelu_erf under a guard (`guarded`, aitgen/onednn_guard.h): the fused primitive
// runs when the operands' magnitudes prove every value finite, else the plain one and the loop.
enum class PostAlg : int {
  gelu_tanh, tanh, logistic, swish, hardswish, linear, abs, sqrt, pow, add, sub, mul, div,
  relu,     // int8 kernels (kernels/cpu/epilogue.py INT8_RELU), or guarded
  gelu_erf,  // int8 kernels, reading the accumulator and bias alone (epilogue.py INT8_GELU), or guarded
  clip       // max(alpha, min(beta, x)), guarded
};
struct PostOp {
  PostAlg alg;
  float alpha, beta;
  int src1;
  int md;
  int src1_dt = -1;  // src1's type: -1 the destination's; int8 kernels: 1 s8, 2 u8, 3 f32 (epilogue.QDT)
};
using EpilogueLoop = void (*)(void* const* p, const int64_t* d);
struct Epilogue {
  const PostOp* post_ops;  // nullptr: the expression has no post-op form, the loop always runs
  int num_post_ops;
  int post_rank;
  EpilogueLoop loop;       // nullptr: no epilogue
  bool guarded = false;    // relu / gelu_erf post-ops, run only where the operands prove values finite
};

// Matmul (gemm, bmm). p = {out, a, b[, bias]}. d = (sizes[rank], strides[rank]) of a [.., M, K],
// b [.., K, N], out [.., M, N] and, with a bias, [1.., N]; then, when prepacking, the constants version.
struct MatmulConfig {
  Storage storage;
  bool convert;   // compute in float32 through scratch (a storage type oneDNN cannot compute in)
  int rank;
  bool has_bias;
  bool prepack;   // b is a graph constant: pack it once per constants version
  int nkey;       // dims that make the shape; d[nkey] is the constants version when prepacking
  Epilogue epilogue;  // its operands follow the bias in p
  int src_offset = -1;  // >= 0: a reads from p[1] + d[src_offset] elements (a strided view of a tensor)
  const char* name = "";  // the kernel's name in ait_onednn_impls (its function, "/i" for a group member)
  // bf16 operands, a float32 result: oneDNN stores its float32 accumulator (plus bias and post-ops)
  // unrounded, where the graph keeps the value in float32 (a residual stream under the mixed policy).
  bool f32_dst = false;
  // int8 (QGEMM, aitgen/ops/qlinear.py): 0 float; 1 s8, 2 u8 activations. The float32 `a` is
  // quantised into scratch by p[scales_ptr][0] (round-half-even, saturated), b is int8 per-channel
  // with scales p[scales_ptr + 1][N], and oneDNN dequantises through its scale attributes.
  int quant = 0;
  int scales_ptr = -1;
  // The result requantised (0 float32; 1 s8, 2 u8) by p[scales_ptr + 2][0] in oneDNN's dst scale
  // (no epilogue then); src_int8: `a` is already int8 of quant's type (a requantised producer's).
  int out_quant = 0;
  bool src_int8 = false;
  // An s8 tensor passed between int8 matmuls (an s8 requantised result, read as `a` by int8
  // matmuls only: kernels/cpu/gemm.py shifted_int8) lies as u8 = q + 128 where shift_s8_src()
  // holds, its producer storing it through oneDNN's dst zero point 128 (dst_shifted) and its readers
  // reading it with source zero point 128 (src_shifted). Both sides ask the same function, so they agree.
  bool src_shifted = false;
  bool dst_shifted = false;
};

// Convolution or transposed convolution (deconvolution), NHWC. p = {out, x, weight[, bias]}.
// d = (sizes, strides) of x [N, C, H, W] (rank 4), the weight ([O, I, KH, KW] or [G, O/G, I/G, KH,
// KW]), out [N, O, HO, WO] and, with a bias, [O]; then, when prepacking, the constants version.
struct ConvConfig {
  Storage storage;
  bool convert;
  bool transposed;
  int wei_rank;
  int64_t strides[2];
  int64_t dilates[2];  // oneDNN's: dilation - 1
  int64_t pad_l[2];
  int64_t pad_r[2];    // may be negative (a transposed conv's output_padding)
  bool has_bias;
  bool prepack;
  int nkey;
  Epilogue epilogue;
  const char* name = "";  // as MatmulConfig::name
  bool f32_dst = false;   // as MatmulConfig::f32_dst
  int quant = 0;          // as MatmulConfig::quant (QCONV2D; scales per output channel)
  int scales_ptr = -1;
  int out_quant = 0;      // as MatmulConfig::out_quant
  bool src_int8 = false;  // as MatmulConfig::src_int8
  // A float32 3x3 conv of stride 1, no dilation, one group and a constant weight, built with
  // CompileOptions.winograd: run as Winograd F(4x4, 3x3) (aitgen/cpu_winograd.h) where the run's
  // shape makes it pay (32+ channels in and out, 16+ output tiles of 4x4), else directly.
  bool winograd = false;
};

// Per-kernel primitive cache and prepacked weights; created on a kernel's first call, never freed
// (a kernel lives as long as its library, and freeing at exit would race other static teardown).
struct KernelState;
KernelState* new_state();

// bound_at >= 0: p[bound_at..] are the call's bound slots (Slots in aitgen/onednn_guard.h).
void matmul(const MatmulConfig& cfg, KernelState* state, void* const* p, const int64_t* d, int bound_at = -1);
void conv(const ConvConfig& cfg, KernelState* state, void* const* p, const int64_t* d, int bound_at = -1);

}  // namespace onednn
}  // namespace ait

// Which oneDNN implementation every primitive of this library got, for the caller to check for
// oneDNN's reference kernels (orders of magnitude slower than its jit ones, and chosen silently).
// Primitives are created at a kernel's first run with each shape, so this lists what has run so
// far in this process. One line per (kernel, primitive kind, implementation):
//   "<kernel>\t<primitive>\t<implementation>\t<first shape, src:weights:dst>\t<shapes seen>\n"
// ait_onednn_impls writes the text (NUL-terminated, cut to cap - 1 bytes) into buf and returns its
// whole length without the NUL: call it with cap 0 to size the buffer. ait_onednn_generation
// counts the primitives created so far: a caller polls it cheaply and reads the text only when it
// moved. Exported from CPU libraries only (look them up, as aitgen.runtime.Model does).
extern "C" {
__attribute__((visibility("default"))) int64_t ait_onednn_impls(char* buf, int64_t cap);
__attribute__((visibility("default"))) int64_t ait_onednn_generation(void);
__attribute__((visibility("default"))) int64_t ait_onednn_operand_scans(void);
}

#endif  // AITGEN_ONEDNN_KERNELS_H_
