// A float32 product with a constant weight through oneDNN's packed sgemm: the weight is packed once
// into the panels oneDNN's sgemm kernels read, and each call computes from that copy.
//
// Why: oneDNN 3.2 has no brgemm matmul for CPUs without AVX-512, so its matmul there is the sgemm-
// based `gemm:jit:f32`, which copies panels of the weight on every call. MLAS (onnxruntime) packs a
// constant weight once. With the weight streamed from memory as in a model (12 different weights in
// turn), the packed form ran BERT's and ViT's linear layers 10-17% faster on an AVX2 EPYC, 1 and 2
// threads (benchmarks/results/cpu_packed_sgemm_avx2.json). Where oneDNN has brgemm (AVX-512), the
// matmul already prepacks its weight (`any`) and this path is not taken. float16/bfloat16 storage
// computed in float32 takes it too (onednn_kernels.cpp run_sgemm: operands through float32 scratch).
//
// The functions are oneDNN's own (src/cpu/gemm/gemm_pack.hpp: what its RNN primitives use),
// exported from libdnnl but not in its public headers. They are declared weak here: with a oneDNN
// that lacks them the references are null, packed_sgemm_available() says so, and matmuls keep the
// primitive. The signatures are those of the pinned oneDNN 3.2 (3rdparty/onednn.txt); the mangled
// names carry the parameter types, so a changed signature is a missing symbol, not a wrong call.
#ifndef AITGEN_ONEDNN_SGEMM_H_
#define AITGEN_ONEDNN_SGEMM_H_

#include <cstddef>
#include <cstdint>

namespace ait {
namespace onednn {

// C = A x B in row-major terms for A [M, K] (the source), B [K, N] (the constant weight), C [M, N].
// oneDNN's sgemm is column-major, so it computes C^T [N, M] = B^T [N, K] x A^T [K, M]: the weight is
// its packed "A" matrix, the source its "B". trans/ld say how each lies ('N': column-major with that
// leading dimension, 'T': transposed), in those column-major terms.
struct SgemmPlan {
  bool on = false;
  int64_t m = 0, n = 0, k = 0;   // the row-major product's sizes
  char wei_trans = 'T';           // packed from its K-contiguous form (pack_sgemm_weight makes it)
  int64_t wei_ld = 0;
  int64_t wei_sk = 0, wei_sn = 0;  // the weight's strides as it lies, [K, N]
  char src_trans = 'N';
  int64_t src_ld = 0;
  int64_t dst_ld = 0;            // C's row stride (C's columns are contiguous)
  size_t pack_bytes = 0;         // the packed weight's size for this shape and thread count
};

// Whether libdnnl exports the packed sgemm, oneDNN runs AVX2-class (or older) kernels here (its
// AVX-512 packed sgemm crashes for small M: onednn_sgemm.cpp), and AITGEN_PACKED_SGEMM is not "0"
// (the switch exists for A/B measurements: benchmarks/ab_workdirs.py --env-old).
bool packed_sgemm_available();

// The plan for a product of these sizes and strides (rank 2 after dropping leading size-1 dims):
// on = false when a stride has no sgemm form or oneDNN advises against packing.
SgemmPlan plan_packed_sgemm(int64_t m, int64_t n, int64_t k, int64_t src_sm, int64_t src_sk, int64_t wei_sk,
                            int64_t wei_sn, int64_t dst_sm, int64_t dst_sn);

// Pack the weight (at the plan's wei_sk/wei_sn strides) into `to` (plan.pack_bytes, 64-byte aligned).
void pack_sgemm_weight(const SgemmPlan& plan, const float* wei, void* to);

// C = A x packed B (+ bias [N] at bias_stride along N, broadcast over rows), C at the plan's dst_ld.
// Throws std::runtime_error naming `kernel` if oneDNN reports a failure.
void run_packed_sgemm(const SgemmPlan& plan, const void* packed, const float* src, const float* bias,
                      int64_t bias_stride, float* dst, const char* kernel);

}  // namespace onednn
}  // namespace ait

#endif  // AITGEN_ONEDNN_SGEMM_H_
