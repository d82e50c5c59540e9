/* Weight-only FP8 linear (W8A16) for CPUs: out (M, N) bf16 = x (M, K) bf16 @ dequant(w).T, w
 * (N, K) e4m3fn bytes with per-output-channel or 128 x 128 block scales. Built and loaded by
 * weight_only_c.py. One source for every x86 level: GCC vector types of 16 floats compile to one
 * zmm where the target has AVX-512, two ymm on AVX2 (CI's ISA pass), four xmm otherwise.
 *
 * e4m3fn in registers: the byte's 7 exponent-mantissa bits shifted to fp32's bits 20-26 and its
 * sign to bit 31 read as an fp32 2^-120 times the value, normals and subnormals alike (FP8's
 * subnormals land on fp32's, exact); one multiply by 2^120 (times the weight's block scale)
 * gives the value, and 0x7f / 0xff become NaN. Each thread owns tiles of NR output channels: per
 * K chunk it converts the tile once into an L1 buffer and runs every row of x over it, so the
 * weight streams from memory once per call whatever M. Where the CPU has AVX512-VBMI and -BF16 a
 * faster build replaces this one (w8a16_bf16, below). */
#include <omp.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint8_t vb __attribute__((vector_size(16)));
typedef uint16_t vh __attribute__((vector_size(32)));

enum { V = 16, NR = 4, MR = 4, KC = 512, BLOCK = 128 };

/* 16 bytes at p zero-extended to 32 bits (one instruction where the compiler would not) */
static inline vi widen(const uint8_t *p) {
  vi w;
#if defined(__AVX512F__)
  __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
  memcpy(&w, &v, sizeof w);
#elif defined(__AVX2__)
  __m256i v[2] = {_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)),
                  _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)))};
  memcpy(&w, v, sizeof w);
#else
  vb b;
  memcpy(&b, p, sizeof b);
  w = __builtin_convertvector(b, vi);
#endif
  return w;
}

/* 16 e4m3fn bytes at p as fp32 times mult, NaN codes as NaN */
static inline vf fp8_to_f32(const uint8_t *p, float mult) {
  vi w = widen(p);
  vi bits = ((w & 0x80) << 24) | ((w & 0x7f) << 20), nan = (w & 0x7f) == 0x7f;
  vf f = (vf)bits * mult;
  return (vf)(((vi)f & ~nan) | (nan & 0x7fc00000));
}

/* the same for the first n < 16 bytes at p, the rest as zeros */
static inline vf fp8_tail_to_f32(const uint8_t *p, int64_t n, float mult) {
  uint8_t tail[V] = {0};
  memcpy(tail, p, n);
  return fp8_to_f32(tail, mult);
}

/* the first min(n, 16) bf16 at p as fp32, the rest zeros */
static inline vf bf16_to_f32_v(const uint16_t *p, int64_t n) {
  vh h = {0};
  memcpy(&h, p, sizeof(uint16_t) * (n < V ? n : V));
  return (vf)(__builtin_convertvector(h, vi) << 16);
}

/* 16 fp32 as bf16, rounded to nearest even, NaN kept */
static inline vh f32_to_bf16_v(vf f) {
  vi u = (vi)f, nan = (u & 0x7fffffff) > 0x7f800000;
  vi r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff;
  return __builtin_convertvector((r & ~nan) | (nan & ((u >> 16) | 0x40)), vh);
}

static inline float hsum(vf v) { /* a tree of halves */
  float s[V];
  memcpy(s, &v, sizeof s);
  for (int h = V / 2; h > 0; h /= 2)
    for (int i = 0; i < h; ++i) s[i] += s[i + h];
  return s[0];
}

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, NaN kept */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* the multiplier of w[n, k]'s block (block scales: ceil(N/128) x kb) or 2^120 alone */
static inline float multiplier(const float *block_scale, int64_t kb, int64_t n, int64_t k) {
  const float pow2_120 = 1329227995784915872903807060280344576.f;
  return block_scale ? pow2_120 * block_scale[(n / BLOCK) * kb + k / BLOCK] : pow2_120;
}

/* acc[(m0 + i) * NR + r] += x row m0 + i (fp32, row stride kp) . wbuf row r over kc values, for
 * i < mr (a constant where inlined) */
static inline __attribute__((always_inline)) void rows_over_tile(const float *x, int64_t kp,
                                                                 int64_t m0, int mr,
                                                                 const float *wbuf, int64_t kc,
                                                                 float *acc) {
  vf a[MR][NR];
  for (int i = 0; i < mr; ++i)
    for (int r = 0; r < NR; ++r) a[i][r] = (vf){0};
  for (int64_t k = 0; k < kc; k += V) {
    vf w[NR];
    for (int r = 0; r < NR; ++r) memcpy(&w[r], wbuf + r * KC + k, sizeof(vf));
    for (int i = 0; i < mr; ++i) {
      vf xv;
      memcpy(&xv, x + (m0 + i) * kp + k, sizeof xv);
      for (int r = 0; r < NR; ++r) a[i][r] += xv * w[r];
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int r = 0; r < NR; ++r) acc[(m0 + i) * NR + r] += hsum(a[i][r]);
}

/* rows_over_tile for every row of x, MR at a time, the last group's count a constant */
static void all_rows(const float *x, int64_t kp, int64_t m, const float *wbuf, int64_t kc,
                     float *acc) {
  int64_t i = 0;
  for (; i + MR <= m; i += MR) rows_over_tile(x, kp, i, MR, wbuf, kc, acc);
  switch (m - i) {
    case 3: rows_over_tile(x, kp, i, 3, wbuf, kc, acc); break;
    case 2: rows_over_tile(x, kp, i, 2, wbuf, kc, acc); break;
    case 1: rows_over_tile(x, kp, i, 1, wbuf, kc, acc); break;
  }
}

/* wbuf (NR rows of KC fp32) = weight rows n0 .. n0 + NR (those from `rows` on zeros) at columns
 * k0 .. k0 + kc, zero-padded to whole vectors: e4m3fn codes times their multiplier (fp8), or
 * bf16 values; w (rows of k) is bytes or bf16 by fp8 */
static void convert_tile(const void *w, int fp8, int64_t k, int64_t n0, int64_t rows, int64_t k0,
                         int64_t kc, const float *block_scale, int64_t kb, int64_t pf,
                         float *wbuf) {
  const int64_t kcp = (kc + V - 1) / V * V;
  for (int r = 0; r < NR; ++r)
    for (int64_t j = 0; j < kcp; j += V) {
      vf f = (vf){0};
      if (r < rows && fp8) {
        const float mult = multiplier(block_scale, kb, n0 + r, k0 + j);
        const uint8_t *p = (const uint8_t *)w + (n0 + r) * k + k0 + j;
        if (pf) __builtin_prefetch(p + pf);
        f = kc - j >= V ? fp8_to_f32(p, mult) : fp8_tail_to_f32(p, kc - j, mult);
      } else if (r < rows) {
        f = bf16_to_f32_v((const uint16_t *)w + (n0 + r) * k + k0 + j, kc - j);
      }
      memcpy(wbuf + r * KC + j, &f, sizeof f);
    }
}

/* sums[i * NR + r] = row i < m of x (fp32, row stride kp) . weight row n0 + r < n0 + rows over
 * its k columns (rows from `rows` on: 0), each K chunk converted once into wbuf */
__attribute__((unused)) static void tile_sums_fp32(const float *x, int64_t kp, int64_t m,
                                                   const void *w, int fp8, int64_t k, int64_t n0,
                                                   int64_t rows, const float *block_scale,
                                                   int64_t pf, float *wbuf, float *sums) {
  const int64_t kb = (k + BLOCK - 1) / BLOCK;
  memset(sums, 0, sizeof(float) * m * NR);
  for (int64_t k0 = 0; k0 < k; k0 += KC) {
    const int64_t kc = k - k0 < KC ? k - k0 : KC;
    convert_tile(w, fp8, k, n0, rows, k0, kc, block_scale, kb, pf, wbuf);
    all_rows(x + k0, kp, m, wbuf, (kc + V - 1) / V * V, sums);
  }
}

/* w8a16_linear in fp32 FMAs, for any vector ISA; 1 where a buffer could not be allocated */
__attribute__((unused)) static int w8a16_fp32(const uint16_t *x, int64_t m, int64_t k,
                                              const uint8_t *w, int64_t n,
                                              const float *channel_scale,
                                              const float *block_scale, uint16_t *out,
                                              int threads, int64_t pf) {
  const int64_t kp = (k + V - 1) / V * V, tiles = (n + NR - 1) / NR;
  float *xf = aligned_alloc(64, sizeof(float) * (m * kp + V));
  if (!xf) return 1;
  int failed = 0;
  for (int64_t i = 0; i < m; ++i) /* before the threads start: one barrier a call, at the end */
    for (int64_t j = 0; j < kp; ++j) xf[i * kp + j] = j < k ? bf16_to_f32(x[i * k + j]) : 0.f;
#pragma omp parallel num_threads(threads)
  {
    float *wbuf = aligned_alloc(64, sizeof(float) * NR * KC);
    float *acc = aligned_alloc(64, sizeof(float) * (m * NR + V));
    if (!wbuf || !acc) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(static) nowait
    for (int64_t t = 0; t < tiles; ++t) {
      if (!wbuf || !acc) continue; /* the loop is shared: this thread's tiles go undone */
      const int64_t n0 = t * NR, rows = n - n0 < NR ? n - n0 : NR;
      tile_sums_fp32(xf, kp, m, w, 1, k, n0, rows, block_scale, pf, wbuf, acc);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < rows; ++r) {
          const float s = channel_scale ? channel_scale[n0 + r] : 1.f;
          out[i * n + n0 + r] = f32_to_bf16(acc[i * NR + r] * s);
        }
    }
    free(wbuf), free(acc);
  }
  free(xf);
  return failed;
}

#if defined(__AVX512VBMI__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
/* Where the CPU has AVX512-VBMI and AVX512-BF16 (Zen 4, Sapphire Rapids): 64 FP8 bytes become
 * bf16 by two 128-entry byte lookups (VPERMI2B: the high and low byte of each code's bf16, exact:
 * e4m3fn's subnormals are bf16 normals) and the sign OR'd back, then VDPBF16PS multiplies them by
 * bf16 x pairs with fp32 accumulation. The byte interleave leaves each 64 weights in the order
 * k = 0-7, 16-23, 32-39, 48-55 | 8-15, 24-31, 40-47, 56-63; x is permuted the same once per call. */
#define BF16_PATH 1
enum { NB = 4, MB = 4, C = 64, NBMAX = 8 };

typedef struct {
  __m512i hi0, hi1, lo0, lo1;
} tables;

static tables bf16_tables(void) {
  uint8_t hi[128], lo[128];
  for (int c = 0; c < 128; ++c) {
    const int e = c >> 3, mant = c & 7;
    float v = (float)mant / 512.f; /* subnormal: mant / 8 * 2^-6 */
    uint32_t u;
    memcpy(&u, &v, 4);
    if (e) u = (uint32_t)(e - 7 + 127) << 23 | (uint32_t)mant << 20;
    if (c == 0x7f) u = 0x7fc00000;
    hi[c] = (uint8_t)(u >> 24), lo[c] = (uint8_t)(u >> 16);
  }
  tables t = {_mm512_loadu_si512(hi), _mm512_loadu_si512(hi + 64), _mm512_loadu_si512(lo),
              _mm512_loadu_si512(lo + 64)};
  return t;
}

/* the n (<= 64, the rest zeros) e4m3fn bytes at p as 2 x 32 bf16 in the permuted order */
static inline void convert64(const uint8_t *p, int64_t n, const tables *t, __m512i *w) {
  const __m512i b = n >= C ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8((1ULL << n) - 1, p);
  const __m512i sign = _mm512_and_si512(b, _mm512_set1_epi8((char)0x80));
  const __m512i hi = _mm512_or_si512(_mm512_permutex2var_epi8(t->hi0, b, t->hi1), sign);
  const __m512i lo = _mm512_permutex2var_epi8(t->lo0, b, t->lo1);
  w[0] = _mm512_unpacklo_epi8(lo, hi), w[1] = _mm512_unpackhi_epi8(lo, hi);
}

enum { SRC_BUF = 0, SRC_FP8 = 1, SRC_BF16 = 2 }; /* where tile_rows reads the weights */

/* the n (<= 64, the rest zeros) bf16 at p as 2 x 32, in their own order */
static inline void load64(const uint16_t *p, int64_t n, __m512i *w) {
  const __mmask32 all = 0xffffffffu;
  w[0] = n >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(all >> (32 - n), p);
  w[1] = n >= C ? _mm512_loadu_si512(p + 32)
         : n > 32 ? _mm512_maskz_loadu_epi16(all >> (C - n), p + 32)
                  : _mm512_setzero_si512();
}

/* The dot products of x rows i0 + i (i < mr; bf16, row stride kp: permuted for FP8 weights) with
 * the tile's weight rows n0 + r (r < nb; rows from nr on: 0): the weights e4m3fn bytes converted
 * in registers (SRC_FP8), bf16 (SRC_BF16; both rows of k) or wbuf's converted tile (SRC_BUF, row
 * stride kp); with block scales (blocked) each 128-K block's sums are scaled before they are
 * added. Into sums[i * nb + r], or (lanes) their 16 fp32 lanes times mult[i] added to dst[i] +
 * 16 r. pf: bytes ahead to prefetch each FP8 or bf16 line (0: none). mr, nb, src, blocked and lanes
 * are constants where inlined (mr * nb <= 16, <= 8 blocked: the registers hold it). */
static inline __attribute__((always_inline)) void tile_rows(
    const uint16_t *xp, int64_t kp, int64_t i0, int mr, int nb, int src, int blocked, int lanes,
    const void *w, int64_t k, int64_t n0, int64_t nr, int64_t pf, const uint16_t *wbuf,
    const tables *t, const float *block_scale, int64_t kb, int64_t n, float *sums,
    float *const *dst, const float *mult) {
  __m512 acc[MB][NBMAX], part[MB / 2][NBMAX];
  const float *scales[NBMAX]; /* each row's block row of scales */
  for (int r = 0; r < nb && blocked; ++r)
    scales[r] = block_scale + ((n0 + r < n ? n0 + r : n - 1) / BLOCK) * kb;
  for (int i = 0; i < mr; ++i)
    for (int r = 0; r < nb; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < kp; b0 += BLOCK) {
    if (blocked)
      for (int i = 0; i < mr; ++i)
        for (int r = 0; r < nb; ++r) part[i][r] = _mm512_setzero_ps();
    for (int64_t c = b0; c < b0 + BLOCK && c < kp; c += C) {
#pragma GCC unroll 8
      for (int r = 0; r < nb; ++r) {
        __m512i wv[2];
        if (src == SRC_BUF) {
          wv[0] = _mm512_load_si512(wbuf + r * kp + c);
          wv[1] = _mm512_load_si512(wbuf + r * kp + c + 32);
        } else if (r >= nr) {
          wv[0] = wv[1] = _mm512_setzero_si512();
        } else if (src == SRC_FP8) {
          const uint8_t *p = (const uint8_t *)w + (n0 + r) * k + c;
          if (pf) __builtin_prefetch(p + pf);
          convert64(p, k - c, t, wv);
        } else {
          const uint16_t *p = (const uint16_t *)w + (n0 + r) * k + c;
          if (pf) /* a chunk of bf16: two lines */
            __builtin_prefetch((const char *)p + pf), __builtin_prefetch((const char *)p + pf + 64);
          load64(p, k - c, wv);
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; ++i) {
          const uint16_t *xr = xp + (i0 + i) * kp + c;
          const __m512bh x0 = (__m512bh)_mm512_load_si512(xr);
          const __m512bh x1 = (__m512bh)_mm512_load_si512(xr + 32);
          if (blocked)
            part[i][r] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(part[i][r], x0, (__m512bh)wv[0]), x1,
                                          (__m512bh)wv[1]);
          else
            acc[i][r] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[i][r], x0, (__m512bh)wv[0]), x1,
                                         (__m512bh)wv[1]);
        }
      }
    }
    if (blocked)
      for (int r = 0; r < nb; ++r) {
        const __m512 s = _mm512_set1_ps(scales[r][b0 / BLOCK]);
        for (int i = 0; i < mr; ++i) acc[i][r] = _mm512_fmadd_ps(part[i][r], s, acc[i][r]);
      }
  }
  for (int i = 0; i < mr; ++i)
    for (int r = 0; r < nb; ++r)
      if (lanes) {
        float *sum = dst[i] + r * V;
        const __m512 m = _mm512_set1_ps(mult[i]);
        _mm512_storeu_ps(sum, _mm512_fmadd_ps(acc[i][r], m, _mm512_loadu_ps(sum)));
      } else {
        sums[i * nb + r] = _mm512_reduce_add_ps(acc[i][r]);
      }
}

/* tile_rows of w8a16_bf16: NB rows, sums, mr, src and blocked as constants (a copy each) */
static void rows_pass(int mr, int src, int blocked, const uint16_t *xp, int64_t kp, int64_t i0,
                      const void *w, int64_t k, int64_t n0, int64_t nr, int64_t pf,
                      const uint16_t *wbuf, const tables *t, const float *block_scale, int64_t kb,
                      int64_t n, float *sums) {
#define ROWS(MR, SRC, BLOCKED)                                                                  \
  tile_rows(xp, kp, i0, MR, NB, SRC, BLOCKED, 0, w, k, n0, nr, pf, wbuf, t, block_scale, kb, n, \
            sums, NULL, NULL)
  switch (blocked * 16 + src * 8 + mr) {
    case 1: ROWS(1, SRC_BUF, 0); break;
    case 2: ROWS(2, SRC_BUF, 0); break;
    case 3: ROWS(3, SRC_BUF, 0); break;
    case 4: ROWS(4, SRC_BUF, 0); break;
    case 9: ROWS(1, SRC_FP8, 0); break;
    case 10: ROWS(2, SRC_FP8, 0); break;
    case 11: ROWS(3, SRC_FP8, 0); break;
    case 12: ROWS(4, SRC_FP8, 0); break;
    case 17: ROWS(1, SRC_BUF, 1); break;
    case 18: ROWS(2, SRC_BUF, 1); break;
    case 25: ROWS(1, SRC_FP8, 1); break;
    case 26: ROWS(2, SRC_FP8, 1); break;
  }
#undef ROWS
}

/* sums[i * NB + r] (i < mr, r < nr) = x rows i0 + i (as tile_rows) . weight rows n0 + r, each
 * row read start to end before the next (streamed: one stream per thread, the hardware
 * prefetcher's best case, where tile_rows interleaves NB streams): per 128-K block four
 * accumulator chains per x row, scaled by the row's block scale (blocked) as they are added.
 * mr (<= MB) and blocked are constants where inlined. */
static inline __attribute__((always_inline)) void stream_rows(
    const uint16_t *xp, int64_t kp, int64_t i0, int mr, int blocked, const uint8_t *w, int64_t k,
    int64_t n0, int64_t nr, int64_t pf, const tables *t, const float *block_scale, int64_t kb,
    float *sums) {
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t *row = w + (n0 + r) * k;
    const float *scales = blocked ? block_scale + ((n0 + r) / BLOCK) * kb : NULL;
    __m512 acc[MB], part[MB][4];
    for (int i = 0; i < mr; ++i) {
      acc[i] = _mm512_setzero_ps();
      for (int j = 0; j < 4; ++j) part[i][j] = _mm512_setzero_ps();
    }
    for (int64_t b0 = 0; b0 < kp; b0 += BLOCK) {
#pragma GCC unroll 2
      for (int64_t c = b0, h = 0; c < b0 + BLOCK && c < kp; c += C, h += 2) {
        __m512i wv[2];
        if (pf) __builtin_prefetch(row + c + pf);
        convert64(row + c, k - c, t, wv);
        for (int i = 0; i < mr; ++i) {
          const uint16_t *xr = xp + (i0 + i) * kp + c;
          part[i][h] = _mm512_dpbf16_ps(part[i][h], (__m512bh)_mm512_load_si512(xr),
                                        (__m512bh)wv[0]);
          part[i][h + 1] = _mm512_dpbf16_ps(part[i][h + 1],
                                            (__m512bh)_mm512_load_si512(xr + 32), (__m512bh)wv[1]);
        }
      }
      if (blocked)
        for (int i = 0; i < mr; ++i) {
          const __m512 sum = _mm512_add_ps(_mm512_add_ps(part[i][0], part[i][1]),
                                           _mm512_add_ps(part[i][2], part[i][3]));
          acc[i] = _mm512_fmadd_ps(sum, _mm512_set1_ps(scales[b0 / BLOCK]), acc[i]);
          for (int j = 0; j < 4; ++j) part[i][j] = _mm512_setzero_ps();
        }
    }
    for (int i = 0; i < mr; ++i) {
      if (!blocked)
        acc[i] = _mm512_add_ps(_mm512_add_ps(part[i][0], part[i][1]),
                               _mm512_add_ps(part[i][2], part[i][3]));
      sums[i * NB + r] = _mm512_reduce_add_ps(acc[i]);
    }
  }
}

/* stream_rows with mr and blocked as constants (a copy each) */
static void stream_pass(int mr, int blocked, const uint16_t *xp, int64_t kp, int64_t i0,
                         const uint8_t *w, int64_t k, int64_t n0, int64_t nr, int64_t pf,
                         const tables *t, const float *block_scale, int64_t kb, float *sums) {
#define STREAM(MR, BLOCKED) \
  stream_rows(xp, kp, i0, MR, BLOCKED, w, k, n0, nr, pf, t, block_scale, kb, sums)
  switch (blocked * 8 + mr) {
    case 1: STREAM(1, 0); break;
    case 2: STREAM(2, 0); break;
    case 3: STREAM(3, 0); break;
    case 4: STREAM(4, 0); break;
    case 9: STREAM(1, 1); break;
    case 10: STREAM(2, 1); break;
    case 11: STREAM(3, 1); break;
    case 12: STREAM(4, 1); break;
  }
#undef STREAM
}

/* wbuf (nb rows, stride kp) = e4m3fn weight rows n0 .. n0 + nr (rows of k; the rest zeros) as
 * bf16 in convert64's order */
static void buffer_tile(const uint8_t *w, int64_t k, int64_t kp, int64_t n0, int64_t nr, int nb,
                        int64_t pf, const tables *t, uint16_t *wbuf) {
  for (int r = 0; r < nb; ++r)
    for (int64_t c = 0; c < kp; c += C) {
      __m512i wv[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      if (r < nr && pf) __builtin_prefetch(w + (n0 + r) * k + c + pf);
      if (r < nr) convert64(w + (n0 + r) * k + c, k - c, t, wv);
      _mm512_store_si512(wbuf + r * kp + c, wv[0]);
      _mm512_store_si512(wbuf + r * kp + c + 32, wv[1]);
    }
}

static int w8a16_bf16(const uint16_t *x, int64_t m, int64_t k, const uint8_t *w, int64_t n,
                       const float *channel_scale, const float *block_scale, uint16_t *out,
                       int threads, int64_t pf, int streamed) {
  const int64_t kp = (k + C - 1) / C * C, tiles = (n + NB - 1) / NB, kb = (k + BLOCK - 1) / BLOCK;
  const tables t = bf16_tables();
  const int blocked = block_scale != NULL, rows = streamed ? MB : blocked ? MB / 2 : MB;
  const int direct = streamed || m <= rows;
  uint16_t *xp = aligned_alloc(64, sizeof(uint16_t) * m * kp);
  if (!xp) return 1;
  int failed = 0;
  for (int64_t i = 0; i < m; ++i) /* before the threads start: one barrier a call, at the end */
    for (int64_t j = 0; j < kp; ++j) {
      const int64_t c = j / C * C, q = j % C, h = q / 32, l = q % 32;
      const int64_t src = c + 16 * (l / 8) + 8 * h + l % 8;
      xp[i * kp + j] = src < k ? x[i * k + src] : 0;
    }
#pragma omp parallel num_threads(threads)
  {
    uint16_t *wbuf = direct ? NULL : aligned_alloc(64, sizeof(uint16_t) * NB * kp);
    if (!direct && !wbuf) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(static) nowait
    for (int64_t tile = 0; tile < tiles; ++tile) {
      if (!direct && !wbuf) continue; /* the loop is shared: this thread's tiles go undone */
      const int64_t n0 = tile * NB, nr = n - n0 < NB ? n - n0 : NB;
      if (!direct) buffer_tile(w, k, kp, n0, nr, NB, pf, &t, wbuf);
      for (int64_t i = 0; i < m; i += rows) {
        const int mr = m - i < rows ? (int)(m - i) : rows;
        float sums[MB * NB];
        if (streamed)
          stream_pass(mr, blocked, xp, kp, i, w, k, n0, nr, pf, &t, block_scale, kb, sums);
        else
          rows_pass(mr, direct ? SRC_FP8 : SRC_BUF, blocked, xp, kp, i, w, k, n0, nr, pf, wbuf,
                    &t, block_scale, kb, n, sums);
        for (int64_t ii = 0; ii < mr; ++ii)
          for (int64_t r = 0; r < nr; ++r) {
            const float sc = channel_scale ? channel_scale[n0 + r] : 1.f;
            out[(i + ii) * n + n0 + r] = f32_to_bf16(sums[ii * NB + r] * sc);
          }
      }
    }
    free(wbuf);
  }
  free(xp);
  return failed;
}
#endif

/* the kernel's build: 3 AVX512-VBMI and -BF16 (byte lookups, bf16 dot products), 2 AVX-512,
 * 1 AVX2, 0 neither (the last three: fp32 FMAs) */
int weight_only_isa(void) {
#if defined(BF16_PATH)
  return 3;
#elif defined(__AVX512F__)
  return 2;
#elif defined(__AVX2__)
  return 1;
#else
  return 0;
#endif
}

/* out (m, n) bf16 = x (m, k) bf16 @ (w (n, k) e4m3fn * scales).T: channel_scale (n) or
 * block_scale (ceil(n/128), ceil(k/128)), the other NULL; on `threads` threads; prefetch > 0:
 * each weight line is prefetched that many bytes ahead of its read along its row (into the next
 * rows past a row's end), 0: left to the hardware, whose stream prefetcher stops at every 4 KiB
 * page (one row where K = 4096); streamed: each thread reads its weight rows one after another
 * (stream_rows; built with the bf16 dot products only). Returns 0, 1 where a buffer could not be
 * allocated (out is then incomplete), 2 where streamed is asked of a build without it. */
int w8a16_linear(const uint16_t *x, int64_t m, int64_t k, const uint8_t *w, int64_t n,
                  const float *channel_scale, const float *block_scale, uint16_t *out,
                  int threads, int64_t prefetch, int streamed) {
#if defined(BF16_PATH)
  return w8a16_bf16(x, m, k, w, n, channel_scale, block_scale, out, threads, prefetch, streamed);
#else
  if (streamed) return 2;
  return w8a16_fp32(x, m, k, w, n, channel_scale, block_scale, out, threads, prefetch);
#endif
}

/* out (n, k) bf16 = w (n, k) e4m3fn * scales (as w8a16_linear), rounded once; for an mm after */
void fp8_weight_to_bf16(const uint8_t *w, int64_t n, int64_t k, const float *channel_scale,
                        const float *block_scale, uint16_t *out, int threads) {
  const int64_t kb = (k + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < n; ++r) {
    const float s = channel_scale ? channel_scale[r] : 1.f;
    int64_t j = 0;
    for (; j + V <= k; j += V) {
      vh h = f32_to_bf16_v(fp8_to_f32(w + r * k + j, multiplier(block_scale, kb, r, j)) * s);
      memcpy(out + r * k + j, &h, sizeof h);
    }
    if (j < k) {
      vh h = f32_to_bf16_v(fp8_tail_to_f32(w + r * k + j, k - j, multiplier(block_scale, kb, r, j)) * s);
      memcpy(out + r * k + j, &h, sizeof(uint16_t) * (k - j));
    }
  }
}

/* MoE decode: one MoE layer's routed experts on the T tokens of a decode step in one call, only
 * the chosen experts' weights read, each once: out (T, D) bf16 = sum over each token's
 * assignments of weight * w_out_e (act(w_in_e x)), fp32 accumulation, rounded to bf16 once.
 * Weights in nn.Linear's layout, (out features, in features) per expert as w8a16_linear reads
 * them: w_in (E, H, D), H = 2F ([gate; up]) for the gated activations, else F; w_out (E, D, F);
 * e4m3fn bytes with 128 x 128 block scales (E, ceil(H/128), ceil(D/128)) and (E, ceil(D/128),
 * ceil(F/128)) (fp8), or bf16 (the same dispatch on bf16 experts). Stage 1, items (expert, TILE
 * columns of F): the expert's rows' pre-activations and their activation, in the rows' format
 * (bf16 where the dot products are); stage 2, items of TILE output columns of D: every chosen
 * expert's rows in expert order, times their routing weight, added into the tile's fp32 sum per
 * token (where the dot products are bf16, as 16 fp32 lanes each, summed once at the end). Each
 * item fetches the next one's weight rows into L2 while it computes: the experts' rows lie apart,
 * in runs too short for the hardware's prefetchers. One parallel region, a barrier between the
 * stages; no sum is shared and its order is fixed: the same bits on any thread count. */

enum { RELU = 0, GELU = 1, SWIGLU = 2, SWIGLU_CLAMPED = 3 }; /* fused_c.py's ACTIVATIONS */

/* e^x, |relative error| < 2e-7 on [-87, 88]; 0 below (e^-87: fp32's smallest normal), inf
 * above; NaN stays NaN (so sigmoid(-200) is 0 and silu(-200) -0, as in torch) */
static inline float exp_f32(float x) {
  static const float coef[] = {1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};
  if (x != x || x > 88.f) return x > 88.f ? __builtin_inff() : x;
  if (x < -87.f) return 0.f;
  const float n = (float)(int)(x * 1.44269504f + (x < 0 ? -0.5f : 0.5f));
  const float r = x - n * 0.693145752f - n * 1.42860677e-6f; /* ln 2 in two parts */
  float p = 1.f / 720, scale;
  for (int i = 0; i < 6; ++i) p = p * r + coef[i];
  const uint32_t bits = (uint32_t)((int)n + 127) << 23; /* 2^n */
  memcpy(&scale, &bits, 4);
  return p * scale;
}

static inline float sigmoid_f32(float x) { return 1.f / (1.f + exp_f32(-x)); }

/* the activation of pre-activation g (and u, a gated one's up half), as experts.activate: relu,
 * gelu (tanh), silu(g) * u, or gpt-oss's clamped SwiGLU; NaN stays NaN */
static inline float activation(int act, float g, float u, float limit, float alpha) {
  if (act == RELU) return g < 0.f ? 0.f : g;
  if (act == GELU) return g * sigmoid_f32(2 * 0.7978845608f * (g + 0.044715f * g * g * g));
  if (act == SWIGLU) return g * sigmoid_f32(g) * u;
  g = g > limit ? limit : g;
  u = u > limit ? limit : u < -limit ? -limit : u;
  return (u + 1.f) * g * sigmoid_f32(alpha * g);
}

#if defined(BF16_PATH)
typedef uint16_t xel; /* rows the dot products read: bf16, in convert64's order for FP8 weights */
enum { XPAD = C, TILE = NBMAX, LANES = V }; /* a stage's tile of rows; its sums' lanes */

/* where column j of a row lies */
static inline int64_t x_at(int64_t j, int fp8) {
  const int64_t q = j % C;
  return fp8 ? j - q + 32 * ((q >> 3) & 1) + 8 * (q >> 4) + (q & 7) : j;
}

static inline void put_bf16(xel *row, int64_t j, uint16_t v, int fp8) { row[x_at(j, fp8)] = v; }
static inline void put_f32(xel *row, int64_t j, float v, int fp8) {
  row[x_at(j, fp8)] = f32_to_bf16(v);
}
static inline float lane_sum(const float *p) { return _mm512_reduce_add_ps(_mm512_loadu_ps(p)); }

typedef struct {
  tables t;
  uint16_t *wbuf; /* a tile converted once, where its x rows outnumber the registers */
} scratch;

static int scratch_init(scratch *s, int64_t kp, int64_t most) {
  (void)most;
  s->t = bf16_tables();
  s->wbuf = aligned_alloc(64, sizeof(uint16_t) * TILE * kp + 64);
  return s->wbuf != NULL;
}

static void scratch_free(scratch *s) { free(s->wbuf); }

/* tile_rows of moe_decode: TILE rows; mr (1 for FP8, its block scales take the registers), src
 * and lanes as constants (a copy each) */
static void moe_pass(int mr, int src, int lanes, const uint16_t *xp, int64_t kp, int64_t i0,
                     const void *w, int64_t k, int64_t n0, int64_t nr, int64_t pf,
                     const uint16_t *wbuf, const tables *t, const float *block_scale, int64_t n,
                     float *sums, float *const *dst, const float *mult) {
  const int64_t kb = (k + BLOCK - 1) / BLOCK;
#define MOE(MR, SRC, BLOCKED, LANES)                                                   \
  tile_rows(xp, kp, i0, MR, TILE, SRC, BLOCKED, LANES, w, k, n0, nr, pf, wbuf, t, block_scale, \
            kb, n, sums, dst, mult)
  switch (lanes * 16 + src * 4 + mr) {
    case SRC_FP8 * 4 + 1: MOE(1, SRC_FP8, 1, 0); break;
    case SRC_BUF * 4 + 1: MOE(1, SRC_BUF, 1, 0); break;
    case SRC_BF16 * 4 + 1: MOE(1, SRC_BF16, 0, 0); break;
    case SRC_BF16 * 4 + 2: MOE(2, SRC_BF16, 0, 0); break;
    case 16 + SRC_FP8 * 4 + 1: MOE(1, SRC_FP8, 1, 1); break;
    case 16 + SRC_BUF * 4 + 1: MOE(1, SRC_BUF, 1, 1); break;
    case 16 + SRC_BF16 * 4 + 1: MOE(1, SRC_BF16, 0, 1); break;
    case 16 + SRC_BF16 * 4 + 2: MOE(2, SRC_BF16, 0, 1); break;
  }
#undef MOE
}

/* x rows i < m of xs (row stride kp) . weight rows n0 + r < n0 + TILE of the n rows of k at w
 * (from nr on: 0; with its block scales where fp8): into sums[i * TILE + r], or (dst) their
 * lanes times mult[i] added to dst[i] + LANES r */
static void dot_tile(const xel *xs, int64_t kp, int64_t m, const void *w, int fp8, int64_t k,
                     int64_t n0, int64_t nr, int64_t n, const float *block_scale, int64_t pf,
                     scratch *s, float *sums, float *const *dst, const float *mult) {
  const int rows = fp8 ? 1 : 2, lanes = dst != NULL;
  int src = fp8 ? SRC_FP8 : SRC_BF16;
  if (fp8 && m > rows) buffer_tile(w, k, kp, n0, nr, TILE, pf, &s->t, s->wbuf), src = SRC_BUF;
  for (int64_t i = 0; i < m; i += rows)
    moe_pass(m - i < rows ? (int)(m - i) : rows, src, lanes, xs, kp, i, w, k, n0, nr, pf, s->wbuf,
             &s->t, block_scale, n, lanes ? NULL : sums + i * TILE, lanes ? dst + i : NULL,
             lanes ? mult + i : NULL);
}
#else
typedef float xel;
enum { XPAD = V, TILE = NR, LANES = 1 };

static inline void put_bf16(xel *row, int64_t j, uint16_t v, int fp8) {
  (void)fp8;
  row[j] = bf16_to_f32(v);
}
static inline void put_f32(xel *row, int64_t j, float v, int fp8) {
  (void)fp8;
  row[j] = v;
}
static inline float lane_sum(const float *p) { return *p; }

typedef struct {
  float *wbuf; /* a K chunk of a tile, converted */
  float *sums; /* a tile's sums, before they are added */
} scratch;

static int scratch_init(scratch *s, int64_t kp, int64_t most) {
  (void)kp;
  s->wbuf = aligned_alloc(64, sizeof(float) * NR * KC);
  s->sums = malloc(sizeof(float) * (most * NR + 1));
  return s->wbuf && s->sums;
}

static void scratch_free(scratch *s) { free(s->wbuf), free(s->sums); }

static void dot_tile(const xel *xs, int64_t kp, int64_t m, const void *w, int fp8, int64_t k,
                     int64_t n0, int64_t nr, int64_t n, const float *block_scale, int64_t pf,
                     scratch *s, float *sums, float *const *dst, const float *mult) {
  (void)n;
  float *out = dst ? s->sums : sums;
  tile_sums_fp32(xs, kp, m, w, fp8, k, n0, nr, block_scale, pf, s->wbuf, out);
  for (int64_t i = 0; dst && i < m; ++i)
    for (int r = 0; r < NR; ++r) dst[i][r] += mult[i] * out[i * NR + r];
}
#endif

static inline int64_t blocks(int64_t n) { return (n + BLOCK - 1) / BLOCK; }

/* the n bytes at p fetched into L2, while other work runs */
static inline void prefetch(const char *p, int64_t n) {
  for (int64_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 2);
}
static inline size_t whole_lines(size_t bytes) { return bytes / 64 * 64 + 64; } /* > 0 */

/* Returns 0; 1 where a buffer could not be allocated (out is then incomplete); before reading
 * anything through an index: 2 where a token index is outside [0, t), 3 an expert index outside
 * [0, experts), 4 where counts (experts) does not count expert_idx per expert. The a assignments
 * (token_idx, expert_idx, weight) in any order; experts >= 1. pf: bytes ahead each weight line
 * is prefetched as it is read (0: none), besides each next work item's rows. */
int moe_decode(const uint16_t *x, int64_t t, int64_t d, const int64_t *token_idx,
               const int64_t *expert_idx, const float *weight, int64_t a, const int64_t *counts,
               int64_t experts, int fp8, const void *w_in, const float *s_in, int64_t h,
               const void *w_out, const float *s_out, int64_t f, int act, float limit,
               float alpha, uint16_t *out, int threads, int64_t pf) {
  const int gated = act == SWIGLU || act == SWIGLU_CLAMPED;
  const int64_t kpd = (d + XPAD - 1) / XPAD * XPAD, kpf = (f + XPAD - 1) / XPAD * XPAD;
  const int64_t tiles_f = (f + TILE - 1) / TILE, tiles_d = (d + TILE - 1) / TILE;
  const int64_t in_scales = blocks(h) * blocks(d), out_scales = blocks(d) * blocks(f);
  const size_t wsize = fp8 ? 1 : 2;
  /* ends[e + 1]: the end of expert e's rows, sorted by expert (stably); active: the chosen */
  int64_t *ends = calloc(experts + 1, sizeof(int64_t)), *fill = malloc(sizeof(int64_t) * experts);
  int64_t *active = malloc(sizeof(int64_t) * experts), *tok = malloc(sizeof(int64_t) * (a + 1));
  float *wt = malloc(sizeof(float) * (a + 1));
  xel *xs = aligned_alloc(64, whole_lines(sizeof(xel) * a * kpd));
  xel *hs = aligned_alloc(64, whole_lines(sizeof(xel) * a * kpf));
  int failed = !(ends && fill && active && tok && wt && xs && hs);
  for (int64_t i = 0; i < a && !failed; ++i) {
    if (token_idx[i] < 0 || token_idx[i] >= t) failed = 2;
    else if (expert_idx[i] < 0 || expert_idx[i] >= experts) failed = 3;
    else ++ends[expert_idx[i] + 1];
  }
  int64_t chosen = 0, most = 0;
  for (int64_t e = 0; e < experts && !failed; ++e) {
    if (ends[e + 1] != counts[e]) failed = 4;
    if (counts[e]) active[chosen++] = e;
    most = counts[e] > most ? counts[e] : most;
    fill[e] = ends[e], ends[e + 1] += ends[e];
  }
  if (!failed) { /* before the threads start: one barrier a call, between the stages */
    for (int64_t i = 0; i < a; ++i) {
      const int64_t at = fill[expert_idx[i]]++;
      tok[at] = token_idx[i], wt[at] = weight[i];
    }
    memset(xs, 0, sizeof(xel) * a * kpd), memset(hs, 0, sizeof(xel) * a * kpf);
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < d; ++j) put_bf16(xs + i * kpd, j, x[tok[i] * d + j], fp8);
  }
  const int invalid = failed;
#pragma omp parallel num_threads(threads) if (!invalid)
  {
    scratch s = {0};
    float *sums = aligned_alloc(64, whole_lines(sizeof(float) * 2 * most * TILE));
    float *acc = aligned_alloc(64, whole_lines(sizeof(float) * t * TILE * LANES));
    float **dst = malloc(sizeof(float *) * (most + 1)); /* each row's token's sums in acc */
    const int ok = !invalid && scratch_init(&s, kpd > kpf ? kpd : kpf, most) && sums && acc && dst;
    if (!ok && !invalid) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(static)
    for (int64_t item = 0; item < chosen * tiles_f; ++item) {
      if (!ok) continue; /* the loop is shared: this thread's items go undone */
      const int64_t e = active[item / tiles_f], j0 = item % tiles_f * TILE, m = counts[e];
      const int64_t nr = f - j0 < TILE ? f - j0 : TILE;
      const char *w = (const char *)w_in + e * h * d * wsize;
      const float *scale = fp8 ? s_in + e * in_scales : NULL;
      float *up = sums + most * TILE;
      if (item + 1 < chosen * tiles_f) { /* the next item's rows: gate, and up if gated */
        const int64_t next = active[(item + 1) / tiles_f], n0 = (item + 1) % tiles_f * TILE;
        const char *row = (const char *)w_in + (next * h + n0) * d * wsize;
        const int64_t bytes = (f - n0 < TILE ? f - n0 : TILE) * d * wsize;
        prefetch(row, bytes);
        if (gated) prefetch(row + f * d * wsize, bytes);
      }
      dot_tile(xs + ends[e] * kpd, kpd, m, w, fp8, d, j0, nr, h, scale, pf, &s, sums, NULL, NULL);
      if (gated)
        dot_tile(xs + ends[e] * kpd, kpd, m, w, fp8, d, f + j0, nr, h, scale, pf, &s, up, NULL,
                 NULL);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < nr; ++r) {
          const float g = sums[i * TILE + r], u = gated ? up[i * TILE + r] : 0.f;
          put_f32(hs + (ends[e] + i) * kpf, j0 + r, activation(act, g, u, limit, alpha), fp8);
        }
    }
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < tiles_d; ++tile) {
      if (!ok) continue;
      const int64_t d0 = tile * TILE, nr = d - d0 < TILE ? d - d0 : TILE;
      memset(acc, 0, sizeof(float) * t * TILE * LANES);
      for (int64_t c = 0; c < chosen; ++c) {
        const int64_t e = active[c], m = counts[e];
        const char *w = (const char *)w_out + e * d * f * wsize;
        const float *scale = fp8 ? s_out + e * out_scales : NULL;
        for (int64_t i = 0; i < m; ++i) dst[i] = acc + tok[ends[e] + i] * TILE * LANES;
        if (c + 1 < chosen || tile + 1 < tiles_d) { /* the next expert's rows of this tile */
          const int64_t next = c + 1 < chosen ? active[c + 1] : active[0];
          const int64_t n0 = c + 1 < chosen ? d0 : d0 + TILE;
          const int64_t rows = d - n0 < TILE ? d - n0 : TILE;
          prefetch((const char *)w_out + (next * d + n0) * f * wsize, rows * f * wsize);
        }
        dot_tile(hs + ends[e] * kpf, kpf, m, w, fp8, f, d0, nr, d, scale, pf, &s, NULL, dst,
                 wt + ends[e]);
      }
      for (int64_t i = 0; i < t; ++i)
        for (int64_t r = 0; r < nr; ++r)
          out[i * d + d0 + r] = f32_to_bf16(lane_sum(acc + (i * TILE + r) * LANES));
    }
    scratch_free(&s), free(sums), free(acc), free(dst);
  }
  free(ends), free(fill), free(active), free(tok), free(wt), free(xs), free(hs);
  return failed;
}
