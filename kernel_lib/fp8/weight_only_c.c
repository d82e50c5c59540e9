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

/* w8a16_linear in fp32 FMAs, for any vector ISA; 1 where a buffer could not be allocated */
__attribute__((unused)) static int w8a16_fp32(const uint16_t *x, int64_t m, int64_t k, const uint8_t *w, int64_t n,
                  const float *channel_scale, const float *block_scale, uint16_t *out,
                  int threads) {
  const int64_t kp = (k + V - 1) / V * V;
  const int64_t tiles = (n + NR - 1) / NR, kb = (k + BLOCK - 1) / BLOCK;
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
      memset(acc, 0, sizeof(float) * m * NR);
      for (int64_t k0 = 0; k0 < k; k0 += KC) {
        const int64_t kc = k - k0 < KC ? k - k0 : KC, kcp = (kc + V - 1) / V * V;
        for (int r = 0; r < NR; ++r)
          for (int64_t j = 0; j < kcp; j += V) {
            vf f = (vf){0};
            if (r < rows) {
              const float mult = multiplier(block_scale, kb, n0 + r, k0 + j);
              const uint8_t *p = w + (n0 + r) * k + k0 + j;
              f = kc - j >= V ? fp8_to_f32(p, mult) : fp8_tail_to_f32(p, kc - j, mult);
            }
            memcpy(wbuf + r * KC + j, &f, sizeof f);
          }
        all_rows(xf + k0, kp, m, wbuf, kcp, acc);
      }
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
enum { NB = 4, MB = 4, C = 64 };

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

/* out rows i0 .. i0 + mr of the tile's nr channels: x (permuted bf16, row stride kp) against the
 * tile's weights, converted in registers (direct) or read from wbuf (row stride kp); with block
 * scales (blocked) each 128-K block's sums are scaled before they are added. mr, direct and
 * blocked are constants where inlined (mr <= MB, <= MB / 2 blocked: the registers hold it). */
static inline __attribute__((always_inline)) void tile_rows(
    const uint16_t *xp, int64_t kp, int64_t i0, int mr, int direct, int blocked,
    const uint8_t *w, int64_t k, int64_t n0, int64_t nr, const uint16_t *wbuf, const tables *t,
    const float *channel_scale, const float *block_scale, int64_t kb, int64_t n, uint16_t *out) {
  __m512 acc[MB][NB], part[MB / 2][NB];
  for (int i = 0; i < mr; ++i)
    for (int r = 0; r < NB; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < kp; b0 += BLOCK) {
    if (blocked)
      for (int i = 0; i < mr; ++i)
        for (int r = 0; r < NB; ++r) part[i][r] = _mm512_setzero_ps();
    for (int64_t c = b0; c < b0 + BLOCK && c < kp; c += C) {
      for (int r = 0; r < NB; ++r) {
        __m512i wv[2];
        if (!direct) {
          wv[0] = _mm512_load_si512(wbuf + r * kp + c);
          wv[1] = _mm512_load_si512(wbuf + r * kp + c + 32);
        } else if (r < nr) {
          convert64(w + (n0 + r) * k + c, k - c, t, wv);
        } else {
          wv[0] = wv[1] = _mm512_setzero_si512();
        }
        for (int i = 0; i < mr; ++i) {
          const uint16_t *xr = xp + (i0 + i) * kp + c;
          __m512 *sum = blocked ? &part[i][r] : &acc[i][r];
          *sum = _mm512_dpbf16_ps(*sum, (__m512bh)_mm512_load_si512(xr), (__m512bh)wv[0]);
          *sum = _mm512_dpbf16_ps(*sum, (__m512bh)_mm512_load_si512(xr + 32), (__m512bh)wv[1]);
        }
      }
    }
    if (blocked)
      for (int r = 0; r < NB; ++r) {
        const int64_t row = n0 + r < n ? n0 + r : n - 1;
        const __m512 s = _mm512_set1_ps(block_scale[(row / BLOCK) * kb + b0 / BLOCK]);
        for (int i = 0; i < mr; ++i) acc[i][r] = _mm512_fmadd_ps(part[i][r], s, acc[i][r]);
      }
  }
  for (int i = 0; i < mr; ++i)
    for (int64_t r = 0; r < nr; ++r) {
      const float sc = channel_scale ? channel_scale[n0 + r] : 1.f;
      out[(i0 + i) * n + n0 + r] = f32_to_bf16(_mm512_reduce_add_ps(acc[i][r]) * sc);
    }
}

/* tile_rows with mr, direct and blocked as constants (one inlined copy each) */
static void rows_pass(int mr, int direct, int blocked, const uint16_t *xp, int64_t kp, int64_t i0,
                      const uint8_t *w, int64_t k, int64_t n0, int64_t nr,
                      const uint16_t *wbuf, const tables *t, const float *channel_scale,
                      const float *block_scale, int64_t kb, int64_t n, uint16_t *out) {
#define ROWS(MR, DIRECT, BLOCKED)                                                           \
  tile_rows(xp, kp, i0, MR, DIRECT, BLOCKED, w, k, n0, nr, wbuf, t, channel_scale, block_scale, \
            kb, n, out)
  switch (blocked * 16 + direct * 8 + mr) {
    case 1: ROWS(1, 0, 0); break;
    case 2: ROWS(2, 0, 0); break;
    case 3: ROWS(3, 0, 0); break;
    case 4: ROWS(4, 0, 0); break;
    case 9: ROWS(1, 1, 0); break;
    case 10: ROWS(2, 1, 0); break;
    case 11: ROWS(3, 1, 0); break;
    case 12: ROWS(4, 1, 0); break;
    case 17: ROWS(1, 0, 1); break;
    case 18: ROWS(2, 0, 1); break;
    case 25: ROWS(1, 1, 1); break;
    case 26: ROWS(2, 1, 1); break;
  }
#undef ROWS
}

static int w8a16_bf16(const uint16_t *x, int64_t m, int64_t k, const uint8_t *w, int64_t n,
                       const float *channel_scale, const float *block_scale, uint16_t *out,
                       int threads) {
  const int64_t kp = (k + C - 1) / C * C, tiles = (n + NB - 1) / NB, kb = (k + BLOCK - 1) / BLOCK;
  const tables t = bf16_tables();
  const int blocked = block_scale != NULL, rows = blocked ? MB / 2 : MB, direct = m <= rows;
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
      if (!direct)
        for (int r = 0; r < NB; ++r)
          for (int64_t c = 0; c < kp; c += C) {
            __m512i wv[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            if (r < nr) convert64(w + (n0 + r) * k + c, k - c, &t, wv);
            _mm512_store_si512(wbuf + r * kp + c, wv[0]);
            _mm512_store_si512(wbuf + r * kp + c + 32, wv[1]);
          }
      for (int64_t i = 0; i < m; i += rows) {
        const int mr = m - i < rows ? (int)(m - i) : rows;
        rows_pass(mr, direct, blocked, xp, kp, i, w, k, n0, nr, wbuf, &t, channel_scale,
                  block_scale, kb, n, out);
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
 * block_scale (ceil(n/128), ceil(k/128)), the other NULL; on `threads` threads. Returns 0, or 1
 * where a buffer could not be allocated (out is then incomplete). */
int w8a16_linear(const uint16_t *x, int64_t m, int64_t k, const uint8_t *w, int64_t n,
                  const float *channel_scale, const float *block_scale, uint16_t *out,
                  int threads) {
#if defined(BF16_PATH)
  return w8a16_bf16(x, m, k, w, n, channel_scale, block_scale, out, threads);
#else
  return w8a16_fp32(x, m, k, w, n, channel_scale, block_scale, out, threads);
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
