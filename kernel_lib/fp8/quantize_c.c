/* Dynamic FP8 quantise of fp32, bit-exact with kernel_lib.fp8.quantize(..., nonfinite="nan"):
 * the bit arithmetic of quantize_compiled._codes. Built and loaded by quantize_c.py.
 * Two builds of the same arithmetic: plain loops the C compiler vectorises, and, where the target
 * has AVX-512 (F, BW, DQ, VL), intrinsics with fewer instructions a vector: abs, clamp and amax by
 * VRANGEPS, the exponent-dependent constants from a 32-entry table, masks for NaN and sign. */
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define AVX512 1
#include <immintrin.h>
#endif

typedef struct {
  int32_t mantissa_bits, bias, max_bits, nan_code, fnuz;
} cast_constants;

#define ABS_MASK 0x7FFFFFFF
#define EXP_MASK 0x7F800000 /* also the bits of +inf: finite magnitudes are below it */

static inline float as_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline int32_t as_int(float f) { int32_t i; memcpy(&i, &f, 4); return i; }

/* all ones where |x|'s bits `mag` are finite, else 0 */
static inline int32_t finite_mask(int32_t mag) { return (mag - EXP_MASK) >> 31; }

/* the smallest fp32 exponent the cast rounds at (FP8's subnormals share it), as fp32 bits */
static inline int32_t min_exponent(cast_constants c) { return (127 + 1 - c.bias) << 23; }

/* the fp32 bits of max |x| over the finite x[0..n) (non-negative floats order like their bits) */
static inline int32_t amax_bits_plain(const int32_t *x, int64_t n) {
  int32_t amax = 0;
  for (int64_t j = 0; j < n; ++j) {
    int32_t mag = x[j] & ABS_MASK, v = mag & finite_mask(mag);
    amax = v > amax ? v : amax;
  }
  return amax;
}

/* codes of x * scale: one float add of a power of two rounds to the FP8 grid at y's exponent
 * (see quantize_compiled._codes) */
static inline void cast_plain(const int32_t *x, uint8_t *out, int64_t n, float scale,
                              cast_constants c) {
  const int32_t shift = 23 - c.mantissa_bits, min_exp = min_exponent(c);
  for (int64_t j = 0; j < n; ++j) {
    int32_t bits = x[j], mag = bits & ABS_MASK, finite = finite_mask(mag);
    int32_t y = as_int(as_float(mag) * scale);
    y = y < c.max_bits ? y : c.max_bits;
    int32_t exp = y & EXP_MASK;
    exp = exp > min_exp ? exp : min_exp;
    int32_t magic = exp + (shift << 23);
    int32_t code = as_int(as_float(y) + as_float(magic)) - magic + ((exp - min_exp) >> shift);
    int32_t sign = (bits >> 24) & 0x80;
    if (c.fnuz) sign = code ? sign : 0; /* fnuz has no -0: 0x80 is its NaN */
    out[j] = (uint8_t)(((code | sign) & finite) | (c.nan_code & ~finite));
  }
}

#if AVX512

#define MAX_ABS 0x0B     /* VRANGEPS: max(|a|, |b|), sign cleared */
#define MIN_ABS 0x0A     /* min(|a|, |b|), sign cleared */
#define NON_FINITE 0x99  /* VFPCLASSPS: QNaN, +inf, -inf, SNaN */

static inline int32_t amax_bits(const int32_t *x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) { /* two accumulators: VRANGEPS's latency is not the limit */
    a0 = _mm512_range_ps(a0, _mm512_loadu_ps(x + j), MAX_ABS);
    a1 = _mm512_range_ps(a1, _mm512_loadu_ps(x + j + 16), MAX_ABS);
  }
  for (; j < n; j += 16) {
    __mmask16 in = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
    a0 = _mm512_range_ps(a0, _mm512_maskz_loadu_ps(in, x + j), MAX_ABS);
  }
  __m512 a = _mm512_range_ps(a0, a1, MAX_ABS);
  if (_mm512_fpclass_ps_mask(a, NON_FINITE)) /* a NaN or inf sticks: take the finite max */
    return amax_bits_plain(x, n);
  return _mm512_reduce_max_epi32(_mm512_castps_si512(a));
}

/* the format's constants as vectors, made once per call of a kernel */
typedef struct {
  __m512 max;
  __m512i min_exp, magic_lo, magic_hi, offset_lo, offset_hi, nan, sign_bit;
  int fnuz;
} prepared;

/* per fp32 exponent e (a table of 32 indexed by e mod 32: FP8's exponents span at most 31):
 * the magic power of two at e and what turns the rounded sum into the code */
static prepared prepare(cast_constants c) {
  int32_t magic[32], offset[32];
  const int32_t shift = 23 - c.mantissa_bits, first = min_exponent(c) >> 23;
  for (int32_t e = first; e < first + 32; ++e) {
    magic[e & 31] = (e + shift) << 23;
    offset[e & 31] = magic[e & 31] - ((e - first) << c.mantissa_bits);
  }
  return (prepared){
      _mm512_set1_ps(as_float(c.max_bits)),
      _mm512_set1_epi32(min_exponent(c)),
      _mm512_loadu_si512(magic),
      _mm512_loadu_si512(magic + 16),
      _mm512_loadu_si512(offset),
      _mm512_loadu_si512(offset + 16),
      _mm512_set1_epi32(c.nan_code),
      _mm512_set1_epi32(0x80),
      c.fnuz,
  };
}

static inline __m128i cast16(__m512 x, __m512 scale, const prepared *v) {
  __m512 y = _mm512_range_ps(_mm512_mul_ps(x, scale), v->max, MIN_ABS);
  __m512i e = _mm512_srli_epi32(_mm512_max_epi32(_mm512_castps_si512(y), v->min_exp), 23);
  __m512i magic = _mm512_permutex2var_epi32(v->magic_lo, e, v->magic_hi);
  __m512i sum = _mm512_castps_si512(_mm512_add_ps(y, _mm512_castsi512_ps(magic)));
  __m512i code = _mm512_sub_epi32(sum, _mm512_permutex2var_epi32(v->offset_lo, e, v->offset_hi));
  __m512i sign = _mm512_srli_epi32(_mm512_castps_si512(x), 24);
  __mmask16 signed_ = v->fnuz ? _mm512_test_epi32_mask(code, code) : 0xFFFF; /* fnuz: no -0 */
  code = _mm512_mask_ternarylogic_epi32(code, signed_, sign, v->sign_bit, 0xF8); /* a|(b&c) */
  code = _mm512_mask_mov_epi32(code, _mm512_fpclass_ps_mask(x, NON_FINITE), v->nan);
  return _mm512_cvtepi32_epi8(code);
}

/* `next`: the data the caller reads after this (or NULL), fetched into cache a line a vector */
static inline void cast(const int32_t *x, uint8_t *out, int64_t n, float scale, const prepared *v,
                        const int32_t *next) {
  const __m512 s = _mm512_set1_ps(scale);
  const float *f = (const float *)x;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    if (next) _mm_prefetch((const char *)(next + j), _MM_HINT_T0);
    _mm_storeu_si128((__m128i *)(out + j), cast16(_mm512_loadu_ps(f + j), s, v));
  }
  if (j < n) {
    __mmask16 in = (__mmask16)((1u << (n - j)) - 1);
    _mm_mask_storeu_epi8(out + j, in, cast16(_mm512_maskz_loadu_ps(in, f + j), s, v));
  }
}

#else

static inline int32_t amax_bits(const int32_t *x, int64_t n) { return amax_bits_plain(x, n); }

typedef cast_constants prepared;

static prepared prepare(cast_constants c) { return c; }

static inline void cast(const int32_t *x, uint8_t *out, int64_t n, float scale, const prepared *c,
                        const int32_t *next) {
  (void)next; /* the plain loops leave prefetching to the hardware */
  cast_plain(x, out, n, scale, *c);
}

#endif

static inline float scale_of(float amax, float fp8_max, float eps) {
  return fp8_max / (amax > eps ? amax : eps);
}

/* rows of k: each row's amax, then its cast while the row is still in cache (and the next row
 * on its way in) */
void quantize_rowwise(const float *x, uint8_t *out, float *amax, int64_t rows, int64_t k,
                      cast_constants c, float fp8_max, float eps, int threads) {
  const prepared p = prepare(c);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t *row = (const int32_t *)(x + r * k);
    amax[r] = as_float(amax_bits(row, k));
    cast(row, out + r * k, k, scale_of(amax[r], fp8_max, eps), &p, r + 1 < rows ? row + k : 0);
  }
}

/* one amax over all n (a parallel max over chunks), then the cast: x is read twice */
void quantize_tensorwise(const float *x, uint8_t *out, float *amax, int64_t n, cast_constants c,
                         float fp8_max, float eps, int threads) {
  const int32_t *bits = (const int32_t *)x;
  const int64_t chunk = 1 << 14, chunks = (n + chunk - 1) / chunk;
  int32_t all = 0;
#pragma omp parallel for schedule(static) reduction(max : all) num_threads(threads)
  for (int64_t i = 0; i < chunks; ++i) {
    int64_t start = i * chunk, size = n - start < chunk ? n - start : chunk;
    int32_t v = amax_bits(bits + start, size);
    all = v > all ? v : all;
  }
  *amax = as_float(all);
  const float scale = scale_of(*amax, fp8_max, eps);
  const prepared p = prepare(c);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < chunks; ++i) {
    int64_t start = i * chunk, size = n - start < chunk ? n - start : chunk;
    const int32_t *next = start + 2 * chunk <= n ? bits + start + chunk : 0;
    cast(bits + start, out + start, size, scale, &p, next);
  }
}
