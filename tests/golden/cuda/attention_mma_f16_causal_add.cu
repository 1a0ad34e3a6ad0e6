// Fused scaled-dot-product attention on tensor cores (sm_80 and sm_90a alike: mma.sync m16n8k16):
// out = softmax(q k^T * scale + mask) v, mask: add, causal: True,
// head dim 64, ait::half storage, float32 accumulation and softmax statistics.
// Flash-attention style: one CTA per (batch item, tile of 16 queries), warps: 1, 16 query
// rows each. The query tile stays in shared memory, read as mma A fragments; key and value tiles of
// 64 rows stream through a two-stage shared-memory ring with cp.async: the loads of tile j + 1
// are in flight while tile j is computed (at 128 keys, every load is issued before the first
// wait, so a short sequence waits on memory once). Scores never leave registers: the Q.K^T
// accumulators become, rounded to ait::half, the A fragments of P.V. Softmax runs online in base 2
// (running max and sum per row, in float32). The run-time arguments are those of
// backends/cpu/templates/attention.cpp.j2 (aitgen/codegen/kernels/attention.py: attention_args).
#include "aitgen/cuda_attention.cuh"
#include "aitgen/cuda_kernel.cuh"

namespace {
using T = ait::half;
using M = ait::half;
constexpr int RB = 2;
constexpr int HD = 64;    // head dim of q, k and v
constexpr int WARPS = 1;
constexpr int BM = 16 * WARPS;        // queries per CTA
constexpr int BN = 64;     // keys per shared-memory tile
constexpr int THREADS = 32 * WARPS;
constexpr int CH = HD / 8;            // 16-byte chunks per tile row
// Shared memory: the query tile, then two stages of (key tile, value tile).
constexpr int SMEM_BYTES = (BM + 4 * BN) * HD * static_cast<int>(sizeof(T));
using Args = ait::attn::Args<RB>;
static_assert(CH % 8 == 0, "the swizzle permutes 8 chunks: head dim must be a multiple of 64");
static_assert(BN % 16 == 0, "keys come in 16-key mma steps");

// Tile element (r, c) of a [rows][HD] shared tile: the 16-byte chunk index is XORed with r % 8,
// so the 8 rows one ldmatrix phase reads at the same column sit in 8 different bank groups.
__device__ __forceinline__ int swz(int r, int chunk) { return r * HD + ((chunk ^ (r & 7)) << 3); }

// Rows [0, n) of a row-major [*, HD] matrix (row stride rs) into a shared tile of ROWS rows;
// rows n..ROWS-1 become zeros, so tails never feed garbage (or NaN) into the products.
template <int ROWS>
__device__ __forceinline__ void load_tile(T* s, const T* g, int64_t rs, int64_t n, bool vec) {
  for (int c = threadIdx.x; c < ROWS * CH; c += THREADS) {
    const int r = c / CH, ch = c % CH;
    T* dst = s + swz(r, ch);
    const T* src = g + r * rs + ch * 8;
    if (vec) {
      ait::attn::cp_async16(dst, r < n ? src : g, r < n ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = r < n ? src[e] : ait::from_f32<T>(0.0f);
    }
  }
}

__global__ void __launch_bounds__(THREADS)
attention_kernel(const Args a, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 T* __restrict__ o, const M* __restrict__ mask, bool vec) {
  AIT_ATTN_SMEM(smem);
  T* const sq = reinterpret_cast<T*>(smem);  // the query tile, later the output staging tile
  T* const skv = sq + BM * HD;               // stage s: keys at skv + 2s BN HD, values after them
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // mma fragment coordinates: row group, column pair
  const int64_t b = blockIdx.x / a.nqb;
  // Tiles further down see more keys: start those first so the short ones fill the tail.
  const int64_t m0 = (a.nqb - 1 - blockIdx.x % a.nqb) * BM;
  int64_t off[5];
  a.offsets(b, off);
  const int64_t nq = ait::attn::imin(BM, a.sq - m0);
  const T* kp = k + off[1];
  const T* vp = v + off[2];
  // Top-left causal: query i sees keys j <= i, so key tiles past the tile's last query are skipped.
  const int64_t kend = ait::attn::imin(a.sk, m0 + BM);
  const int64_t nblk = (kend + BN - 1) / BN;
  // Scores are kept pre-multiplied by log2(e): the softmax uses exp2 (one SFU op per element).
  const float scale_log2 = a.scale * ait::attn::kLog2e;

  // One cp.async group per key tile j (the query tile rides with tile 0). Without keys nothing is
  // loaded: the rows are zeros, and no copy may still be landing in the staging tile.
  if (nblk > 0) {
    load_tile<BM>(sq, q + off[0] + m0 * a.q_rs, a.q_rs, nq, vec);
    load_tile<BN>(skv, kp, a.k_rs, ait::attn::imin(BN, a.sk), vec);
    load_tile<BN>(skv + BN * HD, vp, a.v_rs, ait::attn::imin(BN, a.sk), vec);
    ait::attn::cp_async_commit();
  }

  float acc[HD / 8][4];  // output rows g and g + 8, columns 8 * i + 2 * t4 + {0, 1}
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of rows g and g + 8 (log2 units)
  float row_sum[2] = {0.0f, 0.0f};            // this thread's share of the running sums
  const int64_t row0 = m0 + warp * 16 + g;    // the rows this thread holds: row0 and row0 + 8
  // Mask rows of row0 and row0 + 8; rows past Sq read the last row (their results are dropped).
  const M* const mrow[2] = {mask + off[4] + ait::attn::imin(row0, a.sq - 1) * a.m_sq,
                            mask + off[4] + ait::attn::imin(row0 + 8, a.sq - 1) * a.m_sq};

  for (int64_t jb = 0; jb < nblk; ++jb) {
    const int64_t j0 = jb * BN;
    if (jb + 1 < nblk) {  // prefetch tile j + 1 into the other stage (freed by the last barrier)
      T* const nk_s = skv + ((jb + 1) & 1) * 2 * BN * HD;
      const int64_t rows = ait::attn::imin(BN, a.sk - j0 - BN);
      load_tile<BN>(nk_s, kp + (j0 + BN) * a.k_rs, a.k_rs, rows, vec);
      load_tile<BN>(nk_s + BN * HD, vp + (j0 + BN) * a.v_rs, a.v_rs, rows, vec);
      ait::attn::cp_async_commit();
      ait::attn::cp_async_wait<1>();  // tile j has landed; j + 1 may still be in flight
    } else {
      ait::attn::cp_async_wait<0>();
    }
    __syncthreads();  // tile j, written by every thread's copies, is visible to all
    const T* const kt = skv + (jb & 1) * 2 * BN * HD;
    const T* const vt = kt + BN * HD;

    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      // This warp's 16 query rows, head dims 16kk..16kk+15, as an A fragment. Reloaded from shared
      // memory each tile rather than held: at head dim 128 the registers go to the accumulators.
      uint32_t qf[4];
      ait::attn::ldmatrix_x4(qf, sq + swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 2 + (lane >> 4)));
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {  // two 8-key n-tiles per ldmatrix
        uint32_t bf[4];
        ait::attn::ldmatrix_x4(bf, kt + swz(np * 16 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1)));
        ait::attn::mma16816<T>(s[2 * np], qf, bf[0], bf[1]);
        ait::attn::mma16816<T>(s[2 * np + 1], qf, bf[2], bf[3]);
      }
    }

    // Only tiles that reach past the last key or the diagonal need per-element bounds, kept
    // in 32 bits relative to the tile: keys of this tile below nk exist, and key c sees row r when c <= r.
    const int nk = static_cast<int>(ait::attn::imin(BN, a.sk - j0));
    const int diag = static_cast<int>(ait::attn::imax(ait::attn::imin(row0 - j0, BN), -16));
    const bool edge = nk < BN || j0 + BN - 1 > m0 + warp * 16;
    const M* const mb[2] = {mrow[0] + j0, mrow[1] + j0};
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = i * 8 + 2 * t4 + (e & 1);  // key j0 + c, row row0 + 8 * (e >> 1)
        float x = s[i][e] * scale_log2;
        // Keys past Sk read the last key's entry (they are removed below).
        const M mv = mb[e >> 1][edge ? (c < nk ? c : nk - 1) : c];
        x += ait::to_f32(mv) * ait::attn::kLog2e;
        if (edge && (c >= nk || c > diag + (e >> 1) * 8)) x = -INFINITY;
        s[i][e] = x;
      }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g and g + 8
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(s[i][2 * h], s[i][2 * h + 1]));
      // A row lives in the 4 lanes of a quad.
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[h], mx);
      // A row with no attendable key yet keeps max -inf: exps against 0 give 0, never NaN.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = ait::attn::exp2_approx(row_max[h] - base);
      row_max[h] = m_new;
      float psum = 0.0f;
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) {
        s[i][2 * h] = ait::attn::exp2_approx(s[i][2 * h] - base);
        s[i][2 * h + 1] = ait::attn::exp2_approx(s[i][2 * h + 1] - base);
        psum += s[i][2 * h] + s[i][2 * h + 1];
      }
      row_sum[h] = row_sum[h] * corr + psum;
#pragma unroll
      for (int i = 0; i < HD / 8; ++i) {
        acc[i][2 * h] *= corr;
        acc[i][2 * h + 1] *= corr;
      }
    }

#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // The C fragments of n-tiles 2kk and 2kk+1 are, element for element, the A fragment of
      // keys 16kk..16kk+15.
      const uint32_t pf[4] = {ait::attn::pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                              ait::attn::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              ait::attn::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              ait::attn::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {  // two 8-column n-tiles of the output per ldmatrix
        uint32_t bf[4];
        ait::attn::ldmatrix_x4_trans(bf, vt + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4)));
        ait::attn::mma16816<T>(acc[2 * dp], pf, bf[0], bf[1]);
        ait::attn::mma16816<T>(acc[2 * dp + 1], pf, bf[2], bf[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage: the next iteration refills it
  }

  // Normalise, round, and stage this warp's 16 rows in its own rows of the query tile (only this
  // warp reads them, and it is done), then store whole 16-byte row chunks.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = row_sum[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    // A row with every key removed has sum 0 and yields zeros, as the reference does.
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int r = warp * 16 + g + h * 8;
#pragma unroll
    for (int i = 0; i < HD / 8; ++i)
      *reinterpret_cast<uint32_t*>(sq + swz(r, i) + 2 * t4) =
          ait::attn::pack2<T>(acc[i][2 * h] * inv, acc[i][2 * h + 1] * inv);
  }
  ait::attn::warp_sync();
  T* op = o + off[3];
  for (int c = lane; c < 16 * CH; c += 32) {
    const int r = warp * 16 + c / CH, ch = c % CH;
    if (m0 + r >= a.sq) continue;
    const T* src = sq + swz(r, ch);
    T* dst = op + (m0 + r) * a.o_rs + ch * 8;
    if (vec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = src[e];
    }
  }
}
}  // namespace

AIT_KERNEL k_b586b837e4c21bb8(void* const* p, const int64_t* d) {
  const Args a = Args::read(d, BM, false);
  const int64_t work = a.batch * a.nqb;
  if (work == 0) return;
  if (work > INT32_MAX) ait::cuda::fail(cudaErrorInvalidConfiguration, "attention: more than 2^31 query tiles");
  const bool vec = a.rows_aligned(p);
  const M* mask = static_cast<const M*>(p[4]);
  // The lowering keeps SMEM_BYTES within what every sm_80+ GPU allows.
  ait::attn::opt_in_smem(attention_kernel, SMEM_BYTES, "attention: opting in to shared memory");
  attention_kernel<<<static_cast<unsigned>(work), THREADS, SMEM_BYTES, ait::cuda::stream()>>>(
      a, static_cast<const T*>(p[1]), static_cast<const T*>(p[2]), static_cast<const T*>(p[3]),
      static_cast<T*>(p[0]), mask, vec);
  AIT_CHECK_LAUNCH("attention (tensor cores, head dim 64)");
}
