// Winograd F(4x4, 3x3) for float32 convolutions with 3x3 windows, stride 1 and no dilation, NHWC
// (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015). A 4x4 output tile takes
// 36 products per channel pair where the direct form takes 144: the convolution becomes 36 batched
// GEMMs [tiles x C] x [C x O] (oneDNN's matmul) between an input transform (V = B^T d B over 6x6
// input patches) and an output transform (Y = A^T M A). The weight transform (U = G g G^T) runs once
// per constants version, in double.
//
// Measured on a Zen 4 EPYC, 2 threads, against oneDNN's brgconv with weights cold as in a model
// (rotated over 64 MB of copies): 0.53 of its time at 56x56x64, 0.50 at 28x28x128, 0.82-0.94 at
// 14x14x256 (16 tiles: the transformed weight, 4x the direct form's bytes, is read for few tiles),
// 1.6-1.7x slower at 7x7x512 (4 tiles), 0.48-0.68 at 7x7x512 with batch 8. Hence
// make_winograd's 16 tiles and 32 channels. The rounding differs from the direct sum: about 1e-5 of
// the output's magnitude (the transforms' coefficients up to 8, 25 for the input's), against about
// 1e-7; CompileOptions.winograd=False keeps the direct form. A result with NaN or infinities is
// computed again directly (all_finite).
//
// The transforms vectorise over 16 channels at a time (the innermost NHWC axis): each works on
// [6][6][16] float arrays GCC turns into vector code, one tile and channel block per iteration.
#ifndef AITGEN_CPU_WINOGRAD_H_
#define AITGEN_CPU_WINOGRAD_H_

#include <algorithm>
#include <cstdint>

namespace ait {
namespace winograd {

constexpr int kBlock = 16;  // channels per iteration

// F(4x4, 3x3)'s matrices: B^T and A^T applied to kPatch values spaced kIn floats apart, writing
// results spaced kOut apart (a row or a column of a [kPatch][kPatch][kBlock] patch), and G for the
// weight. (F(2x2, 3x3), 2.25x fewer products and a transformed weight of 16/9 the direct form's
// bytes where this one's is 4x, was measured with weights cold as in a model: 0.68-1.01 of the
// direct form's time against this one's 0.48-0.94 on ResNet-50's shapes, so only this one is here.)
struct F43 {
  static constexpr int kTile = 4, kPatch = 6;
  static constexpr double G[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                     {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  // (__restrict__: the outputs never alias the inputs, which lets GCC vectorise without checks.)
  template <int kIn, int kOut>
  static void bt(const float* __restrict__ d, float* __restrict__ v) {
    for (int c = 0; c < kBlock; ++c) {
      const float d0 = d[c], d1 = d[kIn + c], d2 = d[2 * kIn + c], d3 = d[3 * kIn + c], d4 = d[4 * kIn + c],
                  d5 = d[5 * kIn + c];
      v[c] = 4.f * d0 - 5.f * d2 + d4;
      v[kOut + c] = -4.f * (d1 + d2) + d3 + d4;
      v[2 * kOut + c] = 4.f * (d1 - d2) - d3 + d4;
      v[3 * kOut + c] = -2.f * (d1 - d3) - d2 + d4;
      v[4 * kOut + c] = 2.f * (d1 - d3) - d2 + d4;
      v[5 * kOut + c] = 4.f * d1 - 5.f * d3 + d5;
    }
  }
  template <int kIn, int kOut>
  static void at(const float* __restrict__ s, float* __restrict__ y) {
    for (int c = 0; c < kBlock; ++c) {
      const float s1 = s[kIn + c], s2 = s[2 * kIn + c], s3 = s[3 * kIn + c], s4 = s[4 * kIn + c];
      const float a1 = s1 + s2, b1 = s1 - s2, a2 = s3 + s4, b2 = s3 - s4;
      y[c] = s[c] + a1 + a2;
      y[kOut + c] = b1 + 2.f * b2;
      y[2 * kOut + c] = a1 + 4.f * a2;
      y[3 * kOut + c] = b1 + 8.f * b2 + s[5 * kIn + c];
    }
  }
};

// The tiling of one run: n images of ho x wo outputs in th x tw tiles of `tile` x `tile`.
struct Tiles {
  int64_t n, th, tw;
  int64_t count() const { return n * th * tw; }
};
inline Tiles tiles_for(int tile, int64_t n, int64_t ho, int64_t wo) {
  return {n, (ho + tile - 1) / tile, (wo + tile - 1) / tile};
}

// Where the transforms' iteration (tile t, channel block cb of `count` channels) works: the tile's
// image and tile row and column, the block's first channel and width.
struct Place {
  int64_t n, ty, tx, c0, nc;
};
inline Place place(const Tiles& tl, int64_t t, int64_t cb, int64_t count) {
  const int64_t per_image = tl.th * tl.tw, c0 = cb * kBlock;
  return {t / per_image, t % per_image / tl.tw, t % tl.tw, c0, std::min<int64_t>(kBlock, count - c0)};
}

// Whether every value of x (n x h x w x c, NHWC at (n, h, w) strides xs) is finite. Run on the
// result: a NaN or an infinity in the input or the weight always reaches it (the transforms spread
// one over whole tiles, a product with a transformed 0 included, and turn an infinity into NaN),
// and so does an overflow of the transforms' larger intermediate values; the caller then computes
// the call directly, which keeps each to the outputs whose windows hold it. (A separate pass: a
// check inside the input transform cost it a third of its time.)
inline bool all_finite(const float* x, const int64_t xs[3], int64_t n, int64_t h, int64_t w, int64_t c) {
  const int64_t rows = n * h * w;
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (rows * c > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r / (h * w) * xs[0] + r / w % h * xs[1] + r % w * xs[2];
    // Sixteen running sums: finite unless a value is NaN or infinite (or finite ones overflow,
    // which only sends the call to the direct form). x * 0 is 0 for finite x, else NaN.
    float acc[kBlock] = {};
    int64_t k = 0;
    for (; k + kBlock <= c; k += kBlock)
      for (int q = 0; q < kBlock; ++q) acc[q] += p[k + q];
    for (; k < c; ++k) acc[0] += p[k];
    for (int q = 0; q < kBlock; ++q) bad |= acc[q] * 0.f != 0.f;
  }
  return bad == 0;
}

// V[P*P][T][C] (dense; P = F::kPatch) from x, an NHWC tensor of c channels at (n, h, w) strides
// xs, rows from pad_t above and columns from pad_l left of the first output (zeros outside it).
template <typename F>
void input_transform(const float* x, const int64_t xs[3], int64_t h, int64_t w, int64_t c, int64_t pad_t,
                     int64_t pad_l, const Tiles& tl, float* v) {
  constexpr int P = F::kPatch, B = kBlock;
  const int64_t t_count = tl.count(), cblocks = (c + B - 1) / B;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t cb = 0; cb < cblocks; ++cb) {
      const auto [n, ty, tx, c0, nc] = place(tl, t, cb, c);
      alignas(64) float d[P][P][B];
      for (int i = 0; i < P; ++i) {
        const int64_t y = ty * F::kTile + i - pad_t;
        for (int j = 0; j < P; ++j) {
          const int64_t xx = tx * F::kTile + j - pad_l;
          float* dst = d[i][j];
          if (y < 0 || y >= h || xx < 0 || xx >= w) {
            for (int k = 0; k < B; ++k) dst[k] = 0.f;
            continue;
          }
          const float* s = x + n * xs[0] + y * xs[1] + xx * xs[2] + c0;
          if (nc == B) {
            for (int k = 0; k < B; ++k) dst[k] = s[k];
          } else {
            for (int k = 0; k < B; ++k) dst[k] = k < nc ? s[k] : 0.f;
          }
        }
      }
      alignas(64) float m[P][P][B];  // m[j][i] = (B^T d)[i][j]: column j of B^T d in m[j]
      for (int j = 0; j < P; ++j) F::template bt<P * B, B>(&d[0][j][0], &m[j][0][0]);
      for (int i = 0; i < P; ++i) {
        alignas(64) float row[P][B];  // row i of (B^T d) B
        F::template bt<P * B, B>(&m[0][i][0], &row[0][0]);
        for (int j = 0; j < P; ++j) {
          float* dst = v + ((i * P + j) * t_count + t) * c + c0;
          if (nc == B) {  // the usual block: a fixed count the compiler vectorises
            for (int k = 0; k < B; ++k) dst[k] = row[j][k];
          } else {
            for (int k = 0; k < nc; ++k) dst[k] = row[j][k];
          }
        }
      }
    }
  }
}

// U[P*P][C][O] (dense) from the weight [O, C, 3, 3] at strides ws: G g G^T per (o, c), in double.
// 16 output channels at a time, as arrays over them that GCC vectorises: each (c, point) writes one
// 64-byte run of u. (One pair at a time, scalar, took 10-12 ms for a 256 x 256 weight.)
template <typename F>
void weight_transform(const float* wei, const int64_t ws[4], int64_t o_count, int64_t c_count, float* u) {
  constexpr int P = F::kPatch, B = kBlock;
  const int64_t oblocks = (o_count + B - 1) / B;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t ob = 0; ob < oblocks; ++ob) {
    for (int64_t c = 0; c < c_count; ++c) {
      const int64_t o0 = ob * B, no = std::min<int64_t>(B, o_count - o0);
      double g[3][3][B], gg[P][3][B];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
          for (int q = 0; q < B; ++q)
            g[i][j][q] = q < no ? wei[(o0 + q) * ws[0] + c * ws[1] + i * ws[2] + j * ws[3]] : 0.0;
      for (int i = 0; i < P; ++i)
        for (int j = 0; j < 3; ++j)
          for (int q = 0; q < B; ++q)
            gg[i][j][q] = F::G[i][0] * g[0][j][q] + F::G[i][1] * g[1][j][q] + F::G[i][2] * g[2][j][q];
      for (int i = 0; i < P; ++i)
        for (int j = 0; j < P; ++j) {
          float* dst = u + ((i * P + j) * c_count + c) * o_count + o0;
          for (int q = 0; q < no; ++q)
            dst[q] = static_cast<float>(gg[i][0][q] * F::G[j][0] + gg[i][1][q] * F::G[j][1] + gg[i][2][q] * F::G[j][2]);
        }
    }
  }
}

// y, NHWC of o channels at (n, h, w) strides ys and ho x wo outputs, from M[P*P][T][O] (dense),
// plus bias[o] (nullptr: none).
template <typename F>
void output_transform(const float* mm, const float* bias, int64_t ho, int64_t wo, int64_t o_count, const Tiles& tl,
                      float* y, const int64_t ys[3]) {
  constexpr int P = F::kPatch, T = F::kTile, B = kBlock;
  const int64_t t_count = tl.count(), oblocks = (o_count + B - 1) / B;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t ob = 0; ob < oblocks; ++ob) {
      const auto [n, ty, tx, o0, no] = place(tl, t, ob, o_count);
      alignas(64) float m[P][T][B];  // m[i] = row i of M times A
      for (int i = 0; i < P; ++i) {
        alignas(64) float s[P][B];
        for (int k = 0; k < P; ++k) {
          const float* src = mm + ((i * P + k) * t_count + t) * o_count + o0;
          if (no == B) {
            for (int q = 0; q < B; ++q) s[k][q] = src[q];
          } else {
            for (int q = 0; q < B; ++q) s[k][q] = q < no ? src[q] : 0.f;
          }
        }
        F::template at<B, B>(&s[0][0], &m[i][0][0]);
      }
      float b[B];
      for (int q = 0; q < B; ++q) b[q] = bias && q < no ? bias[o0 + q] : 0.f;
      for (int j = 0; j < T; ++j) {
        const int64_t xx = tx * T + j;
        if (xx >= wo) break;
        alignas(64) float col[T][B];
        F::template at<T * B, B>(&m[0][j][0], &col[0][0]);
        for (int i = 0; i < T; ++i) {
          const int64_t yy = ty * T + i;
          if (yy >= ho) break;
          float* dst = y + n * ys[0] + yy * ys[1] + xx * ys[2] + o0;
          if (no == B) {
            for (int q = 0; q < B; ++q) dst[q] = col[i][q] + b[q];
          } else {
            for (int q = 0; q < no; ++q) dst[q] = col[i][q] + b[q];
          }
        }
      }
    }
  }
}

}  // namespace winograd
}  // namespace ait

#endif  // AITGEN_CPU_WINOGRAD_H_
