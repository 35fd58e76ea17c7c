/* Small helpers shared by the voxconv command-line tool's subcommands.
 * Everything here is header-only (static inline) so that the tool's files
 * and its tests can include it without a link dependency. The tool uses only
 * the public header voxconv.h, never src/ internals. */
#ifndef VOXCONV_TOOL_COMMON_H
#define VOXCONV_TOOL_COMMON_H

#include "voxconv.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Exit codes: 0 = success, 1 = the work failed (missing file, library
 * error), 2 = the command line was wrong (usage printed). */
#define VT_EXIT_OK 0
#define VT_EXIT_FAIL 1
#define VT_EXIT_USAGE 2

#ifndef VOXCONV_DEFAULT_DATA_DIR
#define VOXCONV_DEFAULT_DATA_DIR "../shared/data"
#endif

/* Milliseconds on the monotonic clock (immune to wall-clock jumps). */
static inline double vt_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Writes s as a JSON string literal (quotes, escapes; NULL as ""). */
static inline void vt_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* The recorded-data folder: $VOXCONV_DATA_DIR, else the one CMake knew. */
static inline const char *vt_data_dir(void) {
  const char *dir = getenv("VOXCONV_DATA_DIR");
  return (dir && *dir) ? dir : VOXCONV_DEFAULT_DATA_DIR;
}

/* Strict integer parse: the whole string, within [lo, hi]. */
static inline int vt_parse_long(const char *s, long lo, long hi, long *out) {
  if (!s || !*s)
    return 0;
  char *end = NULL;
  errno = 0;
  const long v = strtol(s, &end, 10);
  if (errno || !end || *end != '\0' || v < lo || v > hi)
    return 0;
  *out = v;
  return 1;
}

/* Strict finite floating-point parse of the whole string. */
static inline int vt_parse_double(const char *s, double *out) {
  if (!s || !*s)
    return 0;
  char *end = NULL;
  errno = 0;
  const double v = strtod(s, &end);
  if (errno || !end || *end != '\0' || !isfinite(v))
    return 0;
  *out = v;
  return 1;
}

/* IEEE binary16 from float, round to nearest even; overflow gives Inf,
 * NaN stays NaN (quiet). Written here because the public API converts
 * nothing on the host. */
static inline uint16_t vt_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) /* Inf or NaN */
    return (uint16_t)(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  if (abs >= 0x477FF000u) /* rounds to >= 65520: overflow */
    return (uint16_t)(sign | 0x7C00u);
  if (abs < 0x38800000u) { /* below the smallest normal half: subnormal */
    if (abs < 0x33000000u) /* below half the smallest subnormal: 0 */
      return sign;
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exp; /* 14..24 */
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u)))
      half++;
    return (uint16_t)(sign | half);
  }
  /* Normal: rebias the exponent, round the 13 dropped mantissa bits. */
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
    h++; /* a carry into the exponent is the correct rounding */
  return (uint16_t)(sign | h);
}

static inline float vt_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0x1Fu) {
    x = sign | 0x7F800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static inline uint16_t vt_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)((x >> 16) | 0x40u); /* keep NaN a NaN */
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7FFFu + lsb;
  return (uint16_t)(x >> 16);
}

static inline float vt_bf16_to_f32(uint16_t b) {
  const uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Writes n floats as dtype into dst (host memory, room for n elements). */
static inline void vt_convert_from_f32(const float *src, void *dst,
                                       voxconv_dtype_t dtype, int64_t n) {
  switch (dtype) {
  case VOXCONV_DTYPE_F32:
    memcpy(dst, src, (size_t)n * sizeof(float));
    break;
  case VOXCONV_DTYPE_F16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = vt_f32_to_f16(src[i]);
    break;
  case VOXCONV_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = vt_f32_to_bf16(src[i]);
    break;
  case VOXCONV_DTYPE_F64:
    for (int64_t i = 0; i < n; i++)
      ((double *)dst)[i] = (double)src[i];
    break;
  case VOXCONV_DTYPE_I8: /* vt_quantize_i8, which returns the scale */
  case VOXCONV_DTYPE_I32: /* the tool makes no int32 data */
    break;
  }
}

/* Symmetric per-tensor int8 quantisation (voxconv.h, int8 section): q =
 * round(v / s) with s = max |v| / 127 (1 when every v is 0); returns s. */
static inline float vt_quantize_i8(const float *src, int8_t *dst, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; i++)
    m = fabsf(src[i]) > m ? fabsf(src[i]) : m;
  const float s = m > 0.0f ? m / 127.0f : 1.0f;
  for (int64_t i = 0; i < n; i++) {
    const float r = nearbyintf(src[i] / s);
    dst[i] = (int8_t)(r > 127.0f ? 127 : (r < -127.0f ? -127 : (int)r));
  }
  return s;
}

/* splitmix64: a tiny, fully deterministic generator (same stream on every
 * platform), used for synthetic scenes, weights and gradients. */
typedef struct vt_rng {
  uint64_t state;
} vt_rng_t;

static inline uint64_t vt_rng_next(vt_rng_t *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double vt_rng_uniform(vt_rng_t *r) {
  return (double)(vt_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [lo, hi). */
static inline double vt_rng_range(vt_rng_t *r, double lo, double hi) {
  return lo + (hi - lo) * vt_rng_uniform(r);
}

#endif
