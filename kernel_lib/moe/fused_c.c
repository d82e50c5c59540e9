/* Fused MoE expert FFN for bf16 on CPUs with AVX512-BF16: per tile of 8 rows of one expert,
 * gather -> x @ w_in -> activation -> @ w_out -> * routing weight -> added to its token's fp32
 * output row, the tile in L1 throughout, the GEMMs as VDPBF16PS (bf16 pairs, fp32 accumulation).
 * Built and loaded by fused_c.py, which sorts the rows by expert and packs the weights.
 *
 * Packed weight of one expert, (K, N) -> (Np/16, Kp/2, 16, 2): 16 columns a vector, each lane the
 * pair (k, k+1) of one column; K padded to even and N to a multiple of 16 with zeros. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512BF16__)
#include <immintrin.h>

typedef uint16_t bf16;

enum { MR = 8, RELU = 0, GELU = 1, SWIGLU = 2, SWIGLU_CLAMPED = 3 };

int fused_available(void) { return 1; }

/* the first min(n, 16) lanes */
static inline __mmask16 lanes(int64_t n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }

/* c (MR, 16 * NT) fp32 = a (MR, 2 * kp) bf16, row stride lda, @ the NT packed column tiles at b
 * (tile stride ldb elements) */
static inline __attribute__((always_inline)) void kernel(int nt, int64_t kp, const bf16 *a,
                                                         int64_t lda, const bf16 *b, int64_t ldb,
                                                         float *c, int64_t ldc) {
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(b + 32 * p);
    __m512bh w1 = nt == 2 ? (__m512bh)_mm512_loadu_si512(b + ldb + 32 * p) : w0;
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      memcpy(&pair, a + r * lda + 2 * p, 4);
      __m512bh v = (__m512bh)_mm512_set1_epi32(pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], v, w0);
      if (nt == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], v, w1);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(c + r * ldc, acc[r][0]);
    if (nt == 2) _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
  }
}

/* c (MR, np) = a (MR, kp2) @ packed w (np / 16 tiles of kp2 / 2 pairs) */
static void gemm(const bf16 *a, int64_t kp2, const bf16 *w, int64_t np, float *c) {
  const int64_t ldb = 16 * kp2, tiles = np / 16;
  int64_t t = 0;
  for (; t + 1 < tiles; t += 2) kernel(2, kp2 / 2, a, kp2, w + t * ldb, ldb, c + 16 * t, np);
  if (t < tiles) kernel(1, kp2 / 2, a, kp2, w + t * ldb, ldb, c + 16 * t, np);
}

/* e^x, |relative error| < 2e-7 on [-87, 87] (inputs are clamped to it) */
static inline __m512 exp_ps(__m512 x) { /* min/max pass their second operand's NaN */
  x = _mm512_max_ps(_mm512_set1_ps(-87.f), _mm512_min_ps(_mm512_set1_ps(87.f), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  static const float coef[] = {1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};
  for (int i = 0; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(coef[i]));
  return _mm512_scalef_ps(p, n);
}

/* 1 / (1 + e^-x) */
static inline __m512 sigmoid_ps(__m512 x) {
  __m512 one = _mm512_set1_ps(1.f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/* out (MR, fp) bf16 = activation of h (MR, hp) fp32: relu/gelu(tanh) of h; for h laid out
 * [gate (fp) | up (fp)], silu(gate) * up or gpt-oss's clamped form (gate <= limit, |up| <= limit,
 * (up + 1) * gate * sigmoid(alpha * gate)). NaN stays NaN, as in torch: VMAXPS and VMINPS return
 * their second operand where one is NaN, so h is always the second. */
static void activate(const float *h, int64_t hp, int act, float limit, float alpha, bf16 *out,
                     int64_t fp) {
  for (int r = 0; r < MR; ++r)
    for (int64_t j = 0; j < fp; j += 16) {
      __m512 g = _mm512_loadu_ps(h + r * hp + j), y;
      if (act == SWIGLU) {
        y = _mm512_mul_ps(_mm512_mul_ps(g, sigmoid_ps(g)), _mm512_loadu_ps(h + r * hp + fp + j));
      } else if (act == SWIGLU_CLAMPED) {
        __m512 hi = _mm512_set1_ps(limit), lo = _mm512_set1_ps(-limit);
        __m512 u = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_loadu_ps(h + r * hp + fp + j)));
        g = _mm512_min_ps(hi, g);
        __m512 gate = _mm512_mul_ps(g, sigmoid_ps(_mm512_mul_ps(g, _mm512_set1_ps(alpha))));
        y = _mm512_mul_ps(_mm512_add_ps(u, _mm512_set1_ps(1.f)), gate);
      } else if (act == RELU) {
        y = _mm512_max_ps(_mm512_setzero_ps(), g);
      } else { /* 0.5 g (1 + tanh(u)) = g * sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3) */
        __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
        __m512 u = _mm512_mul_ps(_mm512_fmadd_ps(g3, _mm512_set1_ps(0.044715f), g),
                                 _mm512_set1_ps(2 * 0.7978845608f));
        y = _mm512_mul_ps(g, sigmoid_ps(u));
      }
      _mm256_storeu_si256((__m256i *)(out + r * fp + j), (__m256i)_mm512_cvtneps_pbh(y));
    }
}

/* One tile: rows idx[0..n) (n <= MR) of one expert (its packed w_in, w_out); acc[token] +=
 * weight * FFN(x[token]) in fp32. a, h, act: the thread's buffers (a's padding stays zero). */
static void tile(const bf16 *x, int64_t d, const int64_t *token, const float *weight,
                 const int64_t *idx, int n, const bf16 *w_in, int64_t dp, int64_t hp,
                 const bf16 *w_out, int64_t fp, int64_t np, int act, float limit, float alpha,
                 bf16 *a, float *h, bf16 *act_out, float *acc) {
  for (int r = 0; r < MR; ++r)
    if (r < n) memcpy(a + r * dp, x + token[idx[r]] * d, sizeof(bf16) * d);
    else memset(a + r * dp, 0, sizeof(bf16) * d);
  gemm(a, dp, w_in, hp, h);
  activate(h, hp, act, limit, alpha, act_out, fp);
  gemm(act_out, fp, w_out, np, h);
  for (int r = 0; r < n; ++r) {
    const __m512 w = _mm512_set1_ps(weight[idx[r]]);
    float *row = acc + token[idx[r]] * d;
    for (int64_t j = 0; j < d; j += 16) {
      const __mmask16 m = lanes(d - j);
      __m512 sum = _mm512_maskz_loadu_ps(m, row + j);
      _mm512_mask_storeu_ps(row + j, m, _mm512_fmadd_ps(_mm512_loadu_ps(h + r * np + j), w, sum));
    }
  }
}

/* out (T, D) bf16 = sum over the rows i of token t of weight[i] * FFN_e(x[t]) (rows sorted by
 * expert, segment e ending at ends[e]), accumulated in fp32 in expert order and rounded once.
 * Each thread owns a range of tokens: it runs every expert on its own tokens' rows and adds into
 * their fp32 rows of acc (T, D) without sharing them. w_in packed (E, hp/16, dp/2, 16, 2), w_out
 * (E, np/16, fp/2, 16, 2): dp = D rounded up to even, np = D rounded up to 16, fp the packed ffn,
 * hp = 2 fp for the gated activations else fp; limit and alpha: the clamped SwiGLU's. Returns 0,
 * or 1 where a thread's buffers could not be allocated (out is then incomplete). */
int fused_ffn(const bf16 *x, int64_t t, int64_t d, const int64_t *token, const float *weight,
               const int32_t *ends, int64_t experts, const bf16 *w_in, int64_t dp, int64_t hp,
               const bf16 *w_out, int64_t fp, int64_t np, int act, float limit, float alpha,
               float *acc, bf16 *out, int threads) {
  int failed = 0;
#pragma omp parallel num_threads(threads)
  {
    const int64_t parts = omp_get_num_threads(), me = omp_get_thread_num(), lo = t * me / parts;
    bf16 *a = aligned_alloc(64, (sizeof(bf16) * MR * dp + 63) / 64 * 64);
    float *h = aligned_alloc(64, sizeof(float) * MR * (hp > np ? hp : np));
    bf16 *act_out = aligned_alloc(64, (sizeof(bf16) * MR * fp + 63) / 64 * 64);
    /* this thread's tiles: n[k] <= MR of its rows of expert e[k], listed in idx[k * MR ...] */
    const int64_t most = ends[experts - 1] / MR + experts;
    int64_t *tile_e = malloc(sizeof(int64_t) * most), *idx = malloc(sizeof(int64_t) * most * MR);
    int *tile_n = malloc(sizeof(int) * most);
    const int ok = a && h && act_out && tile_e && idx && tile_n;
    if (!ok) {
#pragma omp atomic write
      failed = 1;
    }
    /* without its buffers a thread owns no tokens: nothing below touches them */
    const int64_t hi = ok ? t * (me + 1) / parts : lo;
    if (ok) memset(a, 0, sizeof(bf16) * MR * dp); /* the odd column of a stays zero */
    memset(acc + lo * d, 0, sizeof(float) * (hi - lo) * d);
    int64_t tiles = 0;
    for (int64_t e = 0, start = 0; e < experts; start = ends[e++])
      for (int64_t i = start; i < ends[e]; ++i) {
        if (token[i] < lo || token[i] >= hi) continue;
        if (tiles == 0 || tile_e[tiles - 1] != e || tile_n[tiles - 1] == MR)
          tile_e[tiles] = e, tile_n[tiles++] = 0;
        idx[(tiles - 1) * MR + tile_n[tiles - 1]++] = i;
      }
    for (int64_t k = 0; k < tiles; ++k) {
      if (k + 1 < tiles) /* the next tile's rows of x and acc, fetched while this one computes */
        for (int r = 0; r < tile_n[k + 1]; ++r) {
          const bf16 *xs = x + token[idx[(k + 1) * MR + r]] * d;
          const float *sums = acc + token[idx[(k + 1) * MR + r]] * d;
          for (int64_t j = 0; j < d; j += 32) _mm_prefetch((const char *)(xs + j), _MM_HINT_T1);
          for (int64_t j = 0; j < d; j += 16) _mm_prefetch((const char *)(sums + j), _MM_HINT_T1);
        }
      const int64_t e = tile_e[k];
      tile(x, d, token, weight, idx + k * MR, tile_n[k], w_in + e * hp * dp, dp, hp,
           w_out + e * np * fp, fp, np, act, limit, alpha, a, h, act_out, acc);
    }
    free(tile_e), free(tile_n), free(idx);
    for (int64_t i = lo * d; i < hi * d; i += 16) {
      const __mmask16 m = lanes(hi * d - i);
      __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, acc + i));
      _mm256_mask_storeu_epi16(out + i, m, (__m256i)v);
    }
    free(a), free(h), free(act_out);
  }
  return failed;
}

#else

int fused_available(void) { return 0; } /* the library still builds where the ISA is missing */

#endif
