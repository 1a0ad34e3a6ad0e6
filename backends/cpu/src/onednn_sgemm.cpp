// oneDNN's packed sgemm for constant float32 weights: see aitgen/onednn_sgemm.h.
#include "aitgen/onednn_sgemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

// oneDNN 3.2's declarations (src/cpu/gemm/gemm_pack.hpp), weak: null when libdnnl lacks them.
// identifier 'A'/'B' names the matrix packed; trans 'N'/'T', or 'P' for a packed operand.
namespace dnnl {
namespace impl {
namespace cpu {
#define AIT_WEAK __attribute__((weak, visibility("default")))
AIT_WEAK dnnl_status_t sgemm_pack_get_size(const char* identifier, const char* transa, const char* transb,
                                           const long* M, const long* N, const long* K, const long* lda,
                                           const long* ldb, size_t* size, bool* pack);
AIT_WEAK dnnl_status_t sgemm_pack(const char* identifier, const char* transa, const char* transb, const long* M,
                                  const long* N, const long* K, const long* lda, const long* ldb, const float* src,
                                  float* dst);
AIT_WEAK dnnl_status_t sgemm_compute(const char* transa, const char* transb, const long* M, const long* N,
                                     const long* K, const float* A, const long* lda, const float* B,
                                     const long* ldb, const float* beta, float* C, const long* ldc);
#undef AIT_WEAK
}  // namespace cpu
}  // namespace impl
}  // namespace dnnl

namespace ait {
namespace onednn {

namespace {

namespace ext = dnnl::impl::cpu;

// The leading dimension of a column-major (rows x cols) matrix whose element (i, j) lies at
// i * si + j * sj, as sgemm takes it: 'N' (si == 1, ld = sj) or 'T' (sj == 1, ld = si). A size-1
// axis may have any stride. 0 when neither form fits.
bool col_major(int64_t rows, int64_t cols, int64_t si, int64_t sj, char& trans, int64_t& ld) {
  if ((si == 1 || rows == 1) && (cols == 1 || sj >= rows)) {
    trans = 'N';
    ld = cols == 1 ? rows : sj;
    return ld >= 1;
  }
  if ((sj == 1 || cols == 1) && (rows == 1 || si >= cols)) {
    trans = 'T';
    ld = rows == 1 ? cols : si;
    return ld >= 1;
  }
  return false;
}

}  // namespace

bool packed_sgemm_available() {
  static const bool ok = [] {
    const char* env = std::getenv("AITGEN_PACKED_SGEMM");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    // Only on the AVX2-class kernels it was written and checked for. With AVX-512, oneDNN 3.2's
    // packed sgemm crashes for 2..15 columns of the unpacked operand (our rows M; a standalone
    // sgemm_pack_get_size / sgemm_pack / sgemm_compute segfaults for M = 2..15 under
    // ONEDNN_MAX_CPU_ISA=AVX512_CORE on a Zen 4 EPYC, while 360 shapes up to 4 threads pass on AVX2
    // and AVX), and there the brgemm matmul prepacks its weights anyway.
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (isa != dnnl_cpu_isa_sse41 && isa != dnnl_cpu_isa_avx && isa != dnnl_cpu_isa_avx2 &&
        isa != dnnl_cpu_isa_avx2_vnni && isa != dnnl_cpu_isa_avx2_vnni_2)
      return false;
    return ext::sgemm_pack_get_size != nullptr && ext::sgemm_pack != nullptr && ext::sgemm_compute != nullptr;
  }();
  return ok;
}

SgemmPlan plan_packed_sgemm(int64_t m, int64_t n, int64_t k, int64_t src_sm, int64_t src_sk, int64_t wei_sk,
                            int64_t wei_sn, int64_t dst_sm, int64_t dst_sn) {
  SgemmPlan plan;
  if (!packed_sgemm_available() || m <= 0 || n <= 0 || k <= 0) return plan;
  plan.m = m;
  plan.n = n;
  plan.k = k;
  // Column-major terms: the weight is B^T [n, k] (element (j, p) at p * wei_sk + j * wei_sn), the
  // source A^T [k, m] ((p, i) at i * src_sm + p * src_sk), the result C^T [n, m] with unit stride
  // down its columns. The weight is packed from its K-contiguous form ('T', ld k), made first when
  // it lies otherwise: from an N-contiguous one ('N') oneDNN would pick its no-copy kernel, which
  // reads the weight in place and ran 10-15% slower than the packed form (see the header).
  plan.wei_sk = wei_sk;
  plan.wei_sn = wei_sn;
  plan.wei_trans = 'T';
  plan.wei_ld = k;
  if (!col_major(k, m, src_sk, src_sm, plan.src_trans, plan.src_ld)) return plan;
  if (!(dst_sn == 1 || n == 1) || !(m == 1 || dst_sm >= n)) return plan;
  plan.dst_ld = m == 1 ? n : dst_sm;
  const char wt[2] = {plan.wei_trans, 0}, st[2] = {plan.src_trans, 0};
  const long M = n, N = m, K = k, lda = plan.wei_ld, ldb = plan.src_ld;
  size_t size = 0;
  bool pack = false;
  if (ext::sgemm_pack_get_size("A", wt, st, &M, &N, &K, &lda, &ldb, &size, &pack) != dnnl_success) return plan;
  // pack == false: oneDNN would read this weight in place (its no-copy kernel), packing gains nothing
  plan.on = pack && size > 0;
  plan.pack_bytes = size;
  return plan;
}

void pack_sgemm_weight(const SgemmPlan& plan, const float* wei, void* to) {
  const int64_t n = plan.n, k = plan.k;
  std::vector<float> kmajor;  // [n, k], when the weight is not K-contiguous already
  if (!((plan.wei_sk == 1 || k == 1) && (n == 1 || plan.wei_sn == k))) {
    kmajor.resize(static_cast<size_t>(n) * static_cast<size_t>(k));
#pragma omp parallel for schedule(static) if (n * k > 65536)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) kmajor[j * k + p] = wei[p * plan.wei_sk + j * plan.wei_sn];
    }
    wei = kmajor.data();
  }
  const char wt[2] = {plan.wei_trans, 0}, st[2] = {plan.src_trans, 0};
  const long M = plan.n, N = plan.m, K = plan.k, lda = plan.wei_ld, ldb = plan.src_ld;
  if (ext::sgemm_pack("A", wt, st, &M, &N, &K, &lda, &ldb, wei, static_cast<float*>(to)) != dnnl_success) {
    throw std::runtime_error("oneDNN kernel: packing a float32 weight failed");
  }
}

void run_packed_sgemm(const SgemmPlan& plan, const void* packed, const float* src, const float* bias,
                      int64_t bias_stride, float* dst, const char* kernel) {
  const int64_t rows = plan.m, cols = plan.n, ldc = plan.dst_ld;
  // The bias enters as C's initial value (beta = 1): oneDNN adds it to the finished sum, as the
  // matmul primitive does, so values, NaN and infinities are the same.
  if (bias != nullptr) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t i = 0; i < rows; ++i) {
      float* row = dst + i * ldc;
      if (bias_stride == 1) {
        std::memcpy(row, bias, static_cast<size_t>(cols) * sizeof(float));
      } else {
        for (int64_t j = 0; j < cols; ++j) row[j] = bias[j * bias_stride];
      }
    }
  }
  const float beta = bias != nullptr ? 1.0f : 0.0f;
  const char st[2] = {plan.src_trans, 0};
  const long M = plan.n, N = plan.m, K = plan.k, lda = plan.wei_ld, ldb = plan.src_ld, ldc_l = ldc;
  if (ext::sgemm_compute("P", st, &M, &N, &K, static_cast<const float*>(packed), &lda, src, &ldb, &beta, dst,
                         &ldc_l) != dnnl_success) {
    throw std::runtime_error(std::string("oneDNN kernel ") + kernel + ": packed sgemm failed");
  }
}

}  // namespace onednn
}  // namespace ait
