/* Dynamic FP8 quantise of fp32, bit-exact with kernel_lib.fp8.quantize(..., nonfinite="nan"):
 * the bit arithmetic of quantize_compiled._codes, written as plain loops the C compiler
 * vectorises for the CPU it is built on. Built and loaded by quantize_c.py. */
#include <stdint.h>
#include <string.h>

typedef struct {
  int32_t mantissa_bits, bias, max_bits, nan_code, fnuz;
} cast_constants;

static inline float as_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline int32_t as_int(float f) { int32_t i; memcpy(&i, &f, 4); return i; }

/* all ones where |x|'s bits `mag` are finite, else 0 */
static inline int32_t finite_mask(int32_t mag) { return (mag - 0x7F800000) >> 31; }

/* the fp32 bits of max |x| over the finite x[0..n) (non-negative floats order like their bits) */
static inline int32_t amax_bits(const int32_t *x, int64_t n) {
  int32_t amax = 0;
  for (int64_t j = 0; j < n; ++j) {
    int32_t mag = x[j] & 0x7FFFFFFF, v = mag & finite_mask(mag);
    amax = v > amax ? v : amax;
  }
  return amax;
}

/* codes of x * scale: one float add rounds to the FP8 grid (see quantize_compiled._codes) */
static inline void cast(const int32_t *x, uint8_t *out, int64_t n, float scale, cast_constants c) {
  const int32_t shift = 23 - c.mantissa_bits, min_exp = (127 + 1 - c.bias) << 23;
  const int32_t offset = (128 - c.bias) << c.mantissa_bits;
  for (int64_t j = 0; j < n; ++j) {
    int32_t bits = x[j], mag = bits & 0x7FFFFFFF, finite = finite_mask(mag);
    int32_t y = as_int(as_float(mag) * scale);
    y = y < c.max_bits ? y : c.max_bits;
    int32_t exp = y & 0x7F800000;
    exp = exp > min_exp ? exp : min_exp;
    int32_t magic = exp + (shift << 23);
    int32_t code = as_int(as_float(y) + as_float(magic)) - magic + (exp >> shift) - offset;
    int32_t sign = (bits >> 24) & 0x80;
    if (c.fnuz) sign = code ? sign : 0; /* fnuz has no -0: 0x80 is its NaN */
    out[j] = (uint8_t)(((code | sign) & finite) | (c.nan_code & ~finite));
  }
}

static inline float scale_of(float amax, float fp8_max, float eps) {
  return fp8_max / (amax > eps ? amax : eps);
}

/* rows of k: each row's amax, then its cast while the row is still in cache */
void quantize_rowwise(const float *x, uint8_t *out, float *amax, int64_t rows, int64_t k,
                      cast_constants c, float fp8_max, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t *row = (const int32_t *)(x + r * k);
    amax[r] = as_float(amax_bits(row, k));
    cast(row, out + r * k, k, scale_of(amax[r], fp8_max, eps), c);
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
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < chunks; ++i) {
    int64_t start = i * chunk, size = n - start < chunk ? n - start : chunk;
    cast(bits + start, out + start, size, scale, c);
  }
}
